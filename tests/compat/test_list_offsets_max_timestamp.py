"""ListOffsets with the max-timestamp spec (-3) through librdkafka's admin client: the offset of the first record
holding the partition's largest timestamp, even inside one (compressed) batch, and only below the last stable
offset for a read_committed client, as Kafka answers."""

from __future__ import annotations

import uuid

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from tests.compat._data import BASE_TS

pytestmark = [pytest.mark.timeout(60), pytest.mark.rill_broker_config(**{"log.retention.ms": "-1"})]


def _max_timestamp(admin: AdminClient, tp: ck.TopicPartition, **kw: object) -> tuple[int, int]:
    info = admin.list_offsets({tp: OffsetSpec.max_timestamp()}, **kw)[tp].result(15)
    return info.offset, info.timestamp


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_the_record_with_the_largest_timestamp_in_one_batch(rill_broker, codec: str) -> None:
    bootstrap = rill_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"max-ts-{codec}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    # one batch: librdkafka holds the three records for linger.ms and sends them together
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "compression.type": codec})
    for i, ts in enumerate([BASE_TS + 100, BASE_TS + 400, BASE_TS + 200]):
        producer.produce(topic, f"v{i}".encode(), partition=0, timestamp=ts)
    assert producer.flush(15) == 0
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}"})
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        batch = consumer.consume(3, timeout=15)
    finally:
        consumer.close()
    seen = [(m.offset(), m.timestamp()[1]) for m in batch]
    assert seen == [(0, BASE_TS + 100), (1, BASE_TS + 400), (2, BASE_TS + 200)]
    assert _max_timestamp(admin, ck.TopicPartition(topic, 0)) == (1, BASE_TS + 400)


def test_read_committed_sees_no_max_timestamp_past_the_last_stable_offset(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = "max-ts-open-txn"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    plain = ck.Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, b"committed", partition=0, timestamp=BASE_TS + 100)
    assert plain.flush(15) == 0
    txn = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{uuid.uuid4()}"})
    txn.init_transactions(15)
    txn.begin_transaction()
    txn.produce(topic, b"open", partition=0, timestamp=BASE_TS + 900)
    assert txn.flush(15) == 0
    tp = ck.TopicPartition(topic, 0)
    try:
        assert _max_timestamp(admin, tp) == (1, BASE_TS + 900)  # read_uncommitted: up to the high watermark
        committed = _max_timestamp(admin, tp, isolation_level=ck.IsolationLevel.READ_COMMITTED)
        assert committed[0] == -1  # the record holding the max lies past the last stable offset
    finally:
        txn.abort_transaction(15)
