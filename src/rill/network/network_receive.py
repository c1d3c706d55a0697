"""The read side of a client connection (a part of ``KafkaConnection``): bytes in, frames out, as far as there is room.

Bytes on the wire, per Kafka's framing:

    offset 0   int32 big-endian  size N of the frame that follows (request frames: 0 <= N <= max)
    offset 4   N bytes           the frame (request header + body), opaque here

Every connection of a server reads into one shared scratch buffer (the event loop hands us bytes for one
connection at a time), so an idle connection holds no read buffer at all. Complete small frames are copied out
into their own ``bytearray`` (writable, so the log can stamp a produced batch's header in place); a frame larger
than ``DIRECT_READ_BYTES`` borrows a buffer from the server's ``MemoryPool`` that the socket reads straight into
(a frame the pool cannot serve gets a lazily mapped buffer, so its memory is taken as its bytes arrive, not at
the size it declares). After a large frame the next read asks for the 4-byte size alone, so a client streaming
big Produce requests has each one read straight into its own buffer.

Room. Before each frame is taken the connection is asked whether it has room for one more (``_room``: its
bounded pipeline, the broker's ``queued.max.requests``, a peer that reads its answers). When it has none, the
frames of the read not taken yet stay where they are, unparsed (the backlog: at most one read, the scratch
buffer's size), reading pauses, and they are taken when room frees, in a loop callback of their own, so one
connection's backlog is never handled in one go ahead of everybody else. A partial small frame at the end of a
read is kept (at most ``DIRECT_READ_BYTES + 4`` bytes) and put back in front of the next read.

Before authentication (SASL listeners) reads are exact: the 4-byte size, then the frame, nothing beyond, and a
connection holds at most one frame (Kafka's authenticator reads one receive at a time); a frame larger than the
listener's ``sasl.server.max.receive.size`` closes it.

``NetworkReceive`` holds no state of its own: it works on fields ``KafkaConnection`` makes.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import TYPE_CHECKING

from rill.network.handler import ConnectionInfo
from rill.network.memory_pool import MemoryPool

if TYPE_CHECKING:
    from rill.network.server import SocketServer

DIRECT_READ_BYTES = 64 * 1024
"""Frames larger than this are read straight into a buffer of their own."""
SCRATCH_BYTES = 256 * 1024
"""Size of the scratch read buffer shared by all connections of a server."""

_size = struct.Struct(">i")


class ReadBuffer:
    """The scratch buffer a server's connections read into, one read at a time."""

    __slots__ = ("data", "view")

    def __init__(self, size: int = SCRATCH_BYTES) -> None:
        self.data = bytearray(size)
        self.view = memoryview(self.data)


