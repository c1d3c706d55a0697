"""Consumers of ``group.protocol=consumer`` for the tests: each in its own thread (or process), recording what
it read and when it was given and took away each partition."""

from __future__ import annotations

import threading
import time
from typing import Any

import confluent_kafka


class Ownership:
    """Who owned which partition when: (partition, member, assigned at, revoked at or None)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[list[Any]] = []
        self.seen: set[bytes] = set()

    def assigned(self, member: str, partitions: list[Any]) -> None:
        now = time.monotonic()
        with self.lock:
            for p in partitions:
                self.spans.append([(p.topic, p.partition), member, now, None])

    def revoked(self, member: str, partitions: list[Any]) -> None:
        now = time.monotonic()
        with self.lock:
            for p in partitions:
                for span in self.spans:
                    if span[0] == (p.topic, p.partition) and span[1] == member and span[3] is None:
                        span[3] = now

    def overlaps(self) -> list[tuple[Any, Any]]:
        """Pairs of spans of one partition held by two members at once."""
        with self.lock:
            spans = [list(s) for s in self.spans]
        out = []
        for i, a in enumerate(spans):
            for b in spans[i + 1 :]:
                if a[0] != b[0] or a[1] == b[1]:
                    continue
                a_end = a[3] if a[3] is not None else float("inf")
                b_end = b[3] if b[3] is not None else float("inf")
                if a[2] < b_end and b[2] < a_end:
                    out.append((a, b))
        return out


class ConsumerThread(threading.Thread):
    def __init__(self, name: str, bootstrap: str, group: str, topic: str, ownership: Ownership, **conf: Any) -> None:
        super().__init__(name=name, daemon=True)
        self.ownership = ownership
        self.topic = topic
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 200,
                **conf,
            }
        )

    def run(self) -> None:
        try:
            self.consumer.subscribe(
                [self.topic],
                on_assign=lambda c, ps: self.ownership.assigned(self.name, ps),
                on_revoke=lambda c, ps: self.ownership.revoked(self.name, ps),
                on_lost=lambda c, ps: self.ownership.revoked(self.name, ps),
            )
            while not self.stop_event.is_set():
                msg = self.consumer.poll(0.2)
                if msg is None or msg.error():
                    continue
                with self.ownership.lock:
                    self.ownership.seen.add(msg.value())
            self.consumer.close()
        except BaseException as e:  # reported by the test
            self.error = e

    def stop(self) -> None:
        self.stop_event.set()
        self.join(60)
        assert not self.is_alive(), f"{self.name} did not stop"
        if self.error is not None:
            raise self.error
