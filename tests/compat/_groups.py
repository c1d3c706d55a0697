"""Helpers for the consumer group tests: topics, records, and polling several consumers at once."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

BROKER_CONFIGS = {"group.min.session.timeout.ms": "500", "offsets.topic.num.partitions": "5"}


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def produce(bootstrap: str, topic: str, n: int, partitions: int, *, start: int = 0) -> list[bytes]:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = [f"r-{i}".encode() for i in range(start, start + n)]
    for i, v in enumerate(values):
        producer.produce(topic, v, partition=(start + i) % partitions)
    assert producer.flush(15) == 0
    return values


def consumer_config(bootstrap: str, group: str, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 3000,
        "heartbeat.interval.ms": 300,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    config.update({k.replace("_", "."): v for k, v in extra.items()})
    return config


def assignment_of(consumer: ck.Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def poll_all(
    consumers: Iterable[ck.Consumer],
    until: Callable[[], bool],
    timeout: float,
    on_message: Callable[[ck.Consumer, ck.Message], None] | None = None,
) -> bool:
    """Poll every consumer in turn until ``until()`` holds; commit after processing each message."""
    deadline = time.monotonic() + timeout
    consumers = list(consumers)
    while time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.05)
            if msg is None or msg.error():
                continue
            if on_message is not None:
                on_message(c, msg)
        if until():
            return True
    return until()


def read_to_end(consumer: ck.Consumer, topic: str, partitions: int) -> bool:
    """Whether ``consumer`` has returned every record ``topic`` holds (its position at each partition's high
    watermark): with nothing more produced, no record can come after."""
    for tp in consumer.position([ck.TopicPartition(topic, p) for p in range(partitions)]):
        if tp.offset < 0 or tp.offset < consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1]:
            return False
    return True


def partitions_cover(consumers: Iterable[ck.Consumer], total: int) -> bool:
    """Each partition is assigned to exactly one of the consumers, and every consumer has some."""
    seen: list[int] = []
    for c in consumers:
        mine = assignment_of(c)
        if not mine:
            return False
        seen.extend(mine)
    return sorted(seen) == list(range(total))
