"""Exactly-once with a consumer group of KIP-848: a transactional producer commits the positions of a
``group.protocol=consumer`` consumer with its group metadata (TxnOffsetCommit checked by member epoch)."""

from __future__ import annotations

import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

CONFIGS = {
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "3",
}


@pytest.mark.rill_broker_config(**CONFIGS)
def test_offsets_sent_in_a_transaction_are_committed(rill_broker) -> None:
    bs = rill_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic("eos-in", 1, 1), NewTopic("eos-out", 1, 1)]).values():
        f.result(30)
    plain = confluent_kafka.Producer({"bootstrap.servers": bs})
    for i in range(10):
        plain.produce("eos-in", f"v{i}".encode())
    plain.flush(30)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bs, "group.id": "eos-group", "group.protocol": "consumer",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                         "isolation.level": "read_committed"})  # fmt: skip
    producer = confluent_kafka.Producer({"bootstrap.servers": bs, "transactional.id": "eos-848"})
    try:
        consumer.subscribe(["eos-in"])
        producer.init_transactions(30)
        got: list[confluent_kafka.Message] = []
        deadline = time.monotonic() + 30
        while len(got) < 10:
            assert time.monotonic() < deadline, len(got)
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg)
        producer.begin_transaction()
        for msg in got:
            producer.produce("eos-out", msg.value())
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        committed = consumer.committed([confluent_kafka.TopicPartition("eos-in", 0)], timeout=10)
        assert committed[0].offset == 10
    finally:
        consumer.close()
