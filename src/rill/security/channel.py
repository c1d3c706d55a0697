"""The security state of one connection, after Kafka's KafkaChannel and its authenticator.

The network layer creates one ``ChannelSecurity`` per connection (its listener's security protocol, the
principal of its TLS client certificate) and keeps it on the connection's ``ConnectionInfo``; the request
layer reads it for every request and the SASL handlers move it along:

    PLAINTEXT, SSL           authenticated from the start (principal ANONYMOUS, or the certificate's subject)
    SASL_PLAINTEXT, SASL_SSL  not authenticated: only ApiVersions, SaslHandshake and SaslAuthenticate are
                              served, one frame at a time (the network layer reads nothing after a frame
                              until it is answered, and no frame above the listener's
                              sasl.server.max.receive.size); SaslHandshake picks a mechanism;
                              SaslAuthenticate (or, after a v0 handshake, raw tokens) carries the exchange;
                              success sets the principal and, with ``connections.max.reauth.ms``, the
                              session's end (KIP-368: the client authenticates again on the same connection
                              before it, with the same principal)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rill.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from rill.security.sasl_server import SaslServer

SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(slots=True)
class ChannelSecurity:
    """Who a connection is and how far its authentication has gone."""

    security_protocol: str = "PLAINTEXT"
    principal: KafkaPrincipal = ANONYMOUS
    authenticated: bool = True
    mechanism: str | None = None  # the SASL mechanism of the handshake
    sasl: SaslServer | None = field(default=None, repr=False)  # the exchange under way
    raw_tokens: bool = False  # after a v0 SaslHandshake: the next frames are bare SASL tokens
    session_end: float | None = None  # time.monotonic() at which the SASL session expires (KIP-368)
    close_after_response: bool = False  # a failed authentication: answer, then close

    @classmethod
    def for_protocol(cls, protocol: str, principal: KafkaPrincipal = ANONYMOUS) -> ChannelSecurity:
        return cls(protocol, principal, authenticated=protocol not in SASL_PROTOCOLS)

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in SASL_PROTOCOLS

    def session_expired(self, now: float | None = None) -> bool:
        """True once a SASL session with a lifetime has outlived it (the client had to re-authenticate)."""
        if self.session_end is None:
            return False
        return (time.monotonic() if now is None else now) >= self.session_end
