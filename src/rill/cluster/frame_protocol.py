"""The transport side of an inter-broker connection: response frames read straight into a buffer of their own.

A ``FrameProtocol`` (an asyncio ``BufferedProtocol``) lets the transport read the first 8 bytes of a response
(its size and correlation id) into a small buffer, asks its owner whether to take the frame (``on_header``: the
rest's length, or -1 to refuse it, the owner then closing the connection), and has the transport read the rest
into a ``bytearray`` of exactly that length, handed to ``on_frame`` once full. The bytes are copied once, out
of the socket; a stream reader's buffer copied a 1 MB fetch response two more times (into its buffer, then out
of it), and woke its reader at every chunk. Writes go to the transport; ``drain`` waits while the transport has
paused writing.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import cast

_SIZE_AND_CORRELATION = struct.Struct(">ii")


class FrameProtocol(asyncio.BufferedProtocol):
    def __init__(self, on_header: Callable[[int, int], int], on_frame: Callable[[int, bytearray], None],
                 on_lost: Callable[[Exception | None], None]) -> None:  # fmt: skip
        self._on_header = on_header
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._head = bytearray(_SIZE_AND_CORRELATION.size)
        self._buf = self._head
        self._view = memoryview(self._head)
        self._pos = 0
        self._corr = 0
        self.transport: asyncio.Transport | None = None
        self._paused = False
        self._lost = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view[self._pos :]

    def buffer_updated(self, nbytes: int) -> None:
        self._pos += nbytes
        if self._pos < len(self._buf):
            return
        if self._buf is self._head:
            size, corr = _SIZE_AND_CORRELATION.unpack(self._head)
            rest = self._on_header(size, corr)
            if rest < 0:  # refused: the owner closes the connection
                return
            self._corr = corr
            if rest > 0:
                self._buf = bytearray(rest)
                self._view = memoryview(self._buf)
                self._pos = 0
                return
            self._buf = bytearray()
        frame = self._buf
        self._buf, self._view, self._pos = self._head, memoryview(self._head), 0
        self._on_frame(self._corr, frame)

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._wake_writers()
        self._on_lost(exc)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writers()

    def _wake_writers(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def drain(self) -> None:
        """Wait until the transport takes writes again; ConnectionResetError once the connection is gone."""
        if self._lost:
            raise ConnectionResetError("connection lost")
        if not self._paused:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter
        if self._lost:
            raise ConnectionResetError("connection lost")
