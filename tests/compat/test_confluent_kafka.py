"""confluent-kafka (librdkafka 2.16) against a Rill broker: every byte and offset round-trips."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.compat._data import CODECS, N_RECORDS, make_records


def _produce(bootstrap: str, topic: str, codec: str, records: list, **extra: object) -> None:
    conf = {
        "bootstrap.servers": bootstrap,
        "compression.type": codec,
        "linger.ms": 5,
        "enable.idempotence": True,
        "acks": "all",
    }
    conf.update(extra)
    p = Producer(conf)
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)

    for r in records:
        while True:
            try:
                p.produce(
                    topic,
                    r.value,
                    r.key,
                    partition=0,
                    headers=r.headers,
                    timestamp=r.timestamp,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    assert not errors, errors[:3]


def _consume_all(bootstrap: str, topic: str, n: int, partition: int = 0, start: int = 0) -> list:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"compat-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    c.assign([TopicPartition(topic, partition, start)])
    got = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < n and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=1.0):
                if m.error() is not None:
                    raise AssertionError(m.error())
                got.append(m)
    finally:
        c.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(rill_broker, codec: str) -> None:
    bootstrap = rill_broker.bootstrap_servers
    topic = f"cfk-{codec}"
    records = make_records(seed=codec)
    _produce(bootstrap, topic, codec, records)
    got = _consume_all(bootstrap, topic, N_RECORDS)
    assert len(got) == N_RECORDS
    for i, (m, r) in enumerate(zip(got, records, strict=True)):
        assert m.offset() == i
        assert m.key() == r.key
        assert m.value() == r.value
        assert m.headers() == r.headers
        assert m.timestamp() == (1, r.timestamp)  # TIMESTAMP_CREATE_TIME


def test_admin_create_describe_delete(rill_broker) -> None:
    admin = AdminClient({"bootstrap.servers": rill_broker.bootstrap_servers})
    fs = admin.create_topics(
        [NewTopic("admin-t", num_partitions=3, replication_factor=1, config={"retention.ms": "3600000"})]
    )
    fs["admin-t"].result(10)
    md = admin.list_topics(timeout=10)
    assert len(md.topics["admin-t"].partitions) == 3
    dup = admin.create_topics([NewTopic("admin-t", num_partitions=1, replication_factor=1)])
    with pytest.raises(Exception) as ei:
        dup["admin-t"].result(10)
    assert ei.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    admin.delete_topics(["admin-t"])["admin-t"].result(10)
    deadline = time.monotonic() + 10
    while "admin-t" in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "admin-t" not in admin.list_topics(timeout=10).topics
