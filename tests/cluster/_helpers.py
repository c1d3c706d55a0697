"""Shared steps of the cluster tests: create a topic and read a topic back in full."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from rill.testing.cluster import TestCluster


def admin(c: TestCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": c.bootstrap_servers})


def create_topic(c: TestCluster, name: str, partitions: int = 3, replication_factor: int = 3,
                 **configs: str) -> None:  # fmt: skip
    client = admin(c)  # kept referenced until the futures are done: a destroyed handle fails them
    futures = client.create_topics(
        [NewTopic(name, partitions, replication_factor, config=dict(configs))], request_timeout=30
    )
    for f in futures.values():
        f.result(40)


def read_all(c: TestCluster, topic: str, partitions: int, expected: int, timeout: float = 60.0) -> dict[int, list[Any]]:
    """Every record of ``topic`` (up to ``expected`` in all), as (key, value) pairs per partition, in order."""
    consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": f"read-{topic}-{time.monotonic()}",
                         "enable.auto.commit": False, "enable.partition.eof": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[Any]] = {p: [] for p in range(partitions)}
    got = 0
    deadline = time.monotonic() + timeout
    try:
        while got < expected and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out[msg.partition()].append((msg.key(), msg.value()))
            got += 1
        # anything beyond the expected count is a duplicate: wait a little for it
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out[msg.partition()].append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return out
