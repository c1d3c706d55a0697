"""Peers that send and never read their answers hold nobody else up.

A raw socket writes 20,000 ApiVersions v0 frames (14 bytes each) in one go and never reads; the broker takes in
a bounded number of them at a time (one before a SASL connection has authenticated), stops reading it once its
answers fill the socket, lets go of the broker-wide slots (queued.max.requests, queued.max.request.bytes) its
requests held, and closes it once it has made no progress for connections.max.idle.ms. Meanwhile a real client
(confluent-kafka) is served in well under a second, on a PLAINTEXT and on a SASL_PLAINTEXT listener, against one
and four such sockets. The same with a peer that asks for a large Fetch and then streams large Produce requests
without reading."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.security.conftest import PLAIN_JAAS

import rill.testing
from rill.protocol import ApiKey, encode_request
from rill.records.builder import build_batch
from rill.records.record import Record

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

FLOOD_FRAMES = 20_000
SERVED_WITHIN_S = 1.0
WATCH_S = 3.0  # how long the real client keeps asking while the flood is on
IDLE_MS = 3000


def _api_versions_v0(corr: int) -> bytes:
    # size, api key, version, correlation id, null client id: 14 bytes
    return struct.pack(">ihhih", 10, ApiKey.API_VERSIONS, 0, corr, -1)


FLOOD = b"".join(_api_versions_v0(i) for i in range(FLOOD_FRAMES))


class Peer:
    """A socket that writes what it is given from a thread of its own and never reads."""

    def __init__(self, address: str, receive_buffer: int | None = None) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.socket()
        if receive_buffer is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.connect((host, int(port)))
        self.port = self.sock.getsockname()[1]
        self.sent = 0

    def start(self, data: bytes | Callable[[], Iterator[bytes]]) -> None:
        def run() -> None:
            chunks = [data] if isinstance(data, bytes) else data()
            try:
                for chunk in chunks:
                    self.sock.sendall(chunk)
                    self.sent += len(chunk)
            except OSError:
                pass  # closed by the broker (or by the test)

        threading.Thread(target=run, daemon=True).start()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def flood_broker() -> Iterator[rill.testing.TestBroker]:
    configs = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connections.max.idle.ms": str(IDLE_MS),
        "queued.max.request.bytes": str(8 * 1024 * 1024),
        "socket.send.buffer.bytes": "65536",
        "num.partitions": "1",
    }
    with rill.testing.broker(configs) as b:
        yield b


def _client_conf(b: rill.testing.TestBroker, listener: str) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": b.listener_address(listener), "security.protocol": listener,
                            "socket.timeout.ms": 5000, "message.timeout.ms": 5000}  # fmt: skip
    if listener == "SASL_PLAINTEXT":
        conf.update({"sasl.mechanisms": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"})
    return conf


def _served_meanwhile(b: rill.testing.TestBroker, listener: str, topic: str, start_attack: Callable[[], None]) -> float:
    """Start the attack, then produce and list topics again and again for ``WATCH_S``: the slowest call."""
    conf = _client_conf(b, listener)
    producer = confluent_kafka.Producer(conf)
    admin = AdminClient(conf)
    producer.produce(topic, b"warm-up")
    assert producer.flush(10) == 0
    admin.list_topics(timeout=10)
    start_attack()
    worst = 0.0
    started = time.monotonic()
    while time.monotonic() - started < WATCH_S:
        t0 = time.monotonic()
        errors: list[object] = []
        producer.produce(topic, b"meanwhile", on_delivery=lambda err, _msg, out=errors: out.append(err))
        assert producer.flush(5) == 0 and errors == [None], f"produce failed: {errors}"
        t1 = time.monotonic()
        admin.list_topics(topic, timeout=5)
        t2 = time.monotonic()
        worst = max(worst, t1 - t0, t2 - t1)
    return worst


def _connections_of(b: rill.testing.TestBroker, peers: list[Peer]) -> int:
    ports = {p.port for p in peers}
    return sum(1 for c in list(b.broker._server._connections) if c.info.client_port in ports)


def _wait_closed(b: rill.testing.TestBroker, peers: list[Peer], timeout: float) -> float:
    started = time.monotonic()
    while _connections_of(b, peers):
        assert time.monotonic() - started < timeout, "the broker kept connections that never read"
        time.sleep(0.05)
    return time.monotonic() - started


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SASL_PLAINTEXT"])
@pytest.mark.parametrize("count", [1, 4])
def test_a_flood_from_peers_that_do_not_read_holds_no_one_up(
    flood_broker: rill.testing.TestBroker, listener: str, count: int
) -> None:
    b = flood_broker
    topic = f"flood-{listener.lower()}-{count}"
    peers: list[Peer] = []

    def attack() -> None:
        for _ in range(count):
            peer = Peer(b.listener_address(listener))
            peers.append(peer)
            peer.start(FLOOD)

    try:
        worst = _served_meanwhile(b, listener, topic, attack)
        assert worst < SERVED_WITHIN_S, f"a call took {worst:.2f}s while {count} peer(s) flooded {listener}"
        server = b.broker._server
        # The flooding connections hold no broker-wide slot while their answers cannot go out.
        assert server.queued_requests < server.max_queued_requests // 2
        # They make no progress: closed after connections.max.idle.ms, as Kafka closes them.
        assert _connections_of(b, peers) == count
        _wait_closed(b, peers, timeout=IDLE_MS / 1000 + 20)
    finally:
        for peer in peers:
            peer.close()


def _fetch(corr: int, topic: str, max_bytes: int) -> bytes:
    return encode_request(ApiKey.FETCH, 4, corr, "reader", {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                    "partition_max_bytes": max_bytes}]}],
    })  # fmt: skip


def _produce(corr: int, topic: str, batch: bytes) -> bytes:
    return encode_request(ApiKey.PRODUCE, 7, corr, "writer", {
        "transactional_id": None, "acks": 1, "timeout_ms": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    })  # fmt: skip


def test_large_produce_requests_from_a_peer_that_does_not_read(flood_broker: rill.testing.TestBroker) -> None:
    """The peer asks for 24 MiB of records (its answer cannot go out: it does not read) and then streams
    1 MiB Produce requests: what it sent after is not held against queued.max.request.bytes (8 MiB), the
    broker stops reading it, and other clients are served meanwhile."""
    b = flood_broker
    stored, sink = "large-stored", "large-sink"
    admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in (stored, sink)]).values():
        f.result(timeout=15)
    producer = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 20})
    for _ in range(240):
        producer.produce(stored, bytes(100_000))
    assert producer.flush(30) == 0
    now = int(time.time() * 1000)
    batch = build_batch([Record(i, now, None, bytes(100_000), []) for i in range(10)])
    peers: list[Peer] = []

    def stream() -> Iterator[bytes]:
        yield _fetch(1, stored, 32 * 1024 * 1024)
        for corr in range(2, 200):
            yield _produce(corr, sink, batch)

    def attack() -> None:
        peer = Peer(b.bootstrap_servers, receive_buffer=4096)
        peers.append(peer)
        peer.start(stream)

    try:
        worst = _served_meanwhile(b, "PLAINTEXT", "large-served", attack)
        assert worst < SERVED_WITHIN_S, f"a call took {worst:.2f}s while a peer streamed Produce requests"
        # The broker stopped reading the peer: what it took in is bounded, far below what was offered.
        assert peers[0].sent < 100 * len(batch)
        _wait_closed(b, peers, timeout=IDLE_MS / 1000 + 20)
    finally:
        for peer in peers:
            peer.close()
