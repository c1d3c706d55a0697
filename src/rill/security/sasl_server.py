"""The server side of SASL PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, through ``scramp``).

A ``SaslServer`` takes the client's tokens one at a time (``evaluate``) and returns the server's; once
``complete`` it names the authenticated user (``authorization_id``). A failed exchange raises
``SaslAuthenticationError`` with the message the client is told (Kafka's wording; it never says whether the
user or the password was wrong).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from typing import Protocol

import scramp

from rill.security.scram import SCRAM_MECHANISMS, ScramCredential

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
    (server signature)."""

    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._lookup = lookup
        self._server = scramp.ScramMechanism(mechanism).make_server(self._auth_info)
        self._round = 0
        self._user = ""
        self.complete = False
        self.authorization_id = ""

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int] | None:
        self._user = user
        cred = self._lookup(user, self.mechanism)
        if cred is None:
            return None
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    def _failed(self) -> SaslAuthenticationError:
        return SaslAuthenticationError(
            "Authentication failed during authentication due to invalid credentials with SASL mechanism "
            f"{self.mechanism}"
        )

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise self._failed() from None
        try:
            if self._round == 0:
                self._round = 1
                self._server.set_client_first(text)
                return str(self._server.get_server_first()).encode()
            if self._round == 1:
                self._round = 2
                self._server.set_client_final(text)
                final = str(self._server.get_server_final()).encode()
                self.authorization_id = self._user
                self.complete = True
                return final
        except scramp.ScramException:
            raise self._failed() from None
        except Exception:  # a malformed message scramp did not foresee: a failed exchange all the same
            raise self._failed() from None
        raise SaslAuthenticationError("Authentication failed: SCRAM exchange already complete")
