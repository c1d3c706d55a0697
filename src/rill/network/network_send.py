"""The write side of a client connection (a part of ``KafkaConnection``): responses out, in order.

``bytes`` chunks go through the transport; the responses to requests that were read together (pipelined)
are gathered into one write, flushed when the connection's worker yields or its queue is empty, which saves
a send (and a client wake-up) per response. A ``FileRegion`` goes out through ``file_regions`` once the
transport's write buffer is empty: ``os.sendfile`` on plain TCP (on EAGAIN the worker waits for writability
on a duplicate of the socket descriptor: the event loop refuses watchers on a descriptor its transport owns),
read and written through the transport on TLS. While the connection's worker waits for the peer to take what
was written (the transport's write buffer is full, or ``os.sendfile`` would block), the connection is parked: it
takes in nothing and holds no broker-wide slot (see ``connection``). Writes that move mark the connection active.

``NetworkSend`` holds no state of its own: it works on the connection's transport, its output list and the
waiters it declares, all made by ``KafkaConnection``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rill.common import FileRegion
from rill.network.file_regions import sendfile_region, write_region
from rill.network.handler import ConnectionInfo, ResponseChunk

WRITE_HIGH_WATER = 1024 * 1024


class NetworkSend:
    """Writing responses for ``KafkaConnection`` (a base class of it)."""

    transport: asyncio.Transport | None
    closed: bool
    info: ConnectionInfo
    _loop: asyncio.AbstractEventLoop
    _tls: bool
    _sock_fd: int
    _watch_fd: int
    _writable: asyncio.Future[None] | None
    _write_paused: bool
    _drain_waiter: asyncio.Future[None] | None
    _out: list[bytes | bytearray | memoryview]
    _out_bytes: int
    _flush_scheduled: bool
    last_active: float

    if TYPE_CHECKING:

        def abort(self) -> None: ...

        def _pause_reading(self) -> None: ...

        def _refill(self) -> None: ...

        def _park(self) -> None: ...

        def _unpark(self) -> None: ...

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if not out:
            return
        self._out = []
        self._out_bytes = 0
        transport = self.transport
        if transport is None or self.closed:
            return
        if len(out) == 1:
            transport.write(out[0])
        else:
            transport.writelines(out)

    async def _send(self, chunks: Sequence[ResponseChunk]) -> bool:
        """Write one response; False if the connection was closed meanwhile or had to be aborted."""
        out = self._out
        for chunk in chunks:
            if isinstance(chunk, FileRegion):
                self._flush()
                if not await self._send_region(chunk):
                    return False
                out = self._out
            else:
                out.append(chunk)
                self._out_bytes += len(chunk)
        return not self.closed

    async def _send_region(self, region: FileRegion) -> bool:
        if region.length <= 0:
            return True
        await self._drain(full=True)
        if self.closed:
            return False
        assert self.transport is not None
        if self._tls:
            sent = await write_region(self.transport, region, self._drain_some, lambda: self.closed)
        else:
            sent = await sendfile_region(self._sock_fd, region, self._wait_writable, lambda: self.closed, self.info)
        if not sent and not self.closed:
            self.abort()
        return sent and not self.closed

    def pause_writing(self) -> None:
        self._write_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self.last_active = self._loop.time()
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        self._refill()

    async def _drain_some(self) -> None:
        await self._drain(full=False)

    async def _drain(self, *, full: bool) -> None:
        """Wait until the write buffer is below its low mark (``full``: completely empty)."""
        transport = self.transport
        if transport is None or self.closed:
            return
        if full:
            if transport.get_write_buffer_size() == 0:
                return
            transport.set_write_buffer_limits(high=0, low=0)
        try:
            while self._write_paused and not self.closed:
                self._park()
                self._drain_waiter = self._loop.create_future()
                await self._drain_waiter
        finally:
            self._drain_waiter = None
            self._unpark()
            if full and not self.closed:
                transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)

    async def _wait_writable(self) -> None:
        if self._watch_fd < 0:
            self._watch_fd = os.dup(self._sock_fd)
        fut = self._writable = self._loop.create_future()
        self._loop.add_writer(self._watch_fd, self._on_writable)
        self._park()
        try:
            await fut
        finally:
            self._writable = None
            if self._watch_fd >= 0:
                self._loop.remove_writer(self._watch_fd)
            self._unpark()

    def _on_writable(self) -> None:
        fut = self._writable
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _wake_writers(self) -> None:
        for fut in (self._drain_waiter, self._writable):
            if fut is not None and not fut.done():
                fut.set_result(None)

    def _release_watch_fd(self) -> None:
        if self._watch_fd >= 0:
            fd, self._watch_fd = self._watch_fd, -1
            self._loop.remove_writer(fd)
            os.close(fd)
