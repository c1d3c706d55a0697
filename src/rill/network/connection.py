"""One client connection: frame reassembly, one request at a time, in-order responses, zero-copy sends.

Bytes on the wire (both directions), per Kafka's framing:

    offset 0   int32 big-endian  size N of the frame that follows (request frames: 0 <= N <= max)
    offset 4   N bytes           the frame (request or response header + body), opaque here

Reading. Every connection of a server reads into one shared scratch buffer (the event loop hands
us bytes for one connection at a time), so an idle connection holds no read buffer at all.
Complete small frames are copied out of the scratch buffer into their own ``bytearray`` (writable,
so the log can stamp a produced batch's header in place, as it does for large frames); a frame
larger than ``DIRECT_READ_BYTES`` borrows a buffer from the server's ``MemoryPool`` that the socket
reads straight into, so the records of a big Produce are copied once, by the kernel, into memory
that was touched before; the buffer goes back to the pool once the request has been answered and
nothing refers to it any more (a frame the pool cannot serve gets a lazily mapped buffer, so its
memory is taken as its bytes arrive, not at the size it declares). A partial small frame left
at the end of a read is kept (at most ``DIRECT_READ_BYTES + 4`` bytes) and put back in front of
the next read. After a large frame the next read asks for the 4-byte size alone, so when a client
streams big Produce requests each one is read straight into its own buffer, instead of its first
256 KiB landing in the scratch buffer and being copied over (one extra, cheap read per large frame).

Processing. Like Kafka, which mutes a channel while one of its requests is being handled, frames
of one connection are handled strictly one after another by a single worker task, and each
response is written completely before the next request is handled. Frames read ahead are queued;
reading pauses when the queue grows past ``MAX_QUEUED_FRAMES`` / ``MAX_QUEUED_BYTES``, when the
frames queued on all connections together reach the server's ``max_queued_requests`` (Kafka's
``queued.max.requests``; reading resumes once they are down to half), or when the transport's write
buffer is full (a client that does not read its responses stops being read). Like the per-connection
bounds, the broker-wide one is checked per frame, so the frames of one read may pass it.

Memory. The bytes of requests in flight (read, queued, being handled, or a frame still arriving) are
counted against the server's ``max_queued_bytes`` (Kafka's ``queued.max.request.bytes``; 0 or less:
no bound). At the bound, a connection that reads pauses after that read (paused, not refused), except
one connection in the middle of a frame, which reads on until its frame is complete (the server hands
the turn on when it stalls), so bytes held by frames still arriving can never stall every connection;
reading resumes once the count is below the bound again.

Writing. Responses go out through ``NetworkSend`` (rill.network.network_send, a base class): pipelined ones
gathered into one write, file regions by ``os.sendfile`` on plain TCP or through the transport on TLS.

Security. Each connection carries a ``ChannelSecurity`` in its ``ConnectionInfo``: its listener's security
protocol and, on TLS, the principal of the client's certificate. Until it has authenticated (SASL listeners),
frames larger than ``sasl.server.max.receive.size`` close it; a response the request layer marks as the
answer to a failed authentication is written and the connection closed after it.

Throttling. When the request layer sets ``ConnectionInfo.throttle.mute_ms`` (a client over its quota), the response
is written at once and the connection is then muted for that long, as Kafka mutes a throttled channel (KIP-219):
nothing is read from it and none of its queued requests is handled until the time is up (or it closes).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
from typing import TYPE_CHECKING, cast

from rill.network.handler import CloseConnection, ConnectionInfo
from rill.network.memory_pool import MemoryPool
from rill.network.network_send import WRITE_HIGH_WATER, NetworkSend
from rill.security.channel import ChannelSecurity
from rill.security.principal import ANONYMOUS, principal_from_certificate

if TYPE_CHECKING:
    from rill.network.server import SocketServer

log = logging.getLogger("rill.network")


DIRECT_READ_BYTES = 64 * 1024
"""Frames larger than this are read straight into a buffer of their own."""
SCRATCH_BYTES = 256 * 1024
"""Size of the scratch read buffer shared by all connections of a server."""
MAX_QUEUED_FRAMES = 64
MAX_QUEUED_BYTES = 16 * 1024 * 1024
"""After this many bytes sent from files in one go, let other connections run."""
COALESCE_BYTES = 256 * 1024
"""Responses to pipelined requests are gathered into one write up to this size."""

_size = struct.Struct(">i")


class ReadBuffer:
    """The scratch buffer a server's connections read into, one read at a time."""

    __slots__ = ("data", "view")

    def __init__(self, size: int = SCRATCH_BYTES) -> None:
        self.data = bytearray(size)
        self.view = memoryview(self.data)


