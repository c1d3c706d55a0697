"""Kafka's SocketServer: listeners that accept connections and feed their frames to a RequestHandler.

The server owns no protocol knowledge. It binds one asyncio server per listener (port 0 picks a
free port, see ``bound_addresses``), keeps the set of live connections, closes connections idle
for longer than ``connections.max.idle.ms`` with one periodic sweep (no timer per connection, so
thousands of idle connections cost a few kilobytes each; a connection whose peer has taken none of
its answers for that long is idle too, as in Kafka, and aborted), applies Kafka's connection quotas
(``connection_quotas``: a client address at ``max.connections.per.ip`` is refused, a broker at
``max.connections`` holds new connections unread until one closes), counts the bytes of requests
in flight on all connections against ``queued.max.request.bytes`` (see ``connection``), and stops
gracefully: stop accepting, let queued requests finish within a bounded wait, then close every
connection. Lines a client can cause at will (refused connections, bad frames) are rate-limited
(``RateLimitedLog``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import socket
import ssl
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from rill.network.connection import KafkaConnection, ReadBuffer
from rill.network.connection_quotas import INT_MAX, ConnectionQuotas
from rill.network.handler import RequestHandler
from rill.network.memory_pool import DEFAULT_POOL_BYTES, MemoryPool
from rill.network.rate_limited_log import RateLimitedLog

log = logging.getLogger("rill.network")

DEFAULT_MAX_REQUEST_BYTES = 104857600
DEFAULT_MAX_IDLE_MS = 600000
DEFAULT_MAX_QUEUED_REQUESTS = 500
DEFAULT_MAX_QUEUED_BYTES = -1
DEFAULT_SASL_MAX_RECEIVE_BYTES = 524288
OWNER_STALL_S = 1.0
"""At ``queued.max.request.bytes``, the connection finishing its frame that sends nothing for this long
gives its turn to another connection in the middle of a frame."""


class ListenerAddress(Protocol):
    """Where a listener binds: ``rill.config.EndPoint`` fits."""

    @property
    def listener_name(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


@dataclass(frozen=True, slots=True)
class _Address:
    listener_name: str
    host: str
    port: int


class SocketServer:
    """Accepts connections on every listener and hands their frames to ``handler``."""

    def __init__(
        self,
        handler: RequestHandler,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        listener_name: str = "PLAINTEXT",
        listeners: Sequence[ListenerAddress] = (),
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        idle_timeout_ms: int = DEFAULT_MAX_IDLE_MS,
        backlog: int = 1024,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        quotas: ConnectionQuotas | None = None,
        max_queued_requests: int = DEFAULT_MAX_QUEUED_REQUESTS,
        max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
        ssl_contexts: Mapping[str, ssl.SSLContext] | None = None,
        sasl_max_receive_bytes: int = DEFAULT_SASL_MAX_RECEIVE_BYTES,
        listener_sasl_max_receive_bytes: Mapping[str, int] | None = None,
        ssl_handshake_timeout_s: float = 10.0,
        principal_names: Mapping[str, Callable[[str], str]] | None = None,
    ) -> None:
        """Listen on ``host:port`` as ``listener_name``, or on every address in ``listeners`` when given.

        ``max_request_bytes`` is Kafka's ``socket.request.max.bytes``, ``idle_timeout_ms`` its
        ``connections.max.idle.ms`` (0 or less: never close idle connections),
        ``send_buffer_bytes`` and ``receive_buffer_bytes`` its ``socket.send.buffer.bytes`` and
        ``socket.receive.buffer.bytes`` (SO_SNDBUF and SO_RCVBUF of every accepted connection; -1
        leaves them to the OS, which on Linux then sizes them to the traffic); ``quotas`` the
        connection limits (none by default; ``update_quotas`` changes them while running);
        ``max_queued_requests`` Kafka's ``queued.max.requests``, the frames read ahead on all
        connections together before reading pauses; ``max_queued_bytes`` Kafka's
        ``queued.max.request.bytes``, the bytes of requests in flight on all connections together
        before reading pauses (0 or less: no bound; the memory of a frame is taken as its bytes
        arrive either way). ``ssl_contexts``: the TLS context of each listener that speaks TLS (SSL,
        SASL_SSL); a listener's security protocol is its ``security_protocol`` (PLAINTEXT when it has none);
        ``sasl_max_receive_bytes`` is Kafka's ``sasl.server.max.receive.size``, the largest frame a connection
        that has not authenticated yet may send, and ``listener_sasl_max_receive_bytes`` its value per listener
        (``listener.name.<l>.sasl.server.max.receive.size``) where that differs.
        """
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.idle_timeout_ms = idle_timeout_ms
        self._listeners: list[ListenerAddress] = (
            list(listeners) if listeners else [_Address(listener_name, host, port)]
        )
        self._backlog = backlog
        self._buffer_sizes = ((socket.SO_SNDBUF, send_buffer_bytes), (socket.SO_RCVBUF, receive_buffer_bytes))
        self._servers: list[asyncio.Server] = []
        self._bound: dict[str, tuple[str, int]] = {}
        self._rate_held: collections.deque[KafkaConnection] = collections.deque()
        self._connections: set[KafkaConnection] = set()
        self.quotas = quotas if quotas is not None else ConnectionQuotas()
        self.ssl_contexts = dict(ssl_contexts or {})
        self.tls_handshake_failures: dict[str, int] = {}  # listener -> failed TLS handshakes
        self.on_tls_handshake_failed: Callable[[str], None] | None = None
        # listener -> the principal name of a certificate's subject DN (ssl.principal.mapping.rules)
        self.principal_names: dict[str, Callable[[str], str]] = dict(principal_names or {})
        self.sasl_max_receive_bytes = sasl_max_receive_bytes
        self._listener_sasl_max = dict(listener_sasl_max_receive_bytes or {})
        self._ssl_handshake_timeout = ssl_handshake_timeout_s
        self.max_queued_requests = max_queued_requests
        self.queued_requests = 0  # frames read and not yet handled, on all connections
        self.max_queued_bytes = max_queued_bytes
        self.request_bytes = 0  # bytes of requests in flight (arriving, queued or being handled)
        self.memory_waiters: dict[KafkaConnection, None] = {}  # paused until request_bytes is below the bound
        self.memory_owner: KafkaConnection | None = None  # reads on at the bound to finish its frame
        self._owner_check: asyncio.TimerHandle | None = None
        self.peer_log = RateLimitedLog(log)  # lines a client can cause at will
        self.queue_waiters: set[KafkaConnection] = set()  # paused until queued_requests is down to half
        # Connections taken in while the broker is at max.connections, unread, oldest first.
        self._held: collections.OrderedDict[KafkaConnection, None] = collections.OrderedDict()
        self._index = itertools.count()
        self._sweeper: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.read_buffer = ReadBuffer()
        pool_bytes = DEFAULT_POOL_BYTES if max_queued_bytes <= 0 else min(DEFAULT_POOL_BYTES, max_queued_bytes)
        self.memory_pool = MemoryPool(pool_bytes)

    def sasl_max_receive_for(self, listener_name: str) -> int:
        """The largest frame a connection of ``listener_name`` may send before it has authenticated."""
        return self._listener_sasl_max.get(listener_name, self.sasl_max_receive_bytes)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the socket server is not started")
        return self._loop

    @property
    def bound_addresses(self) -> dict[str, tuple[str, int]]:
        """Listener name -> (host, port) actually bound."""
        return dict(self._bound)

    @property
    def bound_address(self) -> tuple[str, int]:
        """The first listener's bound (host, port)."""
        return self._bound[self._listeners[0].listener_name]

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    @property
    def held_count(self) -> int:
        """Connections waiting for a slot under ``max.connections``."""
        return len(self._held)

    async def start(self) -> tuple[str, int]:
        """Bind every listener; returns the first one's bound (host, port)."""
        self._loop = asyncio.get_running_loop()
        try:
            for listener in self._listeners:
                await self._start_listener(listener)
        except BaseException:
            await self._close_listeners()
            raise
        self._sweeper = self._loop.create_task(self._sweep_idle())
        return self.bound_address

    async def _start_listener(self, listener: ListenerAddress) -> None:
        name = listener.listener_name
        protocol = str(getattr(listener, "security_protocol", "PLAINTEXT"))
        context = self.ssl_contexts.get(name)

        def factory() -> KafkaConnection:
            conn = KafkaConnection(self, name, next(self._index), protocol, tls=context is not None)
            if context is not None:
                # asyncio tells the protocol nothing of a failed TLS handshake: a connection dropped without
                # ever being made is one.
                weakref.finalize(conn, self._tls_handshake_ended, name, conn.made)
            return conn

        host = listener.host or None
        if context is None:
            server = await self.loop.create_server(
                factory, host, listener.port, reuse_address=True, backlog=self._backlog
            )
        else:
            server = await self.loop.create_server(
                factory, host, listener.port, reuse_address=True, backlog=self._backlog, ssl=context,
                ssl_handshake_timeout=self._ssl_handshake_timeout,
            )  # fmt: skip
        self._servers.append(server)
        sockets = server.sockets
        # Accepted connections inherit the listening socket's buffer sizes (and the receive size is
        # what the handshake's window scale is computed from), so they are set here, before any
        # connection is accepted.
        for sock in sockets:
            for option, size in self._buffer_sizes:
                if size >= 0:
                    sock.setsockopt(socket.SOL_SOCKET, option, size)
        addr = sockets[0].getsockname() if sockets else (listener.host, listener.port)
        family = sockets[0].family if sockets else socket.AF_INET
        bound_host = addr[0] if family in (socket.AF_INET, socket.AF_INET6) else listener.host
        self._bound[name] = (str(bound_host), int(addr[1]))
        log.info("listener %s (%s) bound to %s:%d", name, protocol, bound_host, addr[1])

    def _tls_handshake_ended(self, listener: str, made: list[bool]) -> None:
        if not made[0]:
            self.tls_handshake_failed(listener)

    def tls_handshake_failed(self, listener: str) -> None:
        """A TLS client was refused: its handshake failed, or its certificate gives no principal."""
        self.tls_handshake_failures[listener] = self.tls_handshake_failures.get(listener, 0) + 1
        self.peer_log("tls handshake", logging.INFO,
                      "TLS handshake failed on listener %s (a client not speaking TLS, or without a certificate "
                      "the trust store accepts)", listener)  # fmt: skip
        if self.on_tls_handshake_failed is not None:
            self.on_tls_handshake_failed(listener)

    def socket_fds(self) -> list[int]:
        """The descriptors of the listening sockets and of every connection's socket."""
        fds = [sock.fileno() for server in self._servers for sock in server.sockets]
        for conn in [*self._connections, *self._held, *self._rate_held]:
            fds += conn.socket_fds()
        return fds

    async def stop_accepting(self) -> None:
        """Close the listeners (new connections are refused); open connections carry on."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        await self._close_listeners()

    async def abort(self) -> None:
        """Stop at once, as a crash would: close the listeners and drop every connection unanswered."""
        await self.stop_accepting()
        dropped = [*self._connections, *self._held, *self._rate_held]
        if dropped:
            log.debug("dropping %d connection(s)", len(dropped))
        await self._abort_connections()

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, finish queued requests (at most ``timeout`` seconds), close every connection."""
        await self.stop_accepting()
        connections = list(self._connections)
        if connections:
            _done, pending = await asyncio.wait(
                [asyncio.ensure_future(c.shutdown()) for c in connections], timeout=timeout
            )
            for task in pending:
                task.cancel()
            if pending:
                log.warning("%d connection(s) unfinished after %.1fs; closing them", len(pending), timeout)
        await self._abort_connections()

    async def _abort_connections(self) -> None:
        if self._owner_check is not None:
            self._owner_check.cancel()
            self._owner_check = None
        for conn in [*self._connections, *self._held, *self._rate_held]:
            conn.abort()
        # Give the loop a turn so transports run connection_lost.
        for _ in range(3):
            if not self._connections and not self._held and not any(not c.closed for c in self._rate_held):
                break
            await asyncio.sleep(0)

    async def _close_listeners(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        for server in servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)

    # ------------------------------------------------------- connection registry

    def connection_opened(self, conn: KafkaConnection) -> None:
        """A new connection: held while ``max.connection.creation.rate`` is exceeded, then admitted, held until a
        slot frees (``max.connections``), or refused (``max.connections.per.ip``)."""
        if self._rate_held:  # the connections before it wait out a creation-rate throttle
            conn.hold()
            self._rate_held.append(conn)
            return
        throttle = self.quotas.record_connection(int(self.loop.time() * 1000))
        if throttle > 0:
            conn.hold()
            self._rate_held.append(conn)
            self.loop.call_later(throttle / 1000.0, self._after_creation_throttle)
            return
        self._take_in(conn)

    def _after_creation_throttle(self) -> None:
        """The connection that went over the creation rate has waited; the ones behind it are counted in turn."""
        first = True
        while self._rate_held:
            conn = self._rate_held[0]
            if not conn.closed and not first:
                throttle = self.quotas.record_connection(int(self.loop.time() * 1000))
                if throttle > 0:
                    self.loop.call_later(throttle / 1000.0, self._after_creation_throttle)
                    return
            self._rate_held.popleft()
            first = False
            if not conn.closed:
                self._take_in(conn)

    def _take_in(self, conn: KafkaConnection) -> None:
        if self.quotas.slot_available() and not self._held:
            self._admit(conn)
        elif len(self._held) >= self._backlog:
            self.peer_log(
                "no slot", logging.INFO, "refusing connection %s: %d wait for a slot already",
                conn.info.connection_id, len(self._held),
            )
            conn.abort()
        else:
            conn.hold()
            self._held[conn] = None
            if len(self._held) == 1:
                self.peer_log(
                    "held", logging.INFO, "max.connections (%d) reached; new connections wait",
                    self.quotas.max_connections,
                )

    def _admit(self, conn: KafkaConnection) -> None:
        host = conn.info.client_host
        if not self.quotas.try_inc(host):
            self.peer_log(
                "per ip",
                logging.INFO,
                "refusing connection %s: %s has %d connections, its max.connections.per.ip is %d",
                conn.info.connection_id, host, self.quotas.count(host), self.quotas.limit_for(host),
            )
            conn.abort()
            return
        self._connections.add(conn)
        conn.release()
        log.debug("connection %s opened", conn.info.connection_id)

    def _admit_held(self) -> None:
        while self._held and self.quotas.slot_available():
            conn, _ = self._held.popitem(last=False)
            if not conn.closed:
                self._admit(conn)

    def wait_for_queue_room(self, conn: KafkaConnection) -> None:
        """``conn`` stopped reading because ``max_queued_requests`` frames are queued."""
        if not self.queue_waiters:
            log.debug("%d requests queued (queued.max.requests): reading pauses", self.queued_requests)
        self.queue_waiters.add(conn)

    def resume_queue_waiters(self) -> None:
        waiters, self.queue_waiters = self.queue_waiters, set()
        for conn in waiters:
            conn.resume_after_wait()

    def wait_for_memory(self, conn: KafkaConnection) -> None:
        """``conn`` stopped reading because ``request_bytes`` is at ``max_queued_bytes``."""
        if not self.memory_waiters:
            log.debug("%d request bytes in flight (queued.max.request.bytes): reading pauses", self.request_bytes)
        self.memory_waiters[conn] = None
        if self._owner_check is None and self.memory_owner is not None:
            self._owner_check = self.loop.call_later(OWNER_STALL_S, self._check_owner)

    def _check_owner(self) -> None:
        """A connection finishing its frame at the bound that stalls must not hold up the others: after
        ``OWNER_STALL_S`` without a byte, the turn goes to a waiting connection in the middle of a frame
        (the stalled one pauses at its next read, as any other)."""
        self._owner_check = None
        owner = self.memory_owner
        if owner is None or not self.memory_waiters:
            return
        idle = self.loop.time() - owner.last_active
        if idle >= OWNER_STALL_S:
            self.memory_owner = None
            self.memory_released()
            idle = 0.0
        if self.memory_owner is not None and self.memory_waiters:
            self._owner_check = self.loop.call_later(OWNER_STALL_S - idle, self._check_owner)

    def memory_released(self) -> None:
        """Request bytes were let go of: below the bound every waiter reads on; at it, one that is in
        the middle of a frame does (when none is reading on already), so that frame can complete."""
        if self.request_bytes < self.max_queued_bytes or self.max_queued_bytes <= 0:
            waiters, self.memory_waiters = self.memory_waiters, {}
            for conn in waiters:
                conn.resume_after_wait()
        elif self.memory_owner is None:
            for conn in self.memory_waiters:
                if conn.mid_frame:
                    del self.memory_waiters[conn]
                    self.memory_owner = conn
                    conn.resume_after_wait()
                    return

    def connection_parked(self, conn: KafkaConnection) -> None:
        """``conn`` waits for its peer to read and no longer counts against the broker-wide bounds: it waits
        for nothing here, and the connections that waited for the room it held read on."""
        self.queue_waiters.discard(conn)
        self.forget_memory_waiter(conn)
        if self.queue_waiters and self.queued_requests <= self.max_queued_requests // 2:
            self.resume_queue_waiters()
        if self.memory_waiters:
            self.memory_released()

    def forget_memory_waiter(self, conn: KafkaConnection) -> None:
        """``conn`` is closing: it waits for memory no more and finishes no frame."""
        self.memory_waiters.pop(conn, None)
        if self.memory_owner is conn:
            self.memory_owner = None

    def connection_lost(self, conn: KafkaConnection) -> None:
        self.queue_waiters.discard(conn)
        if conn not in self._connections:
            self._held.pop(conn, None)  # held or refused: never counted
            return
        self._connections.discard(conn)
        self.quotas.dec(conn.info.client_host)
        log.debug("connection %s closed", conn.info.connection_id)
        try:
            self.handler.connection_closed(conn.info)
        except Exception:
            log.exception("connection_closed handler failed for %s", conn.info)
        self._admit_held()

    def update_quotas(
        self,
        max_connections: int = INT_MAX,
        max_per_ip: int = INT_MAX,
        per_ip_overrides: Mapping[str, int] | None = None,
        max_creation_rate: int = INT_MAX,
    ) -> None:
        """New connection limits (dynamic broker configs). Held connections are taken in while
        slots are free; above a lowered ``max_connections`` the connections idle the longest are
        closed, those without a request in progress first. Connections already open are not
        checked against a lowered per-address limit, as in Kafka."""
        self.quotas.update(max_connections, max_per_ip, per_ip_overrides or {})
        self.quotas.max_creation_rate = max_creation_rate
        excess = self.quotas.excess
        if excess:
            idle_first = sorted(self._connections, key=lambda c: (c.busy, c.last_active))
            log.info("max.connections lowered to %d: closing %d idle connections", max_connections, excess)
            for conn in idle_first[:excess]:
                conn.close()
        self._admit_held()

    async def _sweep_idle(self) -> None:
        idle_s = self.idle_timeout_ms / 1000.0
        if idle_s <= 0:
            return
        interval = min(max(idle_s / 10.0, 0.01), 30.0)
        loop = self.loop
        while True:
            await asyncio.sleep(interval)
            self.maybe_close_idle(loop.time() - idle_s)

    def maybe_close_idle(self, deadline: float) -> int:
        """Close connections with no activity since ``deadline`` (loop time): those with nothing in flight, and
        those whose peer has taken none of their answers since (aborted: what is unsent would never go out)."""
        closed = 0
        now = self.loop.time()
        for conn in list(self._connections):
            if conn.stuck_writing:
                conn.write_progress(now)
                if conn.last_active < deadline:
                    self.peer_log("not reading", logging.INFO, "closing connection from %s: it has read none of "
                                  "its answers for connections.max.idle.ms", conn.info)  # fmt: skip
                    conn.abort()
                    closed += 1
            elif not conn.busy and conn.last_active < deadline:
                log.debug("closing idle connection %s", conn.info.connection_id)
                conn.close()
                closed += 1
        return closed
