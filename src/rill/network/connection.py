"""One client connection: a bounded pipeline of requests, handled one at a time, answered in order.

Reading (``rill.network.network_receive``): frames are taken out of what was read only while the connection has
room for them (``_room``); the rest of a read waits, unparsed, and reading pauses.

Processing. Like Kafka, which mutes a channel while one of its requests is being handled, frames of one
connection are handled strictly one after another by a single worker task, and each response is written
completely before the next request is handled; with one exception: a request the handler answers with a
``DeferredResponse`` (handled, its answer waiting: an acks=all Produce waiting for its followers) lets the worker
handle the next frames the handler says ``may_overlap`` (Produce), and the answers still go out in request order;
any other frame waits until the deferred answers before it are written. A request that fails (or a deferred
answer) closes the connection after the answers before it, and nothing after it is handled; a throttled answer
waits its turn and the mute follows it; a connection lost cancels what it deferred. Deferred requests count in the
pipeline depth below; their frames are let go of once handled (as Kafka drops a Produce's records once appended).
Unlike Kafka, a connection pipelines, to a bounded depth: at most
``MAX_QUEUED_FRAMES`` frames or ``MAX_QUEUED_BYTES`` bytes (a frame that crosses it is completed) are taken in
ahead of the one being handled, and reading resumes once the queue is down to half; before authentication
(SASL listeners) it is one frame in all, as Kafka's authenticator reads one receive at a time. Across
connections, the frames queued on all of them together are bounded by the server's ``max_queued_requests``
(Kafka's ``queued.max.requests``; a connection stops taking frames at it, and reads on once the count is down to
half). A worker handles at most one connection's queue between two turns of the event loop, so a connection
with a long backlog takes its turn like the others.

A peer that does not read. When the worker has to wait for the peer to take what was written (the transport's
write buffer is full, or ``os.sendfile`` would block), the connection is parked: it takes in nothing more (reading
pauses) and what it holds no longer counts against the broker-wide bounds (``queued.max.requests``,
``queued.max.request.bytes``), so a peer that never reads cannot hold other clients up; what it holds is bounded by
the pipeline above, plus one read and the write buffer. It counts again once its writes move. A parked connection
whose writes make no progress for ``connections.max.idle.ms`` is closed by the server's idle sweep, as Kafka's
selector closes a channel with no activity for that long (a muted channel whose peer does not read has none).

Memory. The bytes of requests in flight (read, queued, being handled, or a frame still arriving) are counted
against the server's ``max_queued_bytes`` (Kafka's ``queued.max.request.bytes``; 0 or less: no bound). At the
bound, a connection that reads pauses after that read (paused, not refused), except one connection in the middle
of a frame, which reads on until its frame is complete (the server hands the turn on when it stalls), so bytes
held by frames still arriving can never stall every connection; reading resumes once the count is below the bound
again. A frame's buffer goes back to the server's ``MemoryPool`` once it has been answered and nothing refers to it.

Writing. Responses go out through ``NetworkSend`` (rill.network.network_send, a base class): pipelined ones
gathered into one write, file regions by ``os.sendfile`` on plain TCP or through the transport on TLS.

Security. Each connection carries a ``ChannelSecurity`` in its ``ConnectionInfo``: its listener's security
protocol and, on TLS, the principal of the client's certificate. Until it has authenticated (SASL listeners),
frames larger than its listener's ``sasl.server.max.receive.size`` close it; a response the request layer marks
as the answer to a failed authentication is written and the connection closed after it.

Throttling. When the request layer sets ``ConnectionInfo.throttle.mute_ms`` (a client over its quota), the response
is written at once and the connection is then muted for that long, as Kafka mutes a throttled channel (KIP-219):
nothing is read from it and none of its queued requests is handled until the time is up (or it closes).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from rill.network.deferred_answers import DeferredAnswers, Failed
from rill.network.handler import ConnectionInfo, DeferredResponse, ResponseChunk
from rill.network.memory_pool import MemoryPool
from rill.network.network_receive import DIRECT_READ_BYTES, SCRATCH_BYTES, NetworkReceive, ReadBuffer
from rill.network.network_send import WRITE_HIGH_WATER, NetworkSend
from rill.security.channel import ChannelSecurity
from rill.security.principal import ANONYMOUS, principal_from_certificate

if TYPE_CHECKING:
    from rill.network.server import SocketServer

__all__ = ["DIRECT_READ_BYTES", "SCRATCH_BYTES", "KafkaConnection", "ReadBuffer"]

log = logging.getLogger("rill.network")


MAX_QUEUED_FRAMES = 32
"""Frames one connection may have taken in and not yet handled (its pipeline depth)."""
MAX_QUEUED_BYTES = 4 * 1024 * 1024
"""Bytes of frames one connection may have taken in and not yet handled (a frame that crosses it completes)."""
COALESCE_BYTES = 256 * 1024
"""Responses to pipelined requests are gathered into one write up to this size."""


class KafkaConnection(NetworkReceive, NetworkSend, DeferredAnswers, asyncio.BufferedProtocol):
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
        self._sasl_max_bytes = server.sasl_max_receive_for(listener_name)
        self._scratch = server.read_buffer
        self.info = ConnectionInfo("", "", 0, listener_name)
        self.transport: asyncio.Transport | None = None
        self.last_active = self._loop.time()
        self.closed = False
        self._partial: bytes = b""  # bytes read and not taken yet: one incomplete small frame, or the backlog
        self._partial_at = 0  # where the backlog's frames not taken yet begin in _partial
        self._backlog = False  # _partial holds frames left for lack of room
        self._backlog_scheduled = False
        self._pool: MemoryPool = server.memory_pool
        self._direct: memoryview | None = None
        self._direct_buf: bytearray | None = None
        self._direct_filled = 0
        self._after_large = False  # the last frame was read directly: read the next size alone
        self._queue: collections.deque[tuple[memoryview, bytearray | None]] = collections.deque()
        # Requests handled whose answers wait, in order (their frames are let go of once handled).
        self._deferred: collections.deque[DeferredResponse] = collections.deque()
        self._failing = False  # a request failed while answers before it wait: they go out, then the close
        self._arrived: asyncio.Future[None] | None = None  # set when a frame is queued while the worker waits
        self._queued_bytes = 0
        self.in_flight_bytes = 0  # request bytes in memory (in the server's request_bytes unless parked)
        self._worker: asyncio.Task[None] | None = None
        self._reading_paused = False
        self._held = False
        self._parked = False
        self._parked_buffer = 0  # the write buffer's size when the idle sweep last looked at it, stuck writing
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
        self._backlog = False
        self._server.forget_memory_waiter(self)
        self._uncharge(self.in_flight_bytes)  # a request still being handled is let go of here too
        for deferred in self._deferred:
            deferred.task.cancel()  # its records stay appended; nobody is left to tell
        self._wake_worker()
        self._wake_writers()
        self._unmute()
        self._release_watch_fd()
        self._server.connection_lost(self)

    def hold(self) -> None:
        """Handle no request until ``release`` (the broker is at ``max.connections``).

        Reading pauses here; uvloop restarts reading once ``connection_made`` returns, so bytes that still
        arrive are kept unparsed (no frame is taken while held) and reading pauses again.
        """
        if self.transport is not None and not self._held:
            self._held = True
            self._pause_reading()

    def release(self) -> None:
        """Start handling a held connection (a slot is free); nothing for any other."""
        if self._held and self.transport is not None and not self.closed:
            self._held = False
            self.last_active = self._loop.time()
            if self._queue and self._worker is None:
                self._worker = self._loop.create_task(self._process())
            self._refill()

    @property
    def busy(self) -> bool:
        """True while a request is queued or being handled."""
        return self._worker is not None

    @property
    def parked(self) -> bool:
        """True while the worker waits for the peer to take what was written (see the module's docstring)."""
        return self._parked

    @property
    def stuck_writing(self) -> bool:
        """True while answers wait for the peer to take what was written (the worker parked, or the write
        buffer full)."""
        return self._parked or self._write_paused

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
        self._backlog = False  # frames not taken in yet are not answered (their bytes go with the connection)
        self._partial = b""
        self._unmute()
        worker = self._worker
        if worker is not None:
            await asyncio.shield(worker)
        self.close()

    def eof_received(self) -> bool | None:
        # Half-closed by the client: answer what was asked, then close.
        if self._worker is None and not self._backlog:
            return None
        self._stopping = True
        return True

    # ------------------------------------------------------------------- room

    def _room(self) -> bool:
        """Whether one more frame may be taken in now (checked before each frame)."""
        if self._held or self._parked or self._write_paused or self.closed:
            return False
        if not self.info.security.authenticated:
            return self._worker is None  # one frame at a time before authentication
        if len(self._queue) + len(self._deferred) >= MAX_QUEUED_FRAMES or self._queued_bytes >= MAX_QUEUED_BYTES:
            return False
        server = self._server
        if server.queued_requests >= server.max_queued_requests:
            server.wait_for_queue_room(self)
            return False
        return True

    def _enqueue(self, frame: memoryview, buf: bytearray | None) -> None:
        if self.closed:
            return
        self._queue.append((frame, buf))
        self._queued_bytes += len(frame)
        if not self._parked:  # a frame that was arriving when the connection was parked is counted when it moves
            self._server.queued_requests += 1
        if self._worker is None and not self._held:
            self._worker = self._loop.create_task(self._process())
        else:
            self._wake_worker()

    def _wake_worker(self) -> None:
        """Wake a worker waiting for a deferred answer or a new frame, whichever comes first."""
        arrived = self._arrived
        if arrived is not None and not arrived.done():
            arrived.set_result(None)

    def _drop_queue(self) -> None:
        """Forget the frames not handled yet (the connection is closing); their buffers go back to the pool."""
        if not self._parked:
            self._server.queued_requests -= len(self._queue)
        while self._queue:
            frame, buf = self._queue.popleft()
            frame.release()
            if buf is not None:
                self._pool.release(buf)
        self._uncharge(self._queued_bytes)
        self._queued_bytes = 0

    def _stop_reading(self) -> None:
        """Pause reading, even when it is marked paused already (uvloop reads on after ``connection_made``)."""
        if self.transport is not None and not self.closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def resume_after_wait(self) -> None:
        """The server's queues or request bytes are down again (or this connection may finish its frame at
        the bytes bound): take in more, unless something else still holds it."""
        self._refill()

    def _refill(self) -> None:
        """Room may have freed: take the backlog's frames (in a callback of their own) or read on, once the
        connection's queue is down to half and nothing holds it."""
        if not (self._reading_paused or self._backlog):
            return
        if self._held or self._parked or self._write_paused or self._muted is not None or self.closed:
            return
        if self.transport is None:
            return
        if not self.info.security.authenticated:
            if self._worker is not None:
                return
        elif (len(self._queue) + len(self._deferred) >= MAX_QUEUED_FRAMES // 2
              or self._queued_bytes >= MAX_QUEUED_BYTES // 2):  # fmt: skip
            return
        server = self._server
        if server.queued_requests > server.max_queued_requests // 2 and (
            server.queued_requests >= server.max_queued_requests or self in server.queue_waiters
        ):
            server.wait_for_queue_room(self)  # resumed by the server once the queues are down to half
            return
        if self._backlog:
            if not self._backlog_scheduled:
                self._backlog_scheduled = True
                self._loop.call_soon(self._take_backlog)
            return
        if self._stopping or self in server.memory_waiters:
            return  # the server resumes a memory waiter when memory frees
        self._reading_paused = False
        self.transport.resume_reading()

    def _backlog_taken(self) -> None:
        """The backlog's last frame was taken: read on when there is room (or close, half-closed by the peer)."""
        if self._stopping and self._worker is None and not self.closed and self.transport is not None:
            self.transport.close()
            return
        self._refill()

    # ------------------------------------------------------- a peer that does not read

    def _park(self) -> None:
        """The worker waits for the peer to take what was written: take in nothing more, and hold nothing
        against the broker-wide bounds meanwhile."""
        if self._parked or self.closed:
            return
        self._parked = True
        self._parked_buffer = self.transport.get_write_buffer_size() if self.transport is not None else 0
        if self._direct is not None:
            self._pause_reading()  # the frame arriving waits too: its bytes would count nowhere
        server = self._server
        server.queued_requests -= len(self._queue)
        server.request_bytes -= self.in_flight_bytes
        server.connection_parked(self)

    def _unpark(self) -> None:
        """The peer took bytes: the connection's frames and bytes count again, and it may take in more."""
        if not self._parked:
            return
        self._parked = False
        self.last_active = self._loop.time()
        if self.closed:
            return
        server = self._server
        server.queued_requests += len(self._queue)
        server.request_bytes += self.in_flight_bytes
        self._refill()

    def write_progress(self, now: float) -> None:
        """The idle sweep's look at a connection stuck writing: a write buffer that shrank since is progress."""
        transport = self.transport
        size = transport.get_write_buffer_size() if transport is not None else 0
        if size < self._parked_buffer:
            self.last_active = now
        self._parked_buffer = size

    # ------------------------------------------------------------------ memory

    def _charge(self, nbytes: int) -> None:
        if not self.closed:
            self.in_flight_bytes += nbytes
            if not self._parked:
                self._server.request_bytes += nbytes

    def _uncharge(self, nbytes: int) -> None:
        nbytes = min(nbytes, self.in_flight_bytes)
        if nbytes > 0:
            self.in_flight_bytes -= nbytes
            if self._parked:
                return
            server = self._server
            server.request_bytes -= nbytes
            if server.memory_waiters:
                server.memory_released()

    def _check_memory(self) -> None:
        """After a read: pause when the request bytes in flight are at ``queued.max.request.bytes``."""
        server = self._server
        if server.max_queued_bytes <= 0 or self.closed or self._parked:
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

    # --------------------------------------------------------------- processing

    async def _process(self) -> None:
        server = self._server
        handler = server.handler
        queue = self._queue
        try:
            while (queue or self._deferred) and not self.closed:
                if self._deferred and (
                    not queue or self._held or self._failing or self.info.throttle.mute_ms > 0
                    or not handler.may_overlap(self.info, queue[0][0])
                ):  # fmt: skip
                    # Answer the oldest deferred request first (when it is ready, or at once if a frame that may
                    # be handled meanwhile arrives while the queue is empty). After a failure nothing more is
                    # handled; a throttled answer goes out in its turn, then the mute.
                    if not await self._answer_deferred(wait_for_frame=not queue):
                        return
                    continue
                frame, buf = queue.popleft()
                size = len(frame)
                self._queued_bytes -= size
                server.queued_requests -= 1
                self._refill()
                if server.queue_waiters and server.queued_requests <= server.max_queued_requests // 2:
                    server.resume_queue_waiters()
                failed = False
                try:
                    response = await handler.handle(self.info, frame)
                except Exception as e:
                    failed = True
                    response = None
                    self._handler_failed(e)
                del frame
                if self._deferred or isinstance(response, DeferredResponse):
                    if not isinstance(response, DeferredResponse):
                        # Answers due before this one still wait: this one joins them, ready.
                        ready: asyncio.Future[Sequence[ResponseChunk] | None] = self._loop.create_future()
                        if failed:
                            self._failing = True  # nothing after it is handled
                            ready.set_exception(Failed())
                        else:
                            ready.set_result(response)
                        response = DeferredResponse(ready)
                    else:
                        response.task.add_done_callback(self._deferred_done)
                    self._deferred.append(response)  # answered in turn; the request is handled (a Produce's
                    if buf is not None:  # records are appended): its frame is let go of now
                        self._pool.release(buf)
                        buf = None
                    self._uncharge(size)
                    continue
                if not await self._answered(response, failed, size, buf):
                    return
        finally:
            self._worker = None
            self._drop_deferred()
            self._flush()
            if self._stopping and not self._backlog and not self.closed and self.transport is not None:
                self.transport.close()
            else:
                self._refill()

    async def _answered(
        self, response: Sequence[ResponseChunk] | None, failed: bool, size: int, buf: bytearray | None
    ) -> bool:
        """Write one request's answer and let go of its frame; False when the worker is to stop."""
        queue = self._queue
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
            self._backlog = False
            self._partial = b""
            self.close()  # responses already due still go out first
            return False
        if not sent:
            return False
        if self.info.throttle.mute_ms > 0 and not self._deferred:  # the throttled answer is the last one
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
        return True

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
        self._refill()

    def _unmute(self) -> None:
        muted = self._muted
        if muted is not None and not muted.done():
            muted.set_result(None)
