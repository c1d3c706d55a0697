"""The server side of SASL PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, ``scram_messages``).

A ``SaslServer`` takes the client's tokens one at a time (``evaluate``) and returns the server's; once
``complete`` it names the authenticated user (``authorization_id``). A failed exchange raises
``SaslAuthenticationError`` with the message the client is told (Kafka's wording; it never says whether the
user or the password was wrong).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from rill.security import scram_messages as sm
from rill.security.scram import SCRAM_MECHANISMS, ScramCredential

log = logging.getLogger("rill.security")

PLAIN = "PLAIN"


class SaslAuthenticationError(Exception):
    """The client failed to authenticate: answered with SASL_AUTHENTICATION_FAILED and this message."""


class SaslServer(Protocol):
    @property
    def mechanism(self) -> str: ...

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str: ...

    def evaluate(self, token: bytes) -> bytes: ...


class PlainSaslServer:
    """``[authzid] NUL authcid NUL passwd`` checked against the JAAS ``user_NAME="password"`` entries."""

    mechanism = PLAIN

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.authorization_id = ""

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationError("Authentication failed: PLAIN exchange already complete")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Authentication failed: PLAIN message is not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise SaslAuthenticationError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(user)
        # Compared in constant time either way, so the time taken does not tell whether the user exists.
        ok = hmac.compare_digest(password.encode(), (expected if expected is not None else "\0" + password).encode())
        if expected is None or not ok:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.authorization_id = user
        self.complete = True
        return b""


CredentialLookup = Callable[[str, str], ScramCredential | None]
"""(user, mechanism) -> the user's credential, or None."""


class ScramSaslServer:
    """Two rounds: client-first -> server-first (salt, iterations, nonce), client-final (proof) -> server-final
    (server signature). As Kafka's ScramSaslServer: an unknown user, or a stored credential with fewer than
    4096 iterations, fails at the first round; the client is told no more than that its credentials failed."""

    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._lookup = lookup
        self._round = 0
        self._first: sm.ClientFirst | None = None
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self.complete = False
        self.authorization_id = ""

    def _failed(self) -> SaslAuthenticationError:
        return SaslAuthenticationError(
            "Authentication failed during authentication due to invalid credentials with SASL mechanism "
            f"{self.mechanism}"
        )

    def evaluate(self, token: bytes) -> bytes:
        round_ = self._round
        self._round += 1
        try:
            text = token.decode("utf-8")
            if round_ == 0:
                return self._client_first(text).encode()
            if round_ == 1:
                return self._client_final(text).encode()
        except ValueError:  # not UTF-8
            raise self._failed() from None
        except sm.ScramError as e:
            log.info("SASL %s authentication failed: %s", self.mechanism, e)
            raise self._failed() from None
        raise SaslAuthenticationError("Authentication failed: SCRAM exchange already complete")

    def _client_first(self, text: str) -> str:
        first = sm.parse_client_first(text)
        credential = self._lookup(first.user, self.mechanism)
        if credential is None:
            raise sm.ScramError(f"no {self.mechanism} credential for user {first.user!r}")
        if first.authzid and first.authzid != first.user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        if credential.iterations < sm.MIN_ITERATIONS:
            raise sm.ScramError(
                f"the stored credential of user {first.user!r} has {credential.iterations} iterations, fewer than "
                f"the minimum {sm.MIN_ITERATIONS} for {self.mechanism}"
            )
        self._first, self._credential = first, credential
        self._nonce = first.nonce + sm.new_nonce()
        self._server_first = sm.server_first(self._nonce, credential.salt, credential.iterations)
        return self._server_first

    def _client_final(self, text: str) -> str:
        first, credential = self._first, self._credential
        if first is None or credential is None:
            raise sm.ScramError("a client-final message without a client-first message")
        self._credential = None
        final = sm.parse_client_final(text)
        if final.nonce != self._nonce:
            raise sm.ScramError("the client-final message's nonce is not the exchange's")
        if final.channel_binding != first.gs2_header.encode():
            raise sm.ScramError("the channel binding is not the client-first message's gs2 header")
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}"
        if not sm.verify_client_proof(self.mechanism, credential.stored_key, auth_message, final.proof):
            raise sm.ScramError(f"invalid proof for user {first.user!r}")
        self.authorization_id = first.user
        self.complete = True
        return "v=" + sm.b64(sm.signature(self.mechanism, credential.server_key, auth_message))
