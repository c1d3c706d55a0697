"""What one connection may take in, over real sockets: a bounded pipeline (the frames of one read never pass it),
one frame before authentication, and nothing held against the broker-wide bounds by a peer that does not read
its answers, which is closed once it has made no progress for the idle time."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rill.common import FileRegion
from rill.network import SocketServer
from rill.network.connection import MAX_QUEUED_FRAMES
from rill.network.event_loop import new_event_loop

from .conftest import ToyHandler, frame, read_frame, wait_for

pytestmark = pytest.mark.timeout(60)

Runner = Callable[..., None]


@dataclass(frozen=True, slots=True)
class SecureListener:
    listener_name: str
    host: str
    port: int
    security_protocol: str


async def connect(
    address: tuple[str, int], receive_buffer: int | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if receive_buffer is None:
        return await asyncio.open_connection(*address)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, address)
    return await asyncio.open_connection(sock=sock, limit=4096)


def test_the_frames_of_one_read_never_pass_the_connection_bound(run_server: Runner) -> None:
    async def body(server: SocketServer, handler: ToyHandler) -> None:
        r, w = await connect(server.bound_address)
        w.write(frame(b"sleep:0.3:first") + b"".join(frame(b"echo:%d" % i) for i in range(500)))
        await wait_for(lambda: len(handler.seen) == 1)
        # The first frame in the handler, the queue full; the rest of the read waits, unparsed.
        assert server.queued_requests == MAX_QUEUED_FRAMES - 1
        assert await read_frame(r) == b"first"
        assert [await read_frame(r) for _ in range(500)] == [b"%d" % i for i in range(500)]
        await wait_for(lambda: server.queued_requests == 0 and server.request_bytes == 0)
        w.close()

    run_server(body)


def test_an_unauthenticated_connection_holds_one_frame(run_server: Runner) -> None:
    """Before authentication (SASL listeners) a connection reads exactly one frame and nothing beyond it until
    that frame is answered, as Kafka's authenticator reads one receive at a time."""
    first = b"sleep:0.3:first"

    async def body(server: SocketServer, handler: ToyHandler) -> None:
        address = server.bound_addresses["SASL"]
        r, w = await connect(address)
        w.write(frame(first) + b"".join(frame(b"echo:%d" % i) for i in range(50)))
        await wait_for(lambda: len(handler.seen) == 1)
        await asyncio.sleep(0.1)  # what it would have read meanwhile
        assert server.queued_requests == 0
        assert server.request_bytes == len(first)  # the frame being handled, not a byte more
        assert await read_frame(r) == b"first"
        assert [await read_frame(r) for _ in range(50)] == [b"%d" % i for i in range(50)]
        w.close()

    run_server(body, listeners=[SecureListener("SASL", "127.0.0.1", 0, "SASL_PLAINTEXT")])


def test_sasl_max_receive_size_per_listener(run_server: Runner) -> None:
    """``listener.name.<l>.sasl.server.max.receive.size``: a frame above a listener's own bound closes the
    connection before authentication; on another listener, the broker-wide bound applies."""

    async def body(server: SocketServer, handler: ToyHandler) -> None:
        big = frame(b"echo:" + b"x" * 195)
        r, w = await connect(server.bound_addresses["SMALL"])
        w.write(big)
        with contextlib.suppress(ConnectionResetError):
            assert await asyncio.wait_for(r.read(), 5.0) == b""
        r, w = await connect(server.bound_addresses["LARGE"])
        w.write(big)
        assert await read_frame(r) == b"x" * 195
        w.close()

    run_server(
        body,
        listeners=[SecureListener("SMALL", "127.0.0.1", 0, "SASL_PLAINTEXT"),
                   SecureListener("LARGE", "127.0.0.1", 0, "SASL_PLAINTEXT")],
        sasl_max_receive_bytes=1000,
        listener_sasl_max_receive_bytes={"SMALL": 100},
    )  # fmt: skip


