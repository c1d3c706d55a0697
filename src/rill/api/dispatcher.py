"""The request dispatcher: frame -> header -> handler -> response chunks.

It implements the network layer's ``RequestHandler``. A frame whose header cannot be read, an API this
broker does not implement, or a version outside the handler's range closes the connection, as Kafka does;
the one exception is ApiVersions, which answers a too-new version with UNSUPPORTED_VERSION and the
broker's table in the v0 body format so the client can retry with a version both sides know.

Authentication gate (Kafka's SaslServerAuthenticator): on a SASL listener, until the connection has
authenticated, only ApiVersions, SaslHandshake and SaslAuthenticate reach a handler; any other request closes
the connection unanswered. After a v0 SaslHandshake the next frames are bare SASL tokens (no request header),
answered with bare tokens. A SASL session that outlived ``connections.max.reauth.ms`` without the client
authenticating again is closed at its next request other than those three.

Deferred answers: a handler whose context allows it (no client quotas) may return a ``DeferredBody`` (an acks=all
Produce whose records are appended and wait for the followers). The dispatcher then answers with a
``DeferredResponse`` whose task finishes the request (metrics, encoding), and ``may_overlap`` tells the
connection which next requests may be handled before it is answered: Produce only, so that nothing else (a
ListOffsets, an EndTxn) runs before the records it may depend on are committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rill.api._authorized import CLUSTER_CHECKS, authorize_cluster, cluster_refusal
from rill.api._quotas import handle_with_quotas
from rill.api.context import BrokerServices, RequestContext
from rill.api.registry import Body, DeferredBody, load_handlers, supported_versions
from rill.api.sasl import authenticate_raw_token
from rill.common import FileRegion
from rill.errors import ErrorCode
from rill.network.handler import CloseConnection, DeferredResponse
from rill.protocol import (
    ApiKey,
    ProtocolDecodeError,
    decode_request,
    decode_request_header,
    encode_response,
)
from rill.replica.purgatory import PurgatoryClosed

if TYPE_CHECKING:  # the network layer calls us; we only name its connection type
    from rill.network.handler import ConnectionInfo

log = logging.getLogger(__name__)

_BEFORE_AUTHENTICATION = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
_WAITS_BY_DESIGN = frozenset({ApiKey.FETCH, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP})
"""Requests a handler parks on purpose (up to max.wait.ms, or until a rebalance completes): never "slow"."""


class ConnectionClosingError(CloseConnection):
    """Raised to make the network layer close the connection (Kafka's reaction to such requests)."""


class RequestDispatcher:
    def __init__(self, services: BrokerServices, slow_request_ms: float = 1000.0) -> None:
        self.services = services
        self.handlers = load_handlers()
        self.api_versions_table = supported_versions(self.handlers)
        self._ranges = {e["api_key"]: (e["min_version"], e["max_version"]) for e in self.api_versions_table}
        self.slow_request_ms = slow_request_ms
        self._names = {int(k): k.name for k in ApiKey}

    async def handle(
        self, conn: ConnectionInfo, frame: memoryview
    ) -> Sequence[bytes | FileRegion] | DeferredResponse | None:
        started = time.perf_counter()
        security = conn.security
        if security.raw_tokens:
            return await authenticate_raw_token(self.services, conn, bytes(frame))
        try:
            header, pos = decode_request_header(frame)
        except ProtocolDecodeError as e:
            raise ConnectionClosingError(f"unreadable request header from {_peer(conn)}: {e}") from e
        api_key, version, corr = header.api_key, header.api_version, header.correlation_id
        name = self._names.get(api_key, str(api_key))
        if (
            not security.authenticated or (security.session_end is not None and security.session_expired())
        ) and api_key not in _BEFORE_AUTHENTICATION:
            what = "after its SASL session expired" if security.authenticated else "before authenticating"
            raise ConnectionClosingError(
                f"{_peer(conn)} sent {name} {what} on SASL listener {conn.listener_name}; only ApiVersions, "
                "SaslHandshake and SaslAuthenticate are accepted then"
            )
        versions = self._ranges.get(api_key)
        if versions is None:
            raise ConnectionClosingError(f"{_peer(conn)} sent unsupported API key {api_key}")
        if not versions[0] <= version <= versions[1]:
            if api_key == ApiKey.API_VERSIONS:
                body = {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": self.api_versions_table}
                return encode_response(api_key, 0, corr, body)
            raise ConnectionClosingError(
                f"{_peer(conn)} sent {name} v{version}; supported v{versions[0]}-v{versions[1]}"
            )
        try:
            body = decode_request(api_key, version, frame, pos)
        except ProtocolDecodeError as e:
            raise ConnectionClosingError(f"malformed {name} v{version} request from {_peer(conn)}: {e}") from e
        quotas = self.services.quotas
        unquoted = quotas is None or not quotas.active
        ctx = RequestContext(
            api_key, version, corr, header.client_id, conn.client_host, conn.client_port, self.services,
            conn.listener_name, security, conn.client_software, conn.connection_id, unquoted,
        )
        fn = self.handlers[api_key].fn
        cluster_operation = CLUSTER_CHECKS.get(api_key)
        if cluster_operation is not None and not authorize_cluster(ctx, cluster_operation):
            fn = _refusal  # answered CLUSTER_AUTHORIZATION_FAILED without reaching the handler
        if unquoted:
            answer = await fn(ctx, body)
            if isinstance(answer, DeferredBody):
                return DeferredResponse(asyncio.ensure_future(self._finish(answer, ctx, name, started)))
            response = answer
        else:
            decode_ns = int((time.perf_counter() - started) * 1e9)
            response = await handle_with_quotas(quotas, ctx, fn, body, len(frame), conn, decode_ns)
        return self._encode(response, ctx, name, started)

    async def _finish(
        self, deferred: DeferredBody, ctx: RequestContext, name: str, started: float
    ) -> Sequence[bytes | FileRegion] | None:
        try:
            response = await deferred.wait
        except PurgatoryClosed as e:  # the broker stops: the connection closes without the answer
            raise ConnectionClosingError(str(e)) from None
        return self._encode(response, ctx, name, started)

    def _encode(
        self, response: Body | None, ctx: RequestContext, name: str, started: float
    ) -> Sequence[bytes | FileRegion] | None:
        api_key, version = ctx.api_key, ctx.api_version
        elapsed = time.perf_counter() - started
        metrics = self.services.metrics
        if metrics is not None:
            code = response.get("error_code", 0) if response else 0
            metrics.on_request(name, elapsed, int(code))
        if elapsed * 1000 > self.slow_request_ms and api_key not in _WAITS_BY_DESIGN:
            log.warning("Slow request: %s v%d from %s took %.0f ms", name, version, ctx.client, elapsed * 1000)
        if response is None:
            return None
        return encode_response(api_key, version, ctx.correlation_id, response)

    def may_overlap(self, conn: ConnectionInfo, frame: memoryview) -> bool:
        """Whether ``frame`` may be handled while earlier requests of its connection wait for their deferred
        answers: a Produce (its API key, the frame's first two bytes), once the connection is authenticated."""
        return (
            len(frame) >= 2 and frame[0] == 0 and frame[1] == ApiKey.PRODUCE
            and conn.security.authenticated and not conn.security.raw_tokens
        )  # fmt: skip

    def connection_closed(self, conn: ConnectionInfo) -> None:
        return None


async def _refusal(ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
    """The answer to a request of ``CLUSTER_CHECKS`` whose caller may not do its operation on the cluster."""
    return cluster_refusal(ctx.api_key, body)


def _peer(conn: ConnectionInfo) -> str:
    return f"{conn.client_host}:{conn.client_port}"
