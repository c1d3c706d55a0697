"""The bytes of requests in flight over real sockets: taken as they arrive, bounded on all connections by
``max_queued_bytes`` (Kafka's queued.max.request.bytes) with reading paused, never refused, and a frame
larger than the bound still completes."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from rill.network import SocketServer

from .conftest import ToyHandler, frame, read_frame, wait_for

pytestmark = pytest.mark.timeout(60)

Runner = Callable[..., None]
MIB = 1024 * 1024


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS line")


async def connect(server: SocketServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = server.bound_address
    return await asyncio.open_connection(host, port)


def test_declared_size_takes_no_memory(run_server: Runner) -> None:
    """Frames declaring 100 MiB and sending a little count what arrived; other clients are served."""

    async def body(server: SocketServer, handler: ToyHandler) -> None:
        hogs = [await connect(server) for _ in range(10)]
        before = _rss_mib()
        for _, w in hogs:
            w.write(struct.pack(">i", 100 * MIB) + b"echo:" + b"x" * 95)
        await asyncio.sleep(0.5)
        grown = _rss_mib() - before
        assert grown < 64, f"RSS grew by {grown:.0f} MiB for 10 frames of 100 MiB declared"
        await wait_for(lambda: server.request_bytes == 10 * 100)
        assert server.memory_pool.owned_bytes == 0 and server.memory_pool.lazy == 10
        r, w = await connect(server)
        w.write(frame(b"echo:served"))
        assert await asyncio.wait_for(read_frame(r), 2.0) == b"served"
        for _, hog_w in hogs:
            hog_w.transport.abort()
        await wait_for(lambda: server.request_bytes == 0)
        w.close()

    run_server(body)


def test_frames_interleaved_past_the_bound_all_complete(run_server: Runner) -> None:
    """Four 2 MiB frames arriving interleaved under a 1 MiB bound: the bound is reached with every frame
    half read, and each completes in turn (one connection in the middle of a frame reads on)."""
    payloads = [bytes([65 + i]) * (2 * MIB) for i in range(4)]
    peak = [0]

    async def body(server: SocketServer, handler: ToyHandler) -> None:
        conns = [await connect(server) for _ in payloads]

        async def send(w: asyncio.StreamWriter, data: bytes) -> None:
            for i in range(0, len(data), 64 * 1024):
                w.write(data[i : i + 64 * 1024])
                await w.drain()
                await asyncio.sleep(0.001)

        async def watch() -> None:
            while True:
                peak[0] = max(peak[0], server.request_bytes)
                await asyncio.sleep(0.001)

        watcher = asyncio.ensure_future(watch())
        senders = [
            asyncio.ensure_future(send(w, frame(b"echo:" + p))) for (_, w), p in zip(conns, payloads, strict=True)
        ]
        answers = await asyncio.wait_for(asyncio.gather(*(read_frame(r) for r, _ in conns)), 30)
        await asyncio.gather(*senders)
        watcher.cancel()
        assert answers == payloads
        await wait_for(lambda: server.request_bytes == 0)
        assert not server.memory_waiters and server.memory_owner is None
        for _, w in conns:
            w.close()

    run_server(body, max_queued_bytes=MIB)
    assert peak[0] >= MIB  # the bound was reached


def test_bytes_held_at_the_bound_pause_other_readers(run_server: Runner) -> None:
    """Two stalled frames holding 1.4 MB of a 1 MB bound: a client that reads is paused after that read
    (not refused) and reads on once a stalled connection closes and its bytes are let go of."""

    async def body(server: SocketServer, handler: ToyHandler) -> None:
        stalled = [await connect(server) for _ in range(2)]
        for i, (_, w) in enumerate(stalled):
            w.write(struct.pack(">i", 2 * MIB) + b"x" * 700_000)
            held = 700_000 * (i + 1)
            await wait_for(lambda: server.request_bytes >= held)  # noqa: B023 (awaited at once)
        await wait_for(lambda: server.request_bytes == 1_400_000)
        r, w = await connect(server)
        w.write(frame(b"echo:first"))
        assert await read_frame(r) == b"first"  # it had arrived: read, answered, then reading paused
        w.write(frame(b"echo:second"))
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(read_frame(r), 0.3)
        assert server.connection_count == 3
        stalled[0][1].transport.abort()
        assert await asyncio.wait_for(read_frame(r), 5.0) == b"second"
        stalled[1][1].transport.abort()
        await wait_for(lambda: server.request_bytes == 0 and not server.memory_waiters)
        w.close()

    run_server(body, max_queued_bytes=1_000_000)


def test_handler_failure_and_small_partial_frames_let_their_bytes_go(run_server: Runner) -> None:
    async def body(server: SocketServer, handler: ToyHandler) -> None:
        r, w = await connect(server)
        w.write(frame(b"boom") + frame(b"echo:never") + frame(b"x" * 100)[:50])
        assert await asyncio.wait_for(r.read(), 5.0) == b""
        await wait_for(lambda: server.request_bytes == 0)
        r2, w2 = await connect(server)
        w2.write(frame(b"echo:" + b"y" * 70_000) + frame(b"echo:z")[:6])
        assert await read_frame(r2) == b"y" * 70_000
        await wait_for(lambda: server.request_bytes == 6 and server.memory_pool.owned_bytes > 0)
        w2.write(frame(b"echo:z")[6:])
        assert await read_frame(r2) == b"z"
        await wait_for(lambda: server.request_bytes == 0)
        w2.close()

    run_server(body, max_queued_bytes=10 * MIB)


def test_buffers_of_a_closed_connection_go_back_to_the_pool(run_server: Runner) -> None:
    """Frames queued or half read when their connection closes, or whose handler failed, give their buffers
    back: the pool does not count them as lent out for ever (and so does not run dry)."""

    async def body(server: SocketServer, handler: ToyHandler) -> None:
        pool = server.memory_pool
        _r, w = await connect(server)
        big = frame(b"echo:" + b"q" * 300_000)
        w.write(frame(b"sleep:0.3:slow") + big + big + big[:200_000])
        await wait_for(lambda: server.request_bytes >= 2 * 300_005 + 199_996)
        assert pool.owned_bytes == 3 * 512 * 1024
        w.transport.abort()
        await wait_for(lambda: server.connection_count == 0)
        await wait_for(lambda: server.request_bytes == 0)
        assert pool.idle_bytes == pool.owned_bytes == 3 * 512 * 1024
        r2, w2 = await connect(server)
        w2.write(frame(b"sleep:0.2:x") + frame(b"boom") + big + big)
        assert await read_frame(r2) == b"x"
        assert await asyncio.wait_for(r2.read(), 5.0) == b""
        await wait_for(lambda: server.request_bytes == 0)
        assert pool.idle_bytes == pool.owned_bytes == 3 * 512 * 1024 and pool.allocated == 3

    run_server(body)


def test_a_stalled_frame_at_the_bound_does_not_hold_up_the_others(run_server: Runner) -> None:
    """The connection whose read crossed the bound in the middle of a frame reads on; when it then sends
    nothing, another connection in the middle of a frame gets the turn and completes its frame."""

    async def body(server: SocketServer, handler: ToyHandler) -> None:
        (a_r, a_w), (_, b_w) = await connect(server), await connect(server)
        a_frame = frame(b"echo:" + b"a" * 1_500_000)
        a_w.write(a_frame[:600_000])
        await wait_for(lambda: server.request_bytes == 600_000 - 4)
        b_w.write(struct.pack(">i", 2 * MIB) + b"b" * 600_000)  # crosses the bound: b reads on, then stalls
        await wait_for(lambda: server.memory_owner is not None)
        a_w.write(a_frame[600_000:700_000])  # read, then a pauses: b has the turn
        await wait_for(lambda: len(server.memory_waiters) == 1)
        a_w.write(a_frame[700_000:])
        assert await asyncio.wait_for(read_frame(a_r), 10.0) == b"a" * 1_500_000
        await wait_for(lambda: server.request_bytes == 600_000 and not server.memory_waiters)
        a_w.close()
        b_w.close()

    run_server(body, max_queued_bytes=1_000_000)