class KafkaConnection(NetworkSend, asyncio.BufferedProtocol):
    """A size-prefixed frame connection that hands requests to the server's handler in order."""

    def __init__(
        self, server: SocketServer, listener_name: str, index: int, protocol: str = "PLAINTEXT", *, tls: bool = False
    ) -> None:
        self._server = server
        self._protocol = protocol
        self._tls = tls
        self.made = [False]  # set once connection_made runs (a TLS connection: once its handshake succeeded)
        self._loop = server.loop
        self._listener_name = listener_name
        self._index = index
        self._max_request_bytes = server.max_request_bytes
        self._scratch = server.read_buffer
        self.info = ConnectionInfo("", "", 0, listener_name)
        self.transport: asyncio.Transport | None = None
        self.last_active = self._loop.time()
        self.closed = False
        self._partial: bytes = b""
        self._pool: MemoryPool = server.memory_pool
        self._direct: memoryview | None = None
        self._direct_buf: bytearray | None = None
        self._direct_filled = 0
        self._after_large = False  # the last frame was read directly: read the next size alone
        self._queue: collections.deque[tuple[memoryview, bytearray | None]] = collections.deque()
        self._queued_bytes = 0
        self.in_flight_bytes = 0  # request bytes in memory, counted in the server's request_bytes
        self._worker: asyncio.Task[None] | None = None
        self._reading_paused = False
        self._held = False
        self._stopping = False
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._sock_fd = -1
        self._watch_fd = -1
        self._writable: asyncio.Future[None] | None = None
        self._out: list[bytes | bytearray | memoryview] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._muted: asyncio.Future[None] | None = None

    # ----------------------------------------------------------------- lifecycle

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made[0] = True
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        peer = transport.get_extra_info("peername") or ("?", 0)
        local = transport.get_extra_info("sockname") or ("?", 0)
        sock = transport.get_extra_info("socket")
        self._sock_fd = sock.fileno() if sock is not None else -1
        principal = ANONYMOUS
        if self._tls:
            try:
                principal = principal_from_certificate(
                    transport.get_extra_info("peercert"), self._server.principal_names.get(self._listener_name)
                )
            except ValueError as e:  # ssl.principal.mapping.rules has no rule for this certificate
                self._server.peer_log("principal", logging.INFO, "closing connection on listener %s: %s",
                                      self._listener_name, e)  # fmt: skip
                self._server.tls_handshake_failed(self._listener_name)
                self.closed = True  # never admitted: nothing of it is read, nothing to let go of
                self.transport.abort()
                return
        self.info = ConnectionInfo(
            connection_id=f"{local[0]}:{local[1]}-{peer[0]}:{peer[1]}-{self._index}",
            client_host=str(peer[0]),
            client_port=int(peer[1]),
            listener_name=self._listener_name,
            server_host=str(local[0]),
            server_port=int(local[1]),
            security=ChannelSecurity.for_protocol(self._protocol, principal),
        )
        self.last_active = self._loop.time()
        self._server.connection_opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        self._drop_queue()
        if self._direct is not None:
            self._direct.release()
            if self._direct_buf is not None:
                self._pool.release(self._direct_buf)
        self._direct = None
        self._direct_buf = None
        self._partial = b""
        self._server.forget_memory_waiter(self)
        self._uncharge(self.in_flight_bytes)  # a request still being handled is let go of here too
        self._wake_writers()
        self._unmute()
        self._release_watch_fd()
        self._server.connection_lost(self)

    def hold(self) -> None:
        """Handle no request until ``release`` (the broker is at ``max.connections``).

        Reading pauses here; uvloop restarts reading once ``connection_made`` returns, so frames
        that still arrive are queued, unhandled, and reading pauses again at the first one.
        """
        if self.transport is not None and not self._held:
            self._held = True
            self._pause_reading()

    def release(self) -> None:
        """Start handling a held connection (a slot is free); nothing for any other."""
        if self._held and self.transport is not None and not self.closed:
            self._held = False
            self.last_active = self._loop.time()
            self._server.queued_requests += len(self._queue)
            if self._queue and self._worker is None:
                self._worker = self._loop.create_task(self._process())
            self._maybe_resume_reading()

    @property
    def busy(self) -> bool:
        """True while a request is queued or being handled."""
        return self._worker is not None

    def socket_fds(self) -> list[int]:
        """The descriptors of this connection's socket (with the duplicate that watches for room to write)."""
        return [fd for fd in (self._sock_fd, self._watch_fd) if fd >= 0]

    def close(self) -> None:
        """Close after flushing what is already written."""
        self._flush()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def abort(self) -> None:
        """Close at once, dropping unsent bytes."""
        if self.transport is not None:
            self.transport.abort()

    async def shutdown(self) -> None:
        """Stop reading, let queued requests finish and their responses go out, then close."""
        self._stopping = True
        self._pause_reading()
        self._unmute()
        worker = self._worker
        if worker is not None:
            await asyncio.shield(worker)
        self.close()

    # ------------------------------------------------------------------ reading

    def get_buffer(self, sizehint: int) -> memoryview:
        direct = self._direct
        if direct is not None:
            return direct[self._direct_filled :]
        partial = self._partial
        view = self._scratch.view
        if partial:
            n = len(partial)
            view[:n] = partial
            return view[n:]
        if self._after_large:
            return view[:4]
        return view

    @property
    def mid_frame(self) -> bool:
        """True while part of a frame has been read."""
        return self._direct is not None or bool(self._partial)

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
            self._check_memory()
            return
        kept = len(self._partial)
        end = kept + nbytes
        self._partial = b""
        self._charge(nbytes)  # the kept partial frame was counted when it arrived
        self._read_frames(end)
        self._check_memory()

    def _read_frames(self, end: int) -> None:
        """Take the frames out of the first ``end`` bytes of the scratch buffer."""
        view = self._scratch.view
        data = self._scratch.data
        pos = 0
        headers = 0  # size prefixes taken (counted as they arrived, not kept)
        while end - pos >= 4:
            size = _size.unpack_from(data, pos)[0]
            if size < 0 or size > self._max_request_bytes:
                self._reject(size)
                return
            if size > self._server.sasl_max_receive_bytes and not self.info.security.authenticated:
                self._reject(size, "sasl.server.max.receive.size before authentication")
                return
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
        if pos < end:
            self._partial = view[pos:end].tobytes()
        if headers:
            self._uncharge(4 * headers)

    def eof_received(self) -> bool | None:
        # Half-closed by the client: answer what was asked, then close.
        if self._worker is None:
            return None
        self._stopping = True
        return True

    def _reject(self, size: int, bound: str = "socket.request.max.bytes") -> None:
        limit = self._max_request_bytes if bound.startswith("socket") else self._server.sasl_max_receive_bytes
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
        self.abort()

    def _enqueue(self, frame: memoryview, buf: bytearray | None) -> None:
        if self.closed:
            return
        self._queue.append((frame, buf))
        self._queued_bytes += len(frame)
        if self._held:  # not counted in the server's queue until taken in (it waits for a slot)
            if self.transport is not None:
                self.transport.pause_reading()
            return
        server = self._server
        server.queued_requests += 1
        if self._worker is None:
            self._worker = self._loop.create_task(self._process())
        if len(self._queue) >= MAX_QUEUED_FRAMES or self._queued_bytes >= MAX_QUEUED_BYTES:
            self._pause_reading()
        elif server.queued_requests >= server.max_queued_requests:
            self._pause_reading()
            server.wait_for_queue_room(self)

    def _drop_queue(self) -> None:
        """Forget the frames not handled yet (the connection is closing); their buffers go back to the pool."""
        if not self._held:
            self._server.queued_requests -= len(self._queue)
        while self._queue:
            frame, buf = self._queue.popleft()
            frame.release()
            if buf is not None:
                self._pool.release(buf)
        self._uncharge(self._queued_bytes)
        self._queued_bytes = 0

    # ------------------------------------------------------------------ memory

    def _charge(self, nbytes: int) -> None:
        if not self.closed:
            self.in_flight_bytes += nbytes
            self._server.request_bytes += nbytes

    def _uncharge(self, nbytes: int) -> None:
        nbytes = min(nbytes, self.in_flight_bytes)
        if nbytes > 0:
            self.in_flight_bytes -= nbytes
            server = self._server
            server.request_bytes -= nbytes
            if server.memory_waiters:
                server.memory_released()

    def _check_memory(self) -> None:
        """After a read: pause when the request bytes in flight are at ``queued.max.request.bytes``."""
        server = self._server
        if server.max_queued_bytes <= 0 or self.closed:
            return
        owner = server.memory_owner
        if server.request_bytes < server.max_queued_bytes:
            if owner is self and not self.mid_frame:
                server.memory_owner = None
            return
        if self.mid_frame and (owner is None or owner is self):
            server.memory_owner = self  # reads on until its frame is complete
            return
        if owner is self:
            server.memory_owner = None
        self._pause_reading()
        server.wait_for_memory(self)

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def resume_after_wait(self) -> None:
        """The server's queues or request bytes are down again (or this connection may finish its frame at
        the bytes bound): read on, unless something else still holds reading."""
        self._maybe_resume_reading()

    def _maybe_resume_reading(self) -> None:
        if (
            self._reading_paused
            and not self._stopping
            and not self._write_paused
            and not self.closed
            and self._muted is None
            and len(self._queue) < MAX_QUEUED_FRAMES // 2
            and self._queued_bytes < MAX_QUEUED_BYTES // 2
            and self.transport is not None
        ):
            server = self._server
            if self in server.memory_waiters:
                return  # resumed by the server when memory frees
            if server.queued_requests > server.max_queued_requests // 2 and (
                server.queued_requests >= server.max_queued_requests or self in server.queue_waiters
            ):
                server.wait_for_queue_room(self)  # resumed by the server once the queues are down to half
                return
            self._reading_paused = False
            self.transport.resume_reading()

    # --------------------------------------------------------------- processing

    async def _process(self) -> None:
        server = self._server
        handler = server.handler
        queue = self._queue
        try:
            while queue and not self.closed:
                frame, buf = queue.popleft()
                size = len(frame)
                self._queued_bytes -= size
                server.queued_requests -= 1
                self._maybe_resume_reading()
                if server.queue_waiters and server.queued_requests <= server.max_queued_requests // 2:
                    server.resume_queue_waiters()
                failed = False
                try:
                    response = await handler.handle(self.info, frame)
                except Exception as e:
                    failed = True
                    response = None
                    if isinstance(e, CloseConnection):
                        server.peer_log("close", logging.INFO, "closing connection from %s: %s", self.info, e)
                    else:
                        server.peer_log(
                            "handler failed",
                            logging.ERROR,
                            "closing connection from %s: request handler failed",
                            self.info,
                            exc_info=True,
                        )
                del frame
                sent = failed or response is None or self.closed or await self._send(response)
                del response
                if buf is not None:
                    # Only when no view of it is left (checked by the pool); the response is written.
                    self._pool.release(buf)
                    buf = None
                self._uncharge(size)
                if self.info.security.close_after_response:
                    failed = True  # a failed authentication: its answer goes out, then the connection closes
                if failed:
                    self._drop_queue()
                    self.close()  # responses already due still go out first
                    return
                if not sent:
                    return
                if self.info.throttle.mute_ms > 0:
                    await self._mute()
                self.last_active = self._loop.time()
                if not queue or self._out_bytes >= COALESCE_BYTES:
                    self._flush()
                elif self._out and not self._flush_scheduled:
                    # More requests are queued: their responses join this write, which goes out as
                    # soon as this task yields (a handler that waits, or the end of the queue).
                    self._flush_scheduled = True
                    self._loop.call_soon(self._flush)
                if self._write_paused:
                    await self._drain(full=False)
        finally:
            self._worker = None
            self._flush()
            if self._stopping and not self.closed and self.transport is not None:
                self.transport.close()

    async def _mute(self) -> None:
        """Write the response out, then read and handle nothing for the throttle time (KIP-219)."""
        delay_s = self.info.throttle.mute_ms / 1000.0
        self.info.throttle.mute_ms = 0
        self._flush()
        if self.closed or self._stopping:
            return
        self._pause_reading()
        muted = self._muted = self._loop.create_future()
        timer = self._loop.call_later(delay_s, self._unmute)
        try:
            await muted
        finally:
            timer.cancel()
            self._muted = None
        self._maybe_resume_reading()

    def _unmute(self) -> None:
        muted = self._muted
        if muted is not None and not muted.done():
            muted.set_result(None)
