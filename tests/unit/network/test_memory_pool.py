"""Large request frames borrow pooled buffers: reused when free, never overwritten while still viewed."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from typing import Any

from rill.network import ConnectionInfo, ResponseChunk, SocketServer
from rill.network.memory_pool import MAX_POOLED_BYTES, MIN_POOLED_BYTES, MemoryPool

from .conftest import ToyHandler, frame, read_frame

Runner = Callable[..., None]


def test_acquire_gives_exact_views_and_reuses_released_buffers() -> None:
    pool = MemoryPool(max_bytes=8 * 1024 * 1024)
    view, buf = pool.acquire(300_000)
    assert buf is not None and len(view) == 300_000 and len(buf) == 512 * 1024
    view[:3] = b"abc"
    del view
    assert pool.release(buf)
    assert pool.idle_bytes == 512 * 1024
    again, buf2 = pool.acquire(400_000)
    assert buf2 is buf and len(again) == 400_000 and pool.reused == 1
    small, sbuf = pool.acquire(10)
    assert sbuf is not None and len(small) == 10 and len(sbuf) == MIN_POOLED_BYTES


def test_buffer_with_live_view_is_not_pooled() -> None:
    pool = MemoryPool()
    view, buf = pool.acquire(100_000)
    assert buf is not None
    kept = view[10:20]
    del view
    assert not pool.release(buf)
    assert pool.idle_bytes == 0
    del kept
    _fresh, buf2 = pool.acquire(100_000)
    assert buf2 is not buf


def test_pool_is_bounded_and_lazily_maps_what_it_cannot_serve() -> None:
    pool = MemoryPool(max_bytes=1024 * 1024)
    first_view, first = pool.acquire(1024 * 1024)
    assert first is not None and pool.owned_bytes == 1024 * 1024
    # The pool owns its bound already: the others get a buffer of their own, not kept.
    second_view, second = pool.acquire(1024 * 1024)
    assert second is None and len(second_view) == 1024 * 1024 and not second_view.readonly
    huge_view, huge = pool.acquire(MAX_POOLED_BYTES + 1)
    assert huge is None and len(huge_view) == MAX_POOLED_BYTES + 1
    assert pool.lazy == 2 and pool.owned_bytes == 1024 * 1024
    del first_view
    assert pool.release(first)
    # An idle buffer of another size makes room for the size asked for.
    _view, other = pool.acquire(300_000)
    assert other is not None and pool.idle_bytes == 0 and pool.owned_bytes == 512 * 1024


def test_buffer_given_up_is_no_longer_owned() -> None:
    pool = MemoryPool(max_bytes=1024 * 1024)
    view, buf = pool.acquire(1024 * 1024)
    assert buf is not None
    kept = view[:10]
    assert not pool.release(buf)
    assert pool.owned_bytes == 0
    _again, buf2 = pool.acquire(1024 * 1024)
    assert buf2 is not None and buf2 is not buf
    del kept


class KeepingHandler(ToyHandler):
    """Keeps a view of every request frame (as a handler that stashes records might)."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: list[memoryview] = []

    async def handle(self, conn: ConnectionInfo, data: memoryview) -> Sequence[ResponseChunk] | None:
        self.kept.append(data[:])
        return [frame(str(len(data)).encode())]


def test_large_frames_reuse_buffers_over_a_real_socket(run_server: Runner) -> None:
    payloads = [os.urandom(n) for n in (70_000, 300_000, 1_000_000, 1_000_000, 200_000, 1_000_000)]

    async def body(server: SocketServer, handler: ToyHandler) -> None:
        host, port = server.bound_address
        reader, writer = await asyncio.open_connection(host, port)
        for p in payloads:
            writer.write(frame(b"echo:" + p))
            await writer.drain()
            assert await read_frame(reader) == p
        # pipelined: several large frames queued at once
        writer.write(b"".join(frame(b"echo:" + p) for p in payloads))
        await writer.drain()
        for p in payloads:
            assert await read_frame(reader) == p
        writer.close()
        assert server.memory_pool.reused > 0

    run_server(body)


def test_kept_views_are_never_overwritten() -> None:
    payloads = [bytes([i]) * 500_000 for i in range(1, 7)]

    def run(body: Callable[[SocketServer, Any], Any]) -> None:
        async def main() -> None:
            handler = KeepingHandler()
            server = SocketServer(handler, "127.0.0.1", 0)
            await server.start()
            try:
                await asyncio.wait_for(body(server, handler), 30)
            finally:
                await server.stop(timeout=5.0)

        asyncio.run(main())

    async def body(server: SocketServer, handler: KeepingHandler) -> None:
        host, port = server.bound_address
        reader, writer = await asyncio.open_connection(host, port)
        for p in payloads:
            writer.write(frame(p))
            await writer.drain()
            assert await read_frame(reader) == b"500000"
        writer.close()
        assert [bytes(k) for k in handler.kept] == payloads
        assert server.memory_pool.reused == 0

    run(body)
