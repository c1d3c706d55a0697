"""One connection of the asyncio Kafka-protocol client for requests between brokers (``NetworkClient``, in
rill.cluster.network_client, keeps one per node).

``BrokerConnection`` is one TCP connection to one broker. ``connect()`` opens it and sends ApiVersions, both
within ``socket.connection.setup.timeout.ms``; from then on each API is sent at the highest version that both
the broker (its ApiVersions table) and Rill's codec declare, optionally capped by the caller. Requests are
pipelined: up to ``max.in.flight.requests.per.connection`` are written without waiting, each with its own
correlation id, and every response frame, read straight into a buffer of its own (``frame_protocol``), goes to
the request with that id (bodies decoded by the codec; records fields stay ``memoryview``s of the response
frame); a frame whose correlation id answers no request in flight closes the connection before the rest of it
is read, so a peer cannot make the client hold
bytes that no request's timeout bounds. A request with no response within its
timeout (``request.timeout.ms`` by default) fails with ``TimeoutException`` (REQUEST_TIMED_OUT) and, as in
Kafka, the connection is closed: a broker that lets one request time out is not trusted with the others.
When a connection closes for any reason, every request still in flight fails at once with
``DisconnectException`` naming the reason. A closed connection is never reused.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rill.cluster.frame_protocol import FrameProtocol
from rill.errors import ErrorCode, KafkaError
from rill.protocol import MESSAGES, ApiKey, ProtocolError, decode_response_after_correlation_id, encode_request

log = logging.getLogger(__name__)

_SIZE_AND_CORRELATION = struct.Struct(">ii")
_INT16 = struct.Struct(">h")
CLIENT_SOFTWARE_NAME = "rill"
CLIENT_SOFTWARE_VERSION = "1"


class NetworkException(KafkaError):
    """A broker could not be reached or the connection to it broke (NETWORK_EXCEPTION, retriable)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.NETWORK_EXCEPTION, message)


class DisconnectException(NetworkException):
    """The connection closed while the request was in flight; its response will never come."""


class TimeoutException(KafkaError):
    """No response within the request's timeout (REQUEST_TIMED_OUT)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, message)


class UnsupportedVersionException(KafkaError):
    """The broker and the codec share no version of the API (UNSUPPORTED_VERSION)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UNSUPPORTED_VERSION, message)


@dataclass(frozen=True, slots=True)
class NetworkClientConfig:
    """Kafka's client settings, by their config names with ``_`` for ``.``."""

    client_id: str = "rill-broker"
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1000
    request_timeout_ms: int = 30000
    socket_connection_setup_timeout_ms: int = 10000
    max_in_flight_requests_per_connection: int = 5
    ssl_context: ssl.SSLContext | None = None  # TLS to the broker (an SSL or SASL_SSL listener)
    authenticator: Callable[[Callable[[int, dict[str, Any]], Awaitable[dict[str, Any]]]], Awaitable[None]] | None = None
    """SASL after ApiVersions (``rill.security.sasl_client``): given a send(api_key, body) -> response body."""

    def __post_init__(self) -> None:
        for name in ("reconnect_backoff_ms", "reconnect_backoff_max_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name.replace('_', '.')} must be at least 0")
        for name in (
            "request_timeout_ms",
            "socket_connection_setup_timeout_ms",
            "max_in_flight_requests_per_connection",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '.')} must be at least 1")


@dataclass(frozen=True, slots=True)
class ClientResponse:
    api_key: int
    api_version: int
    correlation_id: int
    body: dict[str, Any]


class _InFlight:
    __slots__ = ("api_key", "future", "timer", "version")

    def __init__(self, api_key: int, version: int, future: asyncio.Future[ClientResponse]) -> None:
        self.api_key = api_key
        self.version = version
        self.future = future
        self.timer: asyncio.TimerHandle | None = None


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API {api_key}"


