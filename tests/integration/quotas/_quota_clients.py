"""Helpers of the client quota tests: quota changes over the wire, and clients whose delivered bytes are timed."""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import Consumer, Producer
from tests.integration.broker._wire import Wire

from rill.protocol import ApiKey

MB = 1_000_000


def alter_quotas(bootstrap: str, entity: dict[str, str | None], ops: dict[str, float | None]) -> dict[str, Any]:
    """One AlterClientQuotas entry (``entity``: type -> name, None for the default; a None value removes)."""
    w = Wire(bootstrap)
    try:
        body = {
            "entries": [
                {
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
                    "ops": [{"key": k, "value": v or 0.0, "remove": v is None} for k, v in ops.items()],
                }
            ],
            "validate_only": False,
        }
        response = w.call(ApiKey.ALTER_CLIENT_QUOTAS, 1, body)
    finally:
        w.close()
    assert response["entries"][0]["error_code"] == 0, response
    return response


class TimedProducer(threading.Thread):
    """Produces ``payload``-sized records flat out until stopped; keeps (time, bytes) of every delivery and every
    throttle librdkafka reports."""

    def __init__(
        self, bootstrap: str, topic: str, client_id: str, payload: int = 64 * 1024, offered: float | None = None
    ) -> None:
        super().__init__(daemon=True)
        self.offered = offered  # bytes per second the producer is given to send (None: as fast as it can)
        self.topic = topic
        self.payload = b"x" * payload
        self.deliveries: list[tuple[float, int]] = []
        self.throttles: list[float] = []
        self.stop_event = threading.Event()
        self.started = 0.0  # monotonic time of start()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "linger.ms": 5,
                "queue.buffering.max.kbytes": 8192,
                "throttle_cb": lambda event: self.throttles.append(event.throttle_time),
            }
        )

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.deliveries.append((time.monotonic(), len(msg.value())))

    def run(self) -> None:
        p = self.producer
        start, given = self.started, 0
        while not self.stop_event.is_set():
            if self.offered is not None and given > self.offered * (time.monotonic() - start):
                p.poll(0.005)
                continue
            try:
                p.produce(self.topic, self.payload, on_delivery=self._delivered)
                given += len(self.payload)
            except BufferError:
                p.poll(0.01)
                continue
            p.poll(0)
        p.purge()
        p.poll(0)

    def start(self) -> None:
        self.started = time.monotonic()
        super().start()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)
        del self.producer  # let go of the client (its connections) before the broker stops

    def rate(self, start: float, end: float) -> float:
        """Bytes per second delivered in [start, end)."""
        return sum(n for t, n in self.deliveries if start <= t < end) / (end - start)


class TimedConsumer(threading.Thread):
    """Consumes ``topic`` from the start; at most ``offered`` bytes per second when given (librdkafka's read-ahead
    kept small, so the fetches follow what is consumed)."""

    def __init__(self, bootstrap: str, topic: str, client_id: str, offered: float | None = None) -> None:
        super().__init__(daemon=True)
        self.offered = offered
        self.received: list[tuple[float, int]] = []
        self.throttles: list[float] = []
        self.stop_event = threading.Event()
        self.started = 0.0  # monotonic time of start()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "group.id": f"g-{client_id}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "throttle_cb": lambda event: self.throttles.append(event.throttle_time),
                "queued.max.messages.kbytes": 2048 if offered is not None else 65536,
            }
        )
        self.consumer.subscribe([topic])

    def run(self) -> None:
        c = self.consumer
        start, taken = self.started, 0
        while not self.stop_event.is_set():
            if self.offered is not None and taken > self.offered * (time.monotonic() - start):
                time.sleep(0.005)
                continue
            for msg in c.consume(1 if self.offered is not None else 100, 0.1):
                if msg.error() is None:
                    self.received.append((time.monotonic(), len(msg.value())))
                    taken += len(msg.value())
        c.close()

    def start(self) -> None:
        self.started = time.monotonic()
        super().start()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)

    def rate(self, start: float, end: float) -> float:
        return sum(n for t, n in self.received if start <= t < end) / (end - start)
