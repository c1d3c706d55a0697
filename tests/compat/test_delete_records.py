"""DeleteRecords through a real admin client: refused on compacted topics (Kafka's PolicyViolation), and a
log start offset it moved survives a SIGKILL of the broker right after the answer."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import rill.testing

pytestmark = pytest.mark.timeout(120)


def _fill(bootstrap: str, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        producer.produce(topic, key=f"k{i}".encode(), value=f"{i}".encode(), partition=0)
    assert producer.flush(10) == 0


def test_delete_records_is_refused_on_compacted_topics(rill_broker) -> None:
    """Kafka refuses to move the start of a log that is compacted only (its latest record per key is the
    state): on ``__consumer_offsets`` that removed every group's committed offsets at the next restart."""
    bootstrap = rill_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("state", 1, 1, config={"cleanup.policy": "compact"})])["state"].result(10)
    admin.create_topics([NewTopic("both", 1, 1, config={"cleanup.policy": "compact,delete"})])["both"].result(10)
    _fill(bootstrap, "state", 10)
    _fill(bootstrap, "both", 10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("state", 0, 10)], asynchronous=False)
    consumer.close()

    for topic in ("state", "__consumer_offsets"):
        future = admin.delete_records([TopicPartition(topic, 0, -1)])[TopicPartition(topic, 0, -1)]
        with pytest.raises(KafkaException) as e:
            future.result(10)
        assert e.value.args[0].name() == "POLICY_VIOLATION", e.value
    # compact,delete also deletes: the request is taken
    result = admin.delete_records([TopicPartition("both", 0, 4)])
    assert next(iter(result.values())).result(10).low_watermark == 4


def test_a_start_offset_moved_by_delete_records_survives_a_sigkill(tmp_path) -> None:
    with rill.testing.broker(data_dir=tmp_path / "data", subprocess=True, num_partitions=1) as b:
        bootstrap = b.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("t", 1)])["t"].result(10)
        _fill(bootstrap, "t", 50)
        result = admin.delete_records([TopicPartition("t", 0, 30)])
        assert next(iter(result.values())).result(10).low_watermark == 30
        b.kill()  # before the periodic checkpoint (60 s) could have written it
        b.start()
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader"})
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition("t", 0), timeout=10, cached=False)
        finally:
            consumer.close()
        assert (low, high) == (30, 50)  # deleted records did not come back
