"""SCRAM credentials as Kafka keeps them: per user and mechanism, a salt, the iteration count, and the
stored and server keys derived from the salted password (RFC 5802); never the password.

The stored form is Kafka's (``ScramCredentialUtils``), the value of the mechanism's key in the user's config
(``/config/users/<user>`` in ZooKeeper): ``salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=N``.
Mechanisms carry Kafka's type ids in DescribeUserScramCredentials / AlterUserScramCredentials.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from dataclasses import dataclass

from rill.security import scram_messages as sm
from rill.security.scram_messages import MIN_ITERATIONS

SCRAM_MECHANISMS: dict[str, int] = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
"""Mechanism name -> Kafka's ScramMechanism type id (0 is UNKNOWN)."""
MECHANISM_NAMES: dict[int, str] = {v: k for k, v in SCRAM_MECHANISMS.items()}
MAX_ITERATIONS = 16384
__all__ = ["MAX_ITERATIONS", "MECHANISM_NAMES", "MIN_ITERATIONS", "SCRAM_MECHANISMS", "ScramCredential"]


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_string(self) -> str:
        def b64(b: bytes) -> str:
            return base64.b64encode(b).decode()

        return (
            f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},server_key={b64(self.server_key)},"
            f"iterations={self.iterations}"
        )

    @classmethod
    def from_string(cls, text: str) -> ScramCredential:
        """Parse the stored form; ValueError when it is not one."""
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(
                base64.b64decode(fields["salt"], validate=True),
                base64.b64decode(fields["stored_key"], validate=True),
                base64.b64decode(fields["server_key"], validate=True),
                int(fields["iterations"]),
            )
        except (KeyError, ValueError, binascii.Error) as e:
            raise ValueError(f"not a SCRAM credential: {e}") from None


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """The credential AlterUserScramCredentials describes (the client sends the salt and the salted password)."""
    client_key = sm.client_key(mechanism, salted_password)
    return ScramCredential(
        salt, sm.stored_key(mechanism, client_key), sm.server_key(mechanism, salted_password), iterations
    )


def credential_from_password(mechanism: str, password: str, iterations: int = MIN_ITERATIONS) -> ScramCredential:
    """A new credential with a random salt."""
    salt = secrets.token_bytes(32)
    return credential_from_salted_password(
        mechanism, salt, sm.salted_password(mechanism, password, salt, iterations), iterations
    )


def iterations_problem(mechanism: str, iterations: int) -> str | None:
    if iterations < MIN_ITERATIONS:
        return f"Too few iterations for {mechanism}: {iterations} < {MIN_ITERATIONS}"
    if iterations > MAX_ITERATIONS:
        return f"Too many iterations for {mechanism}: {iterations} > {MAX_ITERATIONS}"
    return None
