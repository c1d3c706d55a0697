"""Helpers of the share-group tests: confluent-kafka ShareConsumers against a real broker."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Producer, ShareConsumer

SHORT_LOCKS = {
    "group.share.record.lock.duration.ms": "1000",
    "group.share.heartbeat.interval.ms": "500",
}


def share_consumer(bootstrap: str, group: str, topics: list[str], *, explicit: bool = False, **extra: Any) -> Any:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, **{k.replace("_", "."): v for k, v in extra.items()}}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    consumer = ShareConsumer(conf)
    consumer.subscribe(topics)
    return consumer


def produce(bootstrap: str, topic: str, records: Iterable[tuple[int, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition, value in records:
        producer.produce(topic, value, partition=partition)
        producer.flush(10)
    assert producer.flush(10) == 0


def warm_up(bootstrap: str, consumer: Any, topic: str, partitions: int, *, explicit: bool = False,
            timeout: float = 30.0) -> None:  # fmt: skip
    """Produce a b"warm" record to each partition until ``consumer`` got one from each: the group's share
    partitions start at the log end (share.auto.offset.reset latest), so records produced before the group
    first fetched a partition are not its to deliver."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(seen) < partitions:
        assert time.monotonic() < deadline, f"no warm-up record came back from {sorted(set(range(partitions)) - seen)}"
        for p in range(partitions):
            if p not in seen:
                producer.produce(topic, b"warm", partition=p)
        producer.flush(10)
        for m in consumer.poll(0.5):
            assert m.error() is None, m.error()
            if explicit:
                consumer.acknowledge(m)
            if m.value() == b"warm":
                seen.add(m.partition())
        if explicit:
            consumer.commit_sync(10)


def poll_until(consumer: Any, want: int, *, timeout: float = 30.0, skip_warm: bool = True) -> list[Any]:
    """Poll (implicit acknowledgement) until ``want`` records other than warm-up ones came."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < want:
        assert time.monotonic() < deadline, f"{len(got)} of {want} records came"
        for m in consumer.poll(0.5):
            assert m.error() is None, m.error()
            if not (skip_warm and m.value() == b"warm"):
                got.append(m)
    return got
