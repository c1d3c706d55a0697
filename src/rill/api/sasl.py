"""SaslHandshake (17) and SaslAuthenticate (36): SASL authentication of a connection (KIP-43, KIP-152,
re-authentication of KIP-368), after Kafka's SaslServerAuthenticator.

SaslHandshake names the mechanism; the listener answers with the mechanisms it has enabled
(``sasl.enabled.mechanisms``), UNSUPPORTED_SASL_MECHANISM (then closes) for another one, and
ILLEGAL_SASL_STATE on a listener that is not SASL. SaslAuthenticate carries the exchange's tokens. Success
sets the connection's principal to ``User:<name>`` and, with ``connections.max.reauth.ms``, tells the client
its session's lifetime; the client then authenticates again on the same connection, as the same principal.
A failed exchange is logged, counted, and answered with SASL_AUTHENTICATION_FAILED and the reason after
``connection.failed.authentication.delay.ms``; then the connection closes.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import Any

from rill.api.context import BrokerServices, RequestContext
from rill.api.registry import handler
from rill.errors import ErrorCode
from rill.network.handler import CloseConnection, ConnectionInfo
from rill.protocol import ApiKey
from rill.security.channel import ChannelSecurity
from rill.security.listener_configs import ListenerSecurity
from rill.security.principal import USER_TYPE, KafkaPrincipal
from rill.security.sasl_server import SaslAuthenticationError

log = logging.getLogger("rill.security")


def _listener(services: BrokerServices, name: str) -> ListenerSecurity:
    security = services.security
    if security is None:
        return ListenerSecurity(name, "PLAINTEXT")
    return security.listener(name)  # type: ignore[no-any-return]


def _count(services: BrokerServices, listener: str, ok: bool) -> None:
    if services.security is not None:
        services.security.count(listener, ok)


@handler(ApiKey.SASL_HANDSHAKE, 0, 1)
async def sasl_handshake(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    sec = ctx.security
    listener = _listener(ctx.services, ctx.listener_name)
    mechanisms = list(listener.mechanisms)
    if not sec.uses_sasl:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
    if sec.sasl is not None:
        sec.close_after_response = True  # a second handshake in the middle of an exchange
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": mechanisms}
    mechanism = str(request["mechanism"])
    reauthenticating = sec.authenticated
    if (
        mechanism not in mechanisms
        or (reauthenticating and mechanism != sec.mechanism)
        or (reauthenticating and ctx.api_version == 0)
    ):
        why = " (or differs from the session's)" if reauthenticating else ""
        log.info("Closing connection from %s: SASL mechanism %r is not enabled on listener %s%s", ctx.client,
                 mechanism, ctx.listener_name, why)  # fmt: skip
        sec.close_after_response = True
        return {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": mechanisms}
    security = ctx.services.security
    sec.mechanism = mechanism
    sec.sasl = listener.new_sasl_server(mechanism, security.scram_lookup if security is not None else _no_user)
    sec.raw_tokens = ctx.api_version == 0
    return {"error_code": ErrorCode.NONE, "mechanisms": mechanisms}


def _no_user(user: str, mechanism: str) -> None:
    return None


async def _evaluate(
    services: BrokerServices, sec: ChannelSecurity, listener: ListenerSecurity, client: str, token: bytes
) -> tuple[bytes, int]:
    """One round of the exchange: the server's token and, once complete, the session lifetime in ms (0:
    none). SaslAuthenticationError after the failed-authentication delay when the client failed."""
    server = sec.sasl
    assert server is not None
    try:
        out = server.evaluate(token)
        if server.complete:
            principal = KafkaPrincipal(USER_TYPE, server.authorization_id)
            if sec.authenticated and principal != sec.principal:
                raise SaslAuthenticationError(
                    f"Cannot change principals during re-authentication from {sec.principal}: {principal}"
                )
    except SaslAuthenticationError as e:
        _count(services, listener.name, False)
        log.info("Failed authentication with %s (mechanism %s, listener %s): %s", client, server.mechanism,
                 listener.name, e)  # fmt: skip
        sec.sasl = None
        sec.raw_tokens = False
        sec.close_after_response = True
        if listener.failed_delay_ms > 0:
            await asyncio.sleep(listener.failed_delay_ms / 1000.0)
        raise
    if not server.complete:
        return out, 0
    _count(services, listener.name, True)
    sec.principal = principal
    sec.authenticated = True
    sec.sasl = None
    sec.raw_tokens = False
    lifetime = listener.reauth_ms
    sec.session_end = time.monotonic() + lifetime / 1000.0 if lifetime > 0 else None
    log.debug("%s authenticated as %s with %s on listener %s", client, principal, server.mechanism, listener.name)
    return out, lifetime


@handler(ApiKey.SASL_AUTHENTICATE, 0, 2)
async def sasl_authenticate(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    sec = ctx.security
    if sec.sasl is None:
        # Kafka's answers: an authenticated connection (any on a listener without SASL) is told so and goes
        # on; one that has not authenticated yet skipped the handshake, and is closed.
        message = "SaslAuthenticate request received after successful authentication"
        if not sec.authenticated:
            sec.close_after_response = True
            message = "Unexpected SaslAuthenticate request: no SaslHandshake first"
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "error_message": message, "auth_bytes": b""}
    listener = _listener(ctx.services, ctx.listener_name)
    try:
        out, lifetime = await _evaluate(ctx.services, sec, listener, ctx.client, bytes(request["auth_bytes"]))
    except SaslAuthenticationError as e:
        return {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": str(e), "auth_bytes": b""}
    return {"error_code": ErrorCode.NONE, "error_message": None, "auth_bytes": out, "session_lifetime_ms": lifetime}


async def authenticate_raw_token(services: BrokerServices, conn: ConnectionInfo, token: bytes) -> list[bytes]:
    """After a v0 SaslHandshake: one bare token in, one bare token out (size-prefixed). A failure closes the
    connection (a bare token has no room for an error)."""
    sec = conn.security
    listener = _listener(services, conn.listener_name)
    try:
        out, _lifetime = await _evaluate(services, sec, listener, f"{conn.client_host}:{conn.client_port}", token)
    except SaslAuthenticationError as e:
        raise CloseConnection(f"authentication failed: {e}") from None
    return [struct.pack(">i", len(out)), out]