def _decode(api_key: int, version: int, rest: bytes | bytearray) -> dict[str, Any]:
    """The body of a response from what follows its correlation id."""
    # a broker that does not know the ApiVersions version asked for answers UNSUPPORTED_VERSION in the v0 body
    # format (its header is always v0, so the error code sits right after the correlation id)
    if (
        api_key == ApiKey.API_VERSIONS
        and version > 0
        and len(rest) >= 2
        and _INT16.unpack_from(rest, 0)[0] == ErrorCode.UNSUPPORTED_VERSION
    ):
        version = 0
    return decode_response_after_correlation_id(api_key, version, memoryview(rest))


class BrokerConnection:
    """One connection to one broker; see the module docstring."""

    def __init__(self, host: str, port: int, config: NetworkClientConfig | None = None, *, node_id: int = -1) -> None:
        self.host = host
        self.port = port
        self.node_id = node_id
        self.config = config or NetworkClientConfig()
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._protocol: FrameProtocol | None = None
        self._reading: _InFlight | None = None  # the request whose response frame is being read
        self._in_flight: dict[int, _InFlight] = {}
        self._slots = asyncio.Semaphore(self.config.max_in_flight_requests_per_connection)
        self._correlation = 0
        self._connected = False
        self._closed = False
        self.close_reason: str | None = None
        self._close_callbacks: list[Callable[[BrokerConnection], None]] = []

    def __str__(self) -> str:
        return f"node {self.node_id} ({self.host}:{self.port})"

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def ready(self) -> bool:
        """Connected, versions known, not closed."""
        return self._connected and not self._closed

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    def add_close_callback(self, fn: Callable[[BrokerConnection], None]) -> None:
        """Call ``fn(self)`` once when the connection closes (at once if it already has)."""
        if self._closed:
            fn(self)
        else:
            self._close_callbacks.append(fn)

    # -- setup -----------------------------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the socket and learn the broker's versions, within socket.connection.setup.timeout.ms."""
        if self._protocol is not None or self._closed:
            raise RuntimeError(f"connection to {self} was already opened")
        setup_ms = self.config.socket_connection_setup_timeout_ms
        try:
            async with asyncio.timeout(setup_ms / 1000):
                protocol = FrameProtocol(self._on_header, self._on_frame, self._on_lost)
                self._protocol = protocol
                await asyncio.get_running_loop().create_connection(
                    lambda: protocol, self.host, self.port, ssl=self.config.ssl_context
                )
                assert protocol.transport is not None
                sock = protocol.transport.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await self._negotiate()
                if self.config.authenticator is not None:
                    await self.config.authenticator(self._exchange)
        except TimeoutError:
            self._shutdown(f"closed: setup timed out after {setup_ms} ms", abort=True)
            raise NetworkException(f"cannot connect to {self}: setup timed out after {setup_ms} ms") from None
        except OSError as e:
            self._shutdown(f"closed: cannot connect: {e}", abort=True)
            raise NetworkException(f"cannot connect to {self}: {e}") from e
        except NetworkException as e:
            self._shutdown(f"closed: {e.message}", abort=True)
            raise NetworkException(f"cannot connect to {self}: {e.message}") from e
        except BaseException:
            self._shutdown("closed: connection setup failed", abort=True)
            raise
        self._connected = True
        log.debug("Connected to %s", self)

    async def _negotiate(self) -> None:
        body = {"client_software_name": CLIENT_SOFTWARE_NAME, "client_software_version": CLIENT_SOFTWARE_VERSION}
        version = MESSAGES[ApiKey.API_VERSIONS].max_version
        response = await self._send(ApiKey.API_VERSIONS, version, body, self.config.request_timeout_ms / 1000)
        assert response is not None
        got = response.body
        if got["error_code"] == ErrorCode.UNSUPPORTED_VERSION:
            theirs = {e["api_key"]: e["max_version"] for e in got["api_keys"]}.get(ApiKey.API_VERSIONS, 0)
            version = min(version, theirs)
            response = await self._send(ApiKey.API_VERSIONS, version, body, self.config.request_timeout_ms / 1000)
            assert response is not None
            got = response.body
        code = got["error_code"]
        if code != ErrorCode.NONE:
            known = ErrorCode(code) if code in ErrorCode._value2member_map_ else ErrorCode.UNKNOWN_SERVER_ERROR
            raise KafkaError(known, f"ApiVersions v{version} to {self} failed with error {code}")
        self.api_versions = {e["api_key"]: (e["min_version"], e["max_version"]) for e in got["api_keys"]}

    async def _exchange(self, api_key: int, body: dict[str, Any]) -> dict[str, Any]:
        response = await self._send(api_key, self._pick_version(api_key, None, None), body,
                                    self.config.request_timeout_ms / 1000)  # fmt: skip
        assert response is not None
        return response.body

    # -- versions --------------------------------------------------------------------------------------

    def version_for(self, api_key: int, max_version: int | None = None) -> int:
        """The highest version of ``api_key`` the broker and the codec both know (at most ``max_version``)."""
        return self._pick_version(api_key, None, max_version)

    def _pick_version(self, api_key: int, version: int | None, max_version: int | None) -> int:
        name = _api_name(api_key)
        spec = MESSAGES.get(api_key)
        if spec is None:
            raise UnsupportedVersionException(f"the codec declares no {name}")
        broker = self.api_versions.get(api_key)
        if broker is None:
            raise UnsupportedVersionException(f"{self} does not support {name}")
        low = max(spec.min_version, broker[0])
        high = min(spec.max_version, broker[1])
        if version is not None:
            if not low <= version <= high:
                raise UnsupportedVersionException(f"{name} v{version} is outside the common v{low}-v{high} with {self}")
            return version
        if max_version is not None:
            high = min(high, max_version)
        if high < low:
            raise UnsupportedVersionException(
                f"no common version of {name}: codec v{spec.min_version}-v{spec.max_version}, "
                f"{self} v{broker[0]}-v{broker[1]}" + (f", at most v{max_version}" if max_version is not None else "")
            )
        return high

    # -- requests --------------------------------------------------------------------------------------

    async def request(
        self,
        api_key: int,
        body: dict[str, Any],
        *,
        version: int | None = None,
        max_version: int | None = None,
        timeout_ms: float | None = None,
    ) -> ClientResponse | None:
        """Send one request and await its response (None for Produce with acks=0, which has none).

        ``version`` forces a version; otherwise the highest common one, at most ``max_version``. Raises
        ``TimeoutException``, ``DisconnectException``, ``UnsupportedVersionException``, or
        ``ProtocolEncodeError`` for a body that does not fit the version (nothing is sent then)."""
        if not self.ready:
            raise DisconnectException(f"connection to {self} is {self.close_reason or 'not connected'}")
        v = self._pick_version(api_key, version, max_version)
        timeout_s = (self.config.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        return await self._send(api_key, v, body, timeout_s)

    async def _send(self, api_key: int, version: int, body: dict[str, Any], timeout_s: float) -> ClientResponse | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        slots = self._slots
        if slots.locked():
            try:
                async with asyncio.timeout_at(deadline):
                    await slots.acquire()
            except TimeoutError:
                raise TimeoutException(
                    f"{_api_name(api_key)} to {self}: no free in-flight slot within {timeout_s * 1000:.0f} ms"
                ) from None
        else:
            await slots.acquire()  # free: returns at once
        protocol = self._protocol
        writer = protocol.transport if protocol is not None else None
        if self._closed or writer is None:
            slots.release()
            raise DisconnectException(f"connection to {self} is {self.close_reason or 'not connected'}")
        self._correlation = corr = (self._correlation + 1) & 0x7FFFFFFF
        try:
            frame = encode_request(api_key, version, corr, self.config.client_id, body)
        except BaseException:
            slots.release()
            raise
        if api_key == ApiKey.PRODUCE and body.get("acks") == 0:  # the broker sends no response
            slots.release()
            writer.write(frame)
            await self._drain()
            if self._closed:
                raise DisconnectException(f"Produce (acks=0) to {self} failed: {self.close_reason}")
            return None
        future: asyncio.Future[ClientResponse] = loop.create_future()
        entry = self._in_flight[corr] = _InFlight(api_key, version, future)
        entry.timer = loop.call_at(deadline, self._timed_out, corr, timeout_s)
        writer.write(frame)
        await self._drain()
        return await future

    async def _drain(self) -> None:
        protocol = self._protocol
        assert protocol is not None
        try:
            await protocol.drain()
        except (OSError, RuntimeError) as e:  # RuntimeError: the transport was closed under us
            self._shutdown(f"broken: write failed: {e}", abort=True)

    def _timed_out(self, corr: int, timeout_s: float) -> None:
        entry = self._in_flight.pop(corr, None)
        if entry is None:
            return
        self._slots.release()
        what = f"{_api_name(entry.api_key)} v{entry.version} (correlation id {corr})"
        if not entry.future.done():
            entry.future.set_exception(
                TimeoutException(f"{what} to {self} got no response within {timeout_s * 1000:.0f} ms")
            )
        self._shutdown(f"closed after {what} timed out", abort=True)

    def _on_header(self, size: int, corr: int) -> int:
        """A response frame's size and correlation id have come: the length of the rest to read, or -1 when
        the frame is refused (the connection is closed)."""
        if size < 4:
            self._shutdown(f"closed after a response frame of invalid size {size}", abort=True)
            return -1
        # The frame must answer a request in flight before it is read (its request's timeout bounds the
        # time it takes): a frame that answers nothing is never taken into memory.
        entry = self._in_flight.pop(corr, None)
        if entry is None:
            self._shutdown(f"closed after a response with unknown correlation id {corr}", abort=True)
            return -1
        self._reading = entry
        return size - 4

    def _on_frame(self, corr: int, frame: bytearray) -> None:
        entry, self._reading = self._reading, None
        assert entry is not None
        if entry.timer is not None:
            entry.timer.cancel()
        self._slots.release()
        future = entry.future
        if future.done():  # the caller gave up waiting
            return
        try:
            body = _decode(entry.api_key, entry.version, frame)
        except ProtocolError as e:
            future.set_exception(
                KafkaError(
                    ErrorCode.CORRUPT_MESSAGE,
                    f"malformed {_api_name(entry.api_key)} v{entry.version} response from {self}: {e}",
                )
            )
            return
        future.set_result(ClientResponse(entry.api_key, entry.version, corr, body))

    def _on_lost(self, exc: Exception | None) -> None:
        self._shutdown("closed by the broker" if exc is None else f"broken: {exc}", abort=True)

    # -- closing ---------------------------------------------------------------------------------------

    def _shutdown(self, reason: str, *, abort: bool) -> None:
        if self._closed:
            return
        self._closed = True
        self.close_reason = reason
        pending = list(self._in_flight.items())
        self._in_flight.clear()
        for corr, entry in pending:
            if entry.timer is not None:
                entry.timer.cancel()
            self._slots.release()  # wakes requests waiting for a slot; they see the connection closed
            if not entry.future.done():
                entry.future.set_exception(
                    DisconnectException(
                        f"{_api_name(entry.api_key)} v{entry.version} (correlation id {corr}) to {self} failed: "
                        f"connection {reason}"
                    )
                )
        reading, self._reading = self._reading, None
        if reading is not None:  # a response being read when the connection ended
            if reading.timer is not None:
                reading.timer.cancel()
            self._slots.release()
            pending.append((-1, reading))
            if not reading.future.done():
                reading.future.set_exception(
                    DisconnectException(
                        f"{_api_name(reading.api_key)} v{reading.version} to {self} failed: "
                        f"connection {reason} while its response was read"
                    )
                )
        protocol = self._protocol
        transport = protocol.transport if protocol is not None else None
        if transport is not None:
            if abort:
                transport.abort()
            else:
                transport.close()
        if self._connected:
            log.info("Connection to %s %s (%d requests in flight failed)", self, reason, len(pending))
        callbacks, self._close_callbacks = self._close_callbacks, []
        for fn in callbacks:
            fn(self)

    async def close(self) -> None:
        """Close; requests still in flight fail with ``DisconnectException``."""
        self._shutdown("closed by the client", abort=False)
