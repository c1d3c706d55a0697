"""``__consumer_offsets`` in a cluster: never created with fewer replicas than
``offsets.topic.replication.factor``, even when a group first asks while brokers are down."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from rill.testing.cluster import TestCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _consume(c: TestCluster, group: str, want: int, timeout: float) -> int:
    consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": group,
                         "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe(["ot"])
    got = 0
    deadline = time.monotonic() + timeout
    try:
        while got < want and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got += 1
    finally:
        consumer.close()
    return got


def test_offsets_topic_waits_for_enough_brokers(rill3: TestCluster) -> None:
    assert rill3._zk_get("/brokers/topics/__consumer_offsets") is None
    producer = Producer({"bootstrap.servers": rill3.bootstrap_servers, "acks": "all"})
    for i in range(50):
        producer.produce("ot", str(i).encode())
    assert producer.flush(30) == 0
    rill3.stop(1)
    rill3.stop(2)
    try:
        # One broker alive of the three replicas the offsets topic needs: the group waits, nothing is created.
        assert _consume(rill3, "ot-early", 50, 4.0) == 0
        assert rill3._zk_get("/brokers/topics/__consumer_offsets") is None
    finally:
        rill3.start(1)
        rill3.start(2)
    assert _consume(rill3, "ot-late", 50, 30.0) == 50
    assert all(len(rill3.isr("__consumer_offsets", p)) == 3 for p in range(5))
