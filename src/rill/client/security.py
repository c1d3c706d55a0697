"""Security of ``rill.client`` connections: TLS and SASL, configured with the names of Kafka's Java client.

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="alice" password="alice-secret";
    ssl.truststore.type=PEM
    ssl.truststore.location=/etc/rill/ca.pem
    ssl.keystore.type=PEM
    ssl.keystore.location=/etc/rill/client.pem        (certificate chain and key, for mutual TLS)
    ssl.endpoint.identification.algorithm=            (empty: no host name check; default https)

``ClientSecurity.from_properties`` reads such settings (librdkafka's spellings of the same settings, as a
``--command-config`` file for confluent-kafka may hold them, are taken too); what the client cannot do (JKS
or PKCS12 stores, GSSAPI, OAUTHBEARER, ...) raises ``SecurityConfigError`` naming the setting.

On a connection, TLS wraps the socket (Python's ``ssl``) before the first request; SASL runs after
ApiVersions: SaslHandshake v1 names the mechanism, SaslAuthenticate frames carry the exchange (PLAIN in one
message, SCRAM-SHA-256/512 in two, ``rill.security.scram_messages``). A refusal raises ``AuthenticationError``, which is
not retriable, with the mechanism, the user and the broker's message.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey
from rill.security.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, parse_jaas_config
from rill.security.scram_messages import ScramClient, ScramError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES = {"PLAIN": PLAIN_LOGIN_MODULE, "SCRAM-SHA-256": SCRAM_LOGIN_MODULE, "SCRAM-SHA-512": SCRAM_LOGIN_MODULE}

# librdkafka's names of the same settings -> Kafka's (a --command-config may be written for either client).
_ALIASES = {
    "sasl.mechanisms": "sasl.mechanism",
    "ssl.ca.location": "ssl.truststore.location",
    "ssl.certificate.location": "ssl.keystore.location",
}
# Settings that need nothing from this client: the password of a PEM trust store (it has none) and TLS
# versions (Python's defaults are TLS 1.2 and 1.3).
_IGNORED = frozenset(
    {
        "ssl.truststore.password",
        "ssl.protocol",
        "ssl.enabled.protocols",
    }
)
_KNOWN = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.jaas.config",
        "sasl.username",
        "sasl.password",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.key.password",
        "ssl.keystore.password",  # the encrypted key's password when ssl.key.password is not given
        "ssl.key.location",  # librdkafka: the key file beside ssl.certificate.location
        "ssl.endpoint.identification.algorithm",
    }
)


class SecurityConfigError(ValueError):
    """A security setting the client cannot use (the message names it)."""


class AuthenticationError(KafkaError):
    """The broker refused the client's credentials, or the TLS handshake failed (not retriable)."""

    @property
    def retriable(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How a client secures its connections (picklable, so Spark can ship it to executors)."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str = ""
    password: str = ""
    truststore: str | None = None  # a PEM file of CA certificates; None: the system's
    keystore: str | None = None  # a PEM file with the client's certificate chain (and key)
    key_file: str | None = None  # the key, when it is not in ``keystore``
    key_password: str | None = None
    check_hostname: bool = True

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __repr__(self) -> str:  # no password in logs or tracebacks
        return f"ClientSecurity({self.protocol}, mechanism={self.mechanism}, user={self.username!r})"

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> ClientSecurity:
        """The security settings among ``props`` (other client settings are left alone)."""
        given: dict[str, str] = {}
        for raw_key, value in props.items():
            key = _ALIASES.get(raw_key.strip().lower(), raw_key.strip().lower())
            if key == "security.protocol" or key.startswith(("ssl.", "sasl.")):
                if key not in _KNOWN and key not in _IGNORED:
                    raise SecurityConfigError(f"{raw_key} is not supported by rill's client")
                given.setdefault(key, str(value).strip())
        protocol = given.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise SecurityConfigError(f"security.protocol {protocol} is not one of {', '.join(PROTOCOLS)}")
        for key in ("ssl.truststore.type", "ssl.keystore.type"):
            kind = given.get(key, "PEM").upper()
            if kind != "PEM":
                raise SecurityConfigError(
                    f"{key} {kind} is not supported: rill's client reads PEM files only (convert the store with "
                    "openssl or keytool and set it to PEM)"
                )
        algorithm = given.get("ssl.endpoint.identification.algorithm", "https").lower()
        if algorithm not in ("", "https", "none"):
            raise SecurityConfigError(
                f"ssl.endpoint.identification.algorithm {algorithm!r} is not supported (https, or empty for none)"
            )
        mechanism, username, password = _sasl(given) if protocol.startswith("SASL_") else (None, "", "")
        return cls(
            protocol=protocol,
            mechanism=mechanism,
            username=username,
            password=password,
            truststore=given.get("ssl.truststore.location") or None,
            keystore=given.get("ssl.keystore.location") or None,
            key_file=given.get("ssl.key.location") or None,
            key_password=given.get("ssl.key.password") or given.get("ssl.keystore.password") or None,
            check_hostname=algorithm == "https",
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of this client's connections (made once per setting, then shared)."""
        try:
            return _context(self.truststore, self.keystore, self.key_file, self.key_password, self.check_hostname)
        except (OSError, ssl.SSLError, ValueError) as e:
            raise SecurityConfigError(f"cannot set up TLS: {e}") from None


def _sasl(given: Mapping[str, str]) -> tuple[str, str, str]:
    mechanism = given.get("sasl.mechanism", "").upper()
    if not mechanism:
        raise SecurityConfigError(
            f"sasl.mechanism is required with SASL (one of {', '.join(MECHANISMS)}; GSSAPI, Kafka's default, is "
            "not supported)"
        )
    if mechanism not in MECHANISMS:
        raise SecurityConfigError(
            f"sasl.mechanism {mechanism} is not supported by rill's client (it speaks {', '.join(MECHANISMS)})"
        )
    username, password = given.get("sasl.username", ""), given.get("sasl.password", "")
    jaas = given.get("sasl.jaas.config")
    if jaas:
        try:
            modules = parse_jaas_config(jaas)
        except ValueError as e:
            raise SecurityConfigError(f"sasl.jaas.config: {e}") from None
        module = modules[0]
        if module.class_name != _LOGIN_MODULES[mechanism]:
            raise SecurityConfigError(
                f"sasl.jaas.config: login module {module.class_name} is not supported with sasl.mechanism "
                f"{mechanism} (use {_LOGIN_MODULES[mechanism]})"
            )
        username = module.options.get("username", username)
        password = module.options.get("password", password)
    if not username:
        raise SecurityConfigError(
            f"sasl.jaas.config must give the username and password for {mechanism}, e.g. "
            f'{_LOGIN_MODULES[mechanism]} required username="alice" password="...";'
        )
    return mechanism, username, password


@lru_cache(maxsize=16)
def _context(
    truststore: str | None, keystore: str | None, key_file: str | None, key_password: str | None, check_hostname: bool
) -> ssl.SSLContext:
    for setting, path in (("ssl.truststore.location", truststore), ("ssl.keystore.location", keystore)):
        if path is not None:
            with open(path, "rb") as f:
                head = f.read(1 << 16)
            if b"-----BEGIN" not in head:
                raise ValueError(
                    f"{setting} {path} is not a PEM file (rill's client reads PEM only; JKS and PKCS12 stores "
                    "are not supported)"
                )
    ctx = ssl.create_default_context(cafile=truststore)
    ctx.check_hostname = check_hostname
    if keystore is not None:
        ctx.load_cert_chain(keystore, key_file, key_password)
    return ctx


def tls_failure(host: str, port: int, error: ssl.SSLError) -> AuthenticationError:
    why = getattr(error, "verify_message", None) or error.reason or str(error)
    return AuthenticationError(
        ErrorCode.UNKNOWN_SERVER_ERROR,
        f"TLS handshake with {host}:{port} failed: {why} (check security.protocol, ssl.truststore.location and "
        "ssl.endpoint.identification.algorithm)",
    )


# -- SASL ------------------------------------------------------------------------------------------------

Send = Callable[[int, dict[str, Any]], dict[str, Any]]


def _refused(response: dict[str, Any], what: str) -> AuthenticationError | None:
    code = int(response.get("error_code", 0))
    if not code:
        return None
    known = ErrorCode(code) if code in ErrorCode._value2member_map_ else ErrorCode.UNKNOWN_SERVER_ERROR
    return AuthenticationError(known, f"{what}: {known.name}: {response.get('error_message') or known.name}")


def authenticate(security: ClientSecurity, send: Send, where: str) -> int:
    """Run the SASL exchange over ``send`` (API key, body -> response body); returns the session lifetime in
    ms the broker gave (0: none). Raises ``AuthenticationError`` when the broker refuses."""
    mechanism = security.mechanism
    assert mechanism is not None
    who = f"SASL {mechanism} authentication of user {security.username!r} at {where} failed"
    response = send(ApiKey.SASL_HANDSHAKE, {"mechanism": mechanism})
    error = _refused(response, f"{who}: the broker offers {response.get('mechanisms')}")
    if error is not None:
        raise error

    def step(token: bytes) -> dict[str, Any]:
        answer = send(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token})
        failed = _refused(answer, who)
        if failed is not None:
            raise failed
        return answer

    if mechanism == "PLAIN":
        final = step(f"\0{security.username}\0{security.password}".encode())
    else:
        client = ScramClient(mechanism, security.username, security.password)
        first = step(client.first().encode())
        try:
            final = step(client.final(bytes(first["auth_bytes"]).decode()).encode())
            client.verify(bytes(final["auth_bytes"]).decode())
        except (ScramError, ValueError) as e:  # a malformed challenge, or the broker did not prove the credential
            raise AuthenticationError(ErrorCode.SASL_AUTHENTICATION_FAILED, f"{who}: {e}") from None
    return int(final.get("session_lifetime_ms") or 0)