class NetworkReceive:
    """Reading frames for ``KafkaConnection`` (a base class of it)."""

    transport: asyncio.Transport | None
    closed: bool
    info: ConnectionInfo
    last_active: float
    _loop: asyncio.AbstractEventLoop
    _server: SocketServer
    _scratch: ReadBuffer
    _pool: MemoryPool
    _max_request_bytes: int
    _sasl_max_bytes: int
    _partial: bytes
    _partial_at: int
    _backlog: bool
    _backlog_scheduled: bool
    _direct: memoryview | None
    _direct_buf: bytearray | None
    _direct_filled: int
    _after_large: bool

    if TYPE_CHECKING:

        def abort(self) -> None: ...

        def _room(self) -> bool: ...

        def _enqueue(self, frame: memoryview, buf: bytearray | None) -> None: ...

        def _charge(self, nbytes: int) -> None: ...

        def _uncharge(self, nbytes: int) -> None: ...

        def _check_memory(self) -> None: ...

        def _stop_reading(self) -> None: ...

        def _backlog_taken(self) -> None: ...

    def get_buffer(self, sizehint: int) -> memoryview:
        direct = self._direct
        if direct is not None:
            return direct[self._direct_filled :]
        partial = self._partial
        view = self._scratch.view
        if not self.info.security.authenticated:
            return self._exact_buffer(view, partial)
        if partial:
            n = len(partial)
            view[:n] = partial
            return view[n:]
        if self._after_large:
            return view[:4]
        return view

    def _exact_buffer(self, view: memoryview, partial: bytes) -> memoryview:
        """Before authentication: room for the rest of the current frame (or its size), nothing beyond."""
        n = len(partial)
        want = 4 if n < 4 else 4 + _size.unpack_from(partial)[0]
        view[:n] = partial
        return view[n : max(want, n + 1)]

    @property
    def mid_frame(self) -> bool:
        """True while part of a frame has been read (and more of it must be read to complete it)."""
        return self._direct is not None or (bool(self._partial) and not self._backlog)

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = self._loop.time()
        direct = self._direct
        if direct is not None:
            self._direct_filled += nbytes
            self._charge(nbytes)
            if self._direct_filled == len(direct):
                self._direct = None
                buf, self._direct_buf = self._direct_buf, None
                self._after_large = True
                self._enqueue(direct, buf)
                if not self._room():
                    self._stop_reading()
            self._check_memory()
            return
        end = len(self._partial) + nbytes
        self._partial = b""
        self._charge(nbytes)  # the kept partial frame was counted when it arrived
        scratch = self._scratch
        pos = self._read_frames(scratch.data, scratch.view, 0, end)
        if pos < end and not self.closed:
            self._partial = scratch.view[pos:end].tobytes()
            self._partial_at = 0
        if self._backlog or not self._room():
            self._stop_reading()
        self._check_memory()

    def _take_backlog(self) -> None:
        """Loop callback: take the frames of the backlog while there is room (then read on, when it is empty)."""
        self._backlog_scheduled = False
        if self.closed or not self._backlog or not self._room():
            return
        self._backlog = False
        data, start = self._partial, self._partial_at
        pos = self._read_frames(data, memoryview(data), start, len(data))
        if self.closed:
            return
        if self._backlog:
            self._partial_at = pos
        else:  # what is left is the start of one small frame (or nothing)
            self._partial = data[pos:]
            self._partial_at = 0
            self._backlog_taken()

    def _read_frames(self, data: bytes | bytearray, view: memoryview, pos: int, end: int) -> int:
        """Take the frames of ``data[pos:end]`` while there is room; returns where taking stopped (the start of
        the frames left, or of an incomplete small frame). Sets ``_backlog`` when it stopped for lack of room."""
        headers = 0  # size prefixes taken (counted as they arrived, not kept)
        max_bytes = self._max_request_bytes
        while end - pos >= 4:
            size = _size.unpack_from(data, pos)[0]
            if size < 0 or size > max_bytes:
                self._reject(size)
                return end
            if size > self._sasl_max_bytes and not self.info.security.authenticated:
                self._reject(size, "sasl.server.max.receive.size before authentication")
                return end
            if not self._room():
                self._backlog = True
                break
            available = end - pos - 4
            if available >= size:
                headers += 1
                start = pos + 4
                pos = start + size
                if size > DIRECT_READ_BYTES:
                    frame, buf = self._pool.acquire(size)
                    frame[:] = view[start:pos]
                    self._after_large = True
                    self._enqueue(frame, buf)
                else:
                    # A writable copy: the log patches a produced batch's header in place and
                    # writes it as it came (no copied headers, no second buffer to write).
                    self._after_large = False
                    self._enqueue(memoryview(bytearray(view[start:pos])), None)
                continue
            if size > DIRECT_READ_BYTES:
                # Only the bytes that arrived are in memory; the rest fill in as they come.
                headers += 1
                frame, buf = self._pool.acquire(size)
                frame[:available] = view[pos + 4 : end]
                self._direct = frame
                self._direct_buf = buf
                self._direct_filled = available
                pos = end
            break
        if headers:
            self._uncharge(4 * headers)
        return pos

    def _reject(self, size: int, bound: str = "socket.request.max.bytes") -> None:
        limit = self._max_request_bytes if bound.startswith("socket") else self._sasl_max_bytes
        if (size >> 16) & 0xFFFF == 0x1603:  # a TLS record header (handshake, TLS 1.x) read as a size
            bound += "; the client speaks TLS to a listener that does not"
        self._server.peer_log(
            "frame size",
            logging.WARNING,
            "closing connection from %s: request frame size %d is outside 0..%d (%s)",
            self.info,
            size,
            limit,
            bound,
        )
        self._partial = b""
        self._backlog = False
        self.abort()
