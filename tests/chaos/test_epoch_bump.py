"""An idempotent librdkafka producer writes a value twice when it bumps its epoch (librdkafka issue 4953).

The fault checker once read one acknowledged value at two offsets of a partition near successive leader kills.
The sequence behind it, made here on one broker with two network faults (a request held back, then every
connection cut), is the client's, and the broker answers it as Kafka's does:

1. topic ``b`` refuses acks=all writes (``min.insync.replicas`` above its ISR): the producer's request for value
   Q1 fails with NOT_ENOUGH_REPLICAS, and the one for Q2, sent behind it, is held back on the way;
2. value A1 goes to topic ``a`` and is written, but its response is held back too;
3. topic ``b`` takes writes again, and the held request for Q2 reaches the broker: Q1 is not in the log, so Q2's
   sequence does not follow, and the broker answers OUT_OF_ORDER_SEQUENCE_NUMBER (Kafka's rule);
4. librdkafka answers that by bumping its producer epoch, for every partition, once its requests in flight are
   done; the connection is cut, so A1's request ends "possibly persisted";
5. under the new epoch librdkafka sends A1 again, at sequence 0, which a broker accepts as the start of the new
   epoch (Kafka's rule): A1 is in topic ``a`` twice, acknowledged once, at the second offset.

With one request in flight (the checker's producers) step 1 never has a request behind the refused one: no
out-of-order answer, no new epoch, and the resent A1 is recognised as the batch already written.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

import rill.testing
from rill.records.batch import BatchHeader, iter_batches
from rill.testing.chaos import _producer_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def _read_frame(sock: socket.socket) -> bytes:
    size = _read_exact(sock, 4)
    return size + _read_exact(sock, int.from_bytes(size, "big"))


class FaultyLink:
    """A TCP relay between the clients and the broker (its advertised address) that forwards every frame as it
    is, except that it can hold back the next request carrying some bytes, drop the response to another, and cut
    every connection."""

    def __init__(self, broker_port: int) -> None:
        self._broker_port = broker_port
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._hold: bytes | None = None
        self._held: list[tuple[socket.socket, bytes]] = []
        self.held = threading.Event()
        self._mute: bytes | None = None
        self._muted: set[bytes] = set()  # correlation ids whose responses are dropped
        self.muted = threading.Event()  # a dropped response came back: the broker handled that request
        threading.Thread(target=self._accept, daemon=True).start()

    def hold_next(self, marker: bytes | None) -> None:
        with self._lock:
            self._hold = marker

    def mute_next(self, marker: bytes) -> None:
        with self._lock:
            self._mute = marker

    def release(self) -> None:
        with self._lock:
            for upstream, frame in self._held:
                upstream.sendall(frame)
            self._held = []

    def cut(self) -> None:
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._sockets = []

    def close(self) -> None:
        self._server.close()
        self.cut()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._broker_port))
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, self._requests), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, self._responses), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, keep: Callable[[socket.socket, bytes], bool]) -> None:
        try:
            while True:
                frame = _read_frame(src)
                with self._lock:
                    if keep(dst, frame):
                        dst.sendall(frame)
        except (OSError, ConnectionError):
            pass

    def _requests(self, upstream: socket.socket, frame: bytes) -> bool:
        if self._hold is not None and self._hold in frame:
            self._hold = None
            self._held.append((upstream, frame))
            self.held.set()
            return False
        if self._mute is not None and self._mute in frame:
            self._mute = None
            self._muted.add(frame[8:12])  # size, api key, api version, then the correlation id
        return True

    def _responses(self, _client: socket.socket, frame: bytes) -> bool:
        if frame[4:8] in self._muted:  # size, then the correlation id
            self.muted.set()
            return False
        return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def link() -> Iterator[tuple[FaultyLink, Any]]:
    port = _free_port()
    relay = FaultyLink(port)
    try:
        with rill.testing.broker(
            {
                "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{relay.port}",
            }
        ) as b:
            yield relay, b
    finally:
        relay.close()


def _set_min_isr(admin: AdminClient, value: int) -> None:
    entry = ConfigEntry("min.insync.replicas", str(value), incremental_operation=AlterConfigOpType.SET)
    for f in admin.incremental_alter_configs([ConfigResource("topic", "b", incremental_configs=[entry])]).values():
        f.result(10)


def _read(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "epoch-bump", "enable.auto.commit": False})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(out) < end and time.monotonic() < deadline:
            out += [bytes(m.value()) for m in consumer.consume(10, 0.5) if m.error() is None]
        return out
    finally:
        consumer.close()


def _batches(data_dir: Path, topic: str) -> list[BatchHeader]:
    data = (data_dir / "logs" / f"{topic}-0" / f"{0:020d}.log").read_bytes()
    return [h for _, h in iter_batches(data)]


def _run(relay: FaultyLink, b: Any, config: dict[str, Any]) -> tuple[list[bytes], list[tuple[bytes, str | None]]]:
    """The sequence of the module doc with a producer of ``config``: topic ``a``'s values, and the delivery
    reports (value, error name)."""
    bootstrap = f"127.0.0.1:{relay.port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("a", 1, 1), NewTopic("b", 1, 1)]).values():
        f.result(10)
    reports: list[tuple[bytes, str | None]] = []
    producer = Producer({**config, "bootstrap.servers": bootstrap, "retry.backoff.max.ms": 200})

    def produce(topic: str, value: bytes) -> None:
        producer.produce(topic, value, on_delivery=lambda err, msg: reports.append(
            (bytes(msg.value()), None if err is None else err.name())))  # fmt: skip

    produce("a", b"value-A0")
    produce("b", b"value-Q0")  # the producer is known on both partitions: a sequence gap is refused there
    assert producer.flush(20) == 0
    _set_min_isr(admin, 2)
    produce("b", b"value-Q1")
    producer.poll(0.5)  # refused, retried
    produce("b", b"value-Q2")
    relay.hold_next(b"value-Q2")
    relay.held.wait(5.0)  # with one request in flight Q2 is never sent behind Q1
    relay.hold_next(None)
    relay.mute_next(b"value-A1")
    produce("a", b"value-A1")
    assert relay.muted.wait(10.0), "A1 never reached the broker"
    _set_min_isr(admin, 1)
    relay.release()
    producer.poll(1.0)
    relay.cut()
    assert producer.flush(30) == 0
    return _read(bootstrap, "a"), reports


def test_librdkafka_pipelining_writes_a_value_twice_under_a_bumped_epoch(link: tuple[FaultyLink, Any]) -> None:
    """With librdkafka's default of five requests in flight, the sequence writes A1 twice: once as written at
    epoch 0, once again at epoch 1, sequence 0. When a librdkafka release stops bumping the epoch on an
    out-of-order answer to a request behind a failed one, this fails, and the checker may pipeline again."""
    relay, b = link
    config = {**_producer_config(""), "max.in.flight.requests.per.connection": 5}
    values, reports = _run(relay, b, config)
    assert relay.held.is_set()
    assert values == [b"value-A0", b"value-A1", b"value-A1"]
    assert reports.count((b"value-A1", None)) == 1  # acknowledged once, at the second offset
    first, second = _batches(b.data_dir, "a")[1:]
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (second.producer_id, 0, 1)
    assert (second.producer_epoch, second.base_sequence) == (1, 0)


def test_checker_producers_write_each_value_once(link: tuple[FaultyLink, Any]) -> None:
    relay, b = link
    values, reports = _run(relay, b, _producer_config(""))
    assert values == [b"value-A0", b"value-A1"]
    assert sorted(reports) == [(v, None) for v in (b"value-A0", b"value-A1", b"value-Q0", b"value-Q1", b"value-Q2")]
    assert {h.producer_epoch for h in _batches(b.data_dir, "a")} == {0}
