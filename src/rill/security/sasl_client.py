"""The client side of SASL, for connections between brokers: SaslHandshake v1, then the exchange in
SaslAuthenticate requests (PLAIN in one round, SCRAM-SHA-256/512 in two, ``scram_messages``).

The authenticator is given a ``send`` function (API key, request body -> response body) by the connection
it authenticates, after that connection's ApiVersions exchange; a refusal raises ``KafkaError`` with the
broker's error code and message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey
from rill.security.sasl_server import PLAIN
from rill.security.scram_messages import ScramClient, ScramError

Send = Callable[[int, dict[str, Any]], Awaitable[dict[str, Any]]]


def _check(response: dict[str, Any], what: str) -> None:
    code = int(response.get("error_code", 0))
    if code:
        known = ErrorCode(code) if code in ErrorCode._value2member_map_ else ErrorCode.UNKNOWN_SERVER_ERROR
        raise KafkaError(known, f"{what}: {response.get('error_message') or known.name}")


class SaslClientAuthenticator:
    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self.username = username
        self.password = password

    async def __call__(self, send: Send) -> None:
        response = await send(ApiKey.SASL_HANDSHAKE, {"mechanism": self.mechanism})
        _check(response, f"SASL mechanism {self.mechanism} (the broker offers {response.get('mechanisms')})")
        if self.mechanism == PLAIN:
            token = f"\0{self.username}\0{self.password}".encode()
            _check(await send(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token}), "SASL PLAIN authentication")
            return
        client = ScramClient(self.mechanism, self.username, self.password)
        first = await send(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": client.first().encode()})
        _check(first, f"SASL {self.mechanism} authentication")
        try:
            final_token = client.final(bytes(first["auth_bytes"]).decode()).encode()
        except (ScramError, ValueError) as e:
            raise KafkaError(ErrorCode.SASL_AUTHENTICATION_FAILED, f"SASL {self.mechanism}: {e}") from None
        final = await send(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": final_token})
        _check(final, f"SASL {self.mechanism} authentication")
        try:
            client.verify(bytes(final["auth_bytes"]).decode())
        except (ScramError, ValueError) as e:  # the broker could not prove it knows the credential
            raise KafkaError(ErrorCode.SASL_AUTHENTICATION_FAILED, f"SASL {self.mechanism}: {e}") from None