@pytest.mark.parametrize("answers", ["written", "sendfile"])
def test_a_peer_that_does_not_read_holds_no_broker_wide_slot(run_server: Runner, tmp_path: Path, answers: str) -> None:
    """Its answers fill the socket (written ones, or a file region sendfile cannot send): it is parked, takes
    in nothing more, holds none of queued.max.requests nor queued.max.request.bytes, other clients are served,
    and it is closed once it has made no progress for the idle time."""
    path = tmp_path / "region"
    path.write_bytes(os.urandom(8 * 1024 * 1024))
    fd = os.open(path, os.O_RDONLY)

    async def body(server: SocketServer, handler: ToyHandler) -> None:
        handler.regions.append(FileRegion(fd, 0, 8 * 1024 * 1024))
        _, hog = await connect(server.bound_address, receive_buffer=4096)
        ask = frame(b"echo:" + b"a" * 60_000) if answers == "written" else frame(b"file:0")
        hog.write(ask * 200 + b"".join(frame(b"echo:" + b"p" * 100_000) for _ in range(30)))
        await wait_for(lambda: any(c.stuck_writing for c in server._connections))
        hog_conn = next(iter(server._connections))
        await wait_for(lambda: hog_conn.parked)
        assert server.queued_requests == 0 and server.request_bytes == 0
        assert hog_conn.in_flight_bytes <= 4 * 1024 * 1024 + 300_000  # its pipeline and one read, no more
        r, w = await connect(server.bound_address)
        loop = asyncio.get_running_loop()
        i = 0
        # More requests than queued.max.requests, one after another, until the peer that takes no byte of its
        # answers is closed after the idle time (they would never go out).
        while not hog_conn.closed:
            i += 1
            assert i < 1000, "the peer that does not read was not closed"
            started = loop.time()
            w.write(frame(b"echo:%d" % i))
            assert await asyncio.wait_for(read_frame(r), 1.0) == b"%d" % i
            assert loop.time() - started < 1.0
            await asyncio.sleep(0.01)
        assert server.connection_count == 1
        w.close()
        hog.transport.abort()

    try:
        run_server(body, max_queued_requests=10, max_queued_bytes=1024 * 1024, idle_timeout_ms=1000,
                   send_buffer_bytes=65536)  # fmt: skip
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def bounded_server() -> Iterator[dict[str, tuple[str, int]]]:
    """A server in a thread with a small broker-wide bound, a PLAINTEXT and a SASL listener."""
    loop = new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    listeners = [SecureListener("PLAIN", "127.0.0.1", 0, "PLAINTEXT"),
                 SecureListener("SASL", "127.0.0.1", 0, "SASL_PLAINTEXT")]  # fmt: skip
    server = SocketServer(ToyHandler(), listeners=listeners, max_queued_requests=8)
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    yield server.bound_addresses
    asyncio.run_coroutine_threadsafe(server.stop(timeout=2), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def _recv_frame(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return bytes(data)

    return exact(struct.unpack(">i", exact(4))[0])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.sampled_from([0, 1, 30, 200, 5000, 70_000]), min_size=1, max_size=120),
    cuts=st.lists(st.integers(min_value=1, max_value=300_000), max_size=6),
    listener=st.sampled_from(["PLAIN", "SASL"]),
)
def test_whatever_the_bounds_hold_back_every_request_is_answered_in_order(
    bounded_server: dict[str, tuple[str, int]], sizes: list[int], cuts: list[int], listener: str
) -> None:
    """Frames of every size, cut anywhere, from two connections at once: the bounds (the pipeline, the broker-wide
    queue of 8, one frame before authentication) hold some back, and every one is answered, in order."""
    payloads = [b"%d:" % i + bytes([65 + i % 26]) * size for i, size in enumerate(sizes)]
    stream = b"".join(frame(b"echo:" + p) for p in payloads)
    with (
        socket.create_connection(bounded_server[listener], timeout=20) as a,
        socket.create_connection(bounded_server["PLAIN"], timeout=20) as b,
    ):
        pieces = [stream[i:j] for i, j in itertools.pairwise([0, *sorted(c % len(stream) for c in cuts), None])]

        def send() -> None:
            for piece in pieces:
                a.sendall(piece)
            b.sendall(stream)

        sender = threading.Thread(target=send)
        sender.start()
        assert [_recv_frame(a) for _ in payloads] == payloads
        assert [_recv_frame(b) for _ in payloads] == payloads
        sender.join(20)
