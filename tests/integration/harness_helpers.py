"""Helpers shared by the rill.testing tests: a producer and a reader of one partition, and whether a port
refuses connections."""

from __future__ import annotations

import socket
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(topic, v, key=v)
    assert p.flush(15) == 0


def consume_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    """Up to ``expected`` values of partition 0 from its start (20 s at most), by a consumer of its own group."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-" + uuid.uuid4().hex, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    return got


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
    except ConnectionRefusedError:
        return True
    return False
