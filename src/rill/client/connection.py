"""One blocking connection to one broker: framing, correlation ids and version negotiation.

No asyncio and no threads, so it works inside Spark executors and any plain script. A request is written
whole and its response read whole before the next one is sent (Rill's own tools never pipeline). The first
request on a connection is ApiVersions; the broker's table then decides the version of every later request
(the highest both sides support, see ``VERSION_WINDOWS``).

A ``ClientSecurity`` (``rill.client.security``) makes the connection TLS (the socket is wrapped before the
first request) and/or SASL (authenticated right after ApiVersions). When the broker gives the SASL session a
lifetime (KIP-368, ``connections.max.reauth.ms``), the connection authenticates again before the session
ends; should the broker still close it for an expired session, the request is sent once more on a new
connection (the broker closes such a connection before it handles the request).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import time
from dataclasses import dataclass
from typing import Any

from rill.client.security import ClientSecurity, authenticate, tls_failure
from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey, ProtocolError, decode_response, encode_request

_SIZE = struct.Struct(">i")

# The versions this client can speak per API (inclusive). Windows stop below versions that switch topics from
# names to ids, so request bodies stay the same shape across the window.
VERSION_WINDOWS: dict[int, tuple[int, int]] = {
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.METADATA: (1, 12),
    ApiKey.LIST_OFFSETS: (1, 9),
    ApiKey.FETCH: (4, 12),
    ApiKey.PRODUCE: (3, 12),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.FIND_COORDINATOR: (0, 3),
    ApiKey.OFFSET_COMMIT: (2, 8),
    ApiKey.OFFSET_FETCH: (1, 7),
    ApiKey.CREATE_TOPICS: (2, 7),
    # Transactions: the client versions before KIP-890's second part (which bumps the epoch at each EndTxn).
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 4),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    ApiKey.WRITE_TXN_MARKERS: (0, 1),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    # Admin reads of the web console.
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (1, 2),  # rill log-dirs move
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    # SASL: the handshake version that frames the exchange in SaslAuthenticate requests (v0 sent bare tokens).
    ApiKey.SASL_HANDSHAKE: (1, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
}
PLAINTEXT = ClientSecurity()
_REAUTH_AT = 0.85  # authenticate again after this share of the session lifetime the broker gave


class NetworkError(KafkaError):
    """The broker could not be reached, or the connection broke mid-request (retriable)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.NETWORK_EXCEPTION, message)


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` -> ``[("h1", 9092), ("h2", 9093)]``; a bad entry raises ``ValueError``."""
    out: list[tuple[str, int]] = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:  # PLAINTEXT://h:p, SASL_SSL://h:p
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bad bootstrap server {item!r}: expected HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


class BrokerConnection:
    """A connected socket to one broker plus its ApiVersions table."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "rill-client",
        timeout_s: float = 30.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security or PLAINTEXT
        self._correlation = 0
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.authentications = 0  # successful SASL exchanges (re-authentications included)
        self._session_end: float | None = None  # time.monotonic() at which the SASL session expires
        self._reauth_at: float | None = None
        self._connect()

    def _connect(self) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        except OSError as e:
            raise NetworkError(f"cannot connect to {self.host}:{self.port}: {e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.security.uses_tls:
            try:
                context = self.security.ssl_context()
                sock = context.wrap_socket(sock, server_hostname=self.host)
            except ssl.SSLError as e:
                sock.close()
                raise tls_failure(self.host, self.port, e) from None
            except OSError as e:
                sock.close()
                raise NetworkError(f"TLS handshake with {self.host}:{self.port} broke: {e}") from e
            except BaseException:
                sock.close()
                raise
        self._sock = sock
        try:
            self._negotiate()
            if self.security.uses_sasl:
                self._authenticate()
        except BaseException:
            self.close()
            raise

    # -- SASL --------------------------------------------------------------------------------------------

    def _authenticate(self) -> None:
        def send(api_key: int, body: dict[str, Any]) -> dict[str, Any]:
            return self._roundtrip(api_key, self.version_for(api_key), body)

        lifetime_ms = authenticate(self.security, send, f"{self.host}:{self.port}")
        self.authentications += 1
        if lifetime_ms > 0:
            now = time.monotonic()
            self._session_end = now + lifetime_ms / 1000
            self._reauth_at = now + lifetime_ms / 1000 * _REAUTH_AT
        else:
            self._session_end = self._reauth_at = None

    def _reauthenticate(self) -> None:
        """KIP-368: a new SASL exchange on this connection, or a new connection if this one broke."""
        try:
            self._authenticate()
        except NetworkError:
            self._connect()

    # -- versions ----------------------------------------------------------------------------------------

    def _negotiate(self) -> None:
        body = self._roundtrip(
            ApiKey.API_VERSIONS, 3, {"client_software_name": "rill", "client_software_version": "0.1.0"}
        )
        if body["error_code"] == ErrorCode.UNSUPPORTED_VERSION:
            body = self._roundtrip(ApiKey.API_VERSIONS, 0, {})
        if body["error_code"] != 0:
            raise KafkaError(ErrorCode(body["error_code"]), f"ApiVersions failed on {self.host}:{self.port}")
        self.api_versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}

    def version_for(self, api_key: int) -> int:
        """The highest version of ``api_key`` both this client and the broker speak."""
        low, high = VERSION_WINDOWS[api_key]
        broker = self.api_versions.get(api_key)
        if broker is None:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"broker does not support API {ApiKey(api_key).name}")
        v = min(high, broker[1])
        if v < max(low, broker[0]):
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"no common version of {ApiKey(api_key).name}: client {low}-{high}, broker {broker[0]}-{broker[1]}",
            )
        return v

    # -- requests ----------------------------------------------------------------------------------------

    def request(self, api_key: int, body: dict[str, Any], *, version: int | None = None) -> tuple[int, dict[str, Any]]:
        """Send ``body`` at the negotiated version; returns (version used, response body)."""
        if self._reauth_at is not None and time.monotonic() >= self._reauth_at:
            self._reauthenticate()
        v = self.version_for(api_key) if version is None else version
        try:
            return v, self._roundtrip(api_key, v, body)
        except NetworkError:
            if self._session_end is None or time.monotonic() < self._session_end:
                raise
        # The broker closed the connection, unanswered, because the SASL session had expired: it did not
        # handle the request, so it is sent again, once, on a new authenticated connection.
        self._connect()
        return v, self._roundtrip(api_key, v, body)

    def _roundtrip(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        corr = self._correlation
        frame = encode_request(api_key, version, corr, self.client_id, body)
        try:
            self._sock.sendall(frame)
            size = _SIZE.unpack(self._read_exactly(4))[0]
            payload = self._read_exactly(size)
        except OSError as e:
            self.close()
            raise NetworkError(f"connection to {self.host}:{self.port} failed: {e}") from e
        try:
            got, response = decode_response(api_key, version, memoryview(payload))
        except ProtocolError as e:
            self.close()
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"bad response from {self.host}:{self.port}: {e}") from e
        if got != corr:
            self.close()
            raise NetworkError(f"correlation id mismatch from {self.host}:{self.port}: {got} != {corr}")
        return response

    def _read_exactly(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            r = self._sock.recv_into(view[got:], n - got)
            if r == 0:
                raise OSError("connection closed by broker")
            got += r
        return buf

    @property
    def closed(self) -> bool:
        return self._sock.fileno() < 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
