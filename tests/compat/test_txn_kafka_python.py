"""kafka-python 3.0's transactional producer and read_committed consumer against a Rill broker."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.errors import KafkaError
from tests.compat._txn import (
    BROKER_CONFIGS,
    committed_offsets,
    create_topic,
    read_all,
    read_committed_kafka_python,
)

pytestmark = pytest.mark.rill_broker_config(BROKER_CONFIGS)


def _producer(bootstrap: str, transactional_id: str) -> KafkaProducer:
    return KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=transactional_id, linger_ms=5, transaction_timeout_ms=30000
    )


def test_commit_and_abort(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    create_topic(bootstrap, "kp-tx", 2)
    p = _producer(bootstrap, "kp-tx-app")
    p.init_transactions()
    p.begin_transaction()
    for i in range(100):
        p.send("kp-tx", f"aborted-{i}".encode(), partition=i % 2)
    p.flush()  # sent, then aborted (unsent records would only be dropped)
    p.abort_transaction()
    p.begin_transaction()
    for i in range(100):
        p.send("kp-tx", f"kept-{i}".encode(), partition=i % 2)
    p.commit_transaction()
    p.close()
    expected = sorted(f"kept-{i}".encode() for i in range(100))
    assert sorted(read_committed_kafka_python(bootstrap, "kp-tx", 2)) == expected
    assert sorted(read_all(bootstrap, "kp-tx", 2)) == expected
    assert len(read_all(bootstrap, "kp-tx", 2, committed=False)) == 200


def test_send_offsets_and_fencing(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    create_topic(bootstrap, "kp-in", 1)
    create_topic(bootstrap, "kp-out", 1)
    plain = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(10):
        plain.send("kp-in", f"in-{i}".encode(), partition=0)
    plain.flush()
    plain.close()
    group = f"kp-ctp-{uuid.uuid4()}"
    consumer = KafkaConsumer(
        "kp-in",
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        for msgs in consumer.poll(timeout_ms=500).values():
            got.extend(msgs)
    assert len(got) == 10
    p = _producer(bootstrap, "kp-ctp-app")
    p.init_transactions()
    p.begin_transaction()
    for m in got:
        p.send("kp-out", m.value.upper(), partition=0)
    offsets = {TopicPartition("kp-in", 0): OffsetAndMetadata(10, "", -1)}
    p.send_offsets_to_transaction(offsets, consumer.group_metadata())
    p.commit_transaction()
    consumer.close()
    assert committed_offsets(bootstrap, group, "kp-in", 1) == {0: 10}
    assert sorted(read_all(bootstrap, "kp-out", 1)) == sorted(f"IN-{i}".encode() for i in range(10))

    # A second instance with the same transactional id fences the first.
    p.begin_transaction()
    p.send("kp-out", b"zombie", partition=0)
    p.flush()
    second = _producer(bootstrap, "kp-ctp-app")
    second.init_transactions()
    with pytest.raises(KafkaError):
        p.commit_transaction()
    second.begin_transaction()
    second.send("kp-out", b"live", partition=0)
    second.commit_transaction()
    second.close()
    p.close(timeout=1)
    out = read_all(bootstrap, "kp-out", 1)
    assert b"zombie" not in out
    assert out[-1] == b"live"
