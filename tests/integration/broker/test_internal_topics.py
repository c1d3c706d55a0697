"""Clients may not produce to the coordinators' internal topics, as in Kafka: a Produce to ``__consumer_offsets``
or ``__transaction_state`` is refused with INVALID_TOPIC_EXCEPTION and writes nothing (a record with key
``b"\\x00"``, once acknowledged there, stopped the broker's next start). The coordinators go on writing them."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from tests.integration.broker._wire import Wire
from tests.integration.transactions._txn import find_txn_coordinator

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.records.builder import build_batch
from rill.records.record import Record

pytestmark = pytest.mark.timeout(120)

INTERNAL = ("__consumer_offsets", "__transaction_state")


def _produce(w: Wire, topic: str, partition: int, key: bytes) -> dict:
    batch = build_batch([Record(0, int(time.time() * 1000), key, b"v")])
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
    }
    return dict(w.call(ApiKey.PRODUCE, 9, body)["responses"][0]["partition_responses"][0])


def _end_offset(w: Wire, topic: str, partition: int) -> int:
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}],
    }
    return int(w.call(ApiKey.LIST_OFFSETS, 5, body)["topics"][0]["partitions"][0]["offset"])


def _commit_and_read_back(bootstrap: str, group: str) -> int | None:
    """Commit an offset for ``group`` (the group coordinator answers) and read it back."""
    from confluent_kafka import TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition("plain", 0, 1)], asynchronous=False)
        (tp,) = c.committed([TopicPartition("plain", 0)], timeout=15)
        return int(tp.offset)
    finally:
        c.close()


def test_produce_to_an_internal_topic_is_refused_and_the_broker_starts_again() -> None:
    with rill.testing.broker({"transaction.state.log.num.partitions": "3"}) as b:
        w = Wire(b.bootstrap_servers)
        find_txn_coordinator(w, "some-txn")  # creates __transaction_state
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "message.timeout.ms": 10000})
        p.produce("plain", b"v")
        assert p.flush(10) == 0
        assert _commit_and_read_back(b.bootstrap_servers, "g") == 1  # creates __consumer_offsets
        ends = {(t, 0): _end_offset(w, t, 0) for t in INTERNAL}
        for topic in INTERNAL:
            resp = _produce(w, topic, 0, b"\x00")
            assert resp["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION, resp
            assert resp["error_message"] == f"Cannot append to internal topic {topic}"
        # a real client is told too (librdkafka: a permanent error)
        errors: list[object] = []
        for topic in INTERNAL:
            p.produce(topic, b"v", b"\x00", partition=0, on_delivery=lambda err, _msg: errors.append(err))
        p.flush(15)
        assert len(errors) == 2 and all(e is not None and e.code() == 17 for e in errors), errors  # type: ignore[attr-defined]
        assert {(t, 0): _end_offset(w, t, 0) for t in INTERNAL} == ends
        w.close()

        b.restart()
        assert _commit_and_read_back(b.bootstrap_servers, "g2") == 1
        w = Wire(b.bootstrap_servers, timeout=30)
        assert find_txn_coordinator(w, "some-txn")["error_code"] == 0
        w.close()
