"""The SCRAM exchange (RFC 5802), both sides: its four messages and the proofs in them (Kafka's
``ScramMessages`` and ``ScramFormatter``), with ``hashlib`` and ``hmac``.

    client-first   n,[a=<authzid>],n=<user>,r=<client nonce>[,<extensions>]
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=<base64 gs2 header>,r=<nonce>,p=<base64 proof>
    server-final   v=<base64 server signature>            (or e=<error>)

    SaltedPassword  = PBKDF2-HMAC(password, salt, iterations)      (Hi)
    ClientKey       = HMAC(SaltedPassword, "Client Key");  StoredKey = H(ClientKey)
    ServerKey       = HMAC(SaltedPassword, "Server Key")
    AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
    ClientProof     = ClientKey XOR HMAC(StoredKey, AuthMessage)
    ServerSignature = HMAC(ServerKey, AuthMessage)

Written here rather than taken from ``scramp``, the SCRAM library: scramp refuses, on both sides, a salt shorter
than 12 bytes, while Kafka takes any non-empty salt (AlterUserScramCredentials and Kafka's tools set what the
client gives), so a user whose salt is short could never log in. As in Kafka, the password is used as its UTF-8
bytes (no SASLprep, as librdkafka, kafka-python and the Java client do), user names carry ``=2C`` and ``=3D`` for
``,`` and ``=``, only the gs2 flags ``n`` and ``y`` are taken (no channel binding), and unknown extensions are
ignored. A malformed or refused message raises ``ScramError``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass

HASH_NAMES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096
"""Kafka's minimum for SCRAM-SHA-256 and SCRAM-SHA-512 (``ScramMechanism.minIterations``)."""
CLIENT_MAX_ITERATIONS = 10_000_000
"""The most a client works for a server's challenge (a server cannot keep it hashing for minutes)."""


class ScramError(Exception):
    """A SCRAM message that does not parse, or a proof that does not hold."""


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(HASH_NAMES[mechanism], password.encode("utf-8"), salt, iterations)


def _hmac(mechanism: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, HASH_NAMES[mechanism]).digest()


def client_key(mechanism: str, salted: bytes) -> bytes:
    return _hmac(mechanism, salted, b"Client Key")


def server_key(mechanism: str, salted: bytes) -> bytes:
    return _hmac(mechanism, salted, b"Server Key")


def stored_key(mechanism: str, key: bytes) -> bytes:
    return hashlib.new(HASH_NAMES[mechanism], key).digest()


def signature(mechanism: str, key: bytes, auth_message: str) -> bytes:
    return _hmac(mechanism, key, auth_message.encode("utf-8"))


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ScramError(f"{what} is not base64") from None


def escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_name(text: str) -> str:
    """A saslname's user name; ScramError for an empty one or a ``=`` other than ``=2C``/``=3D``."""
    if not text or text.replace("=2C", "").replace("=3D", "").count("="):
        raise ScramError("invalid user name")
    return text.replace("=2C", ",").replace("=3D", "=")


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    """``a=value`` items separated by commas (a value may hold ``=``, never ``,``; Kafka's extensions have longer
    names)."""
    items = []
    for part in text.split(","):
        name, eq, value = part.partition("=")
        if not eq or not name.isascii() or not name.isalpha():
            raise ScramError(f"malformed {what}")
        items.append((name, value))
    return items


def new_nonce() -> str:
    return secrets.token_urlsafe(24)  # printable, no comma


@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str  # "n,," or "n,a=<authzid>,"
    authzid: str
    user: str
    nonce: str
    bare: str  # the message after the gs2 header, as the AuthMessage takes it


def parse_client_first(text: str) -> ClientFirst:
    flag, sep1, rest = text.partition(",")
    authz, sep2, bare = rest.partition(",")
    if not (sep1 and sep2) or flag not in ("n", "y"):
        raise ScramError("malformed client-first message (only gs2 flags n and y: no channel binding)")
    authzid = ""
    if authz:
        if not authz.startswith("a="):
            raise ScramError("malformed client-first message")
        authzid = unescape_name(authz[2:])
    items = _attributes(bare, "client-first message")
    if len(items) < 2 or items[0][0] != "n" or items[1][0] != "r":
        raise ScramError("malformed client-first message (a reserved m= or a missing user or nonce)")
    nonce = items[1][1]
    if not nonce or not nonce.isprintable():
        raise ScramError("malformed client nonce")
    return ClientFirst(f"{flag},{authz},", authzid, unescape_name(items[0][1]), nonce, bare)


def server_first(nonce: str, salt: bytes, iterations: int) -> str:
    return f"r={nonce},s={b64(salt)},i={iterations}"


@dataclass(frozen=True, slots=True)
class ClientFinal:
    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str


def parse_client_final(text: str) -> ClientFinal:
    without_proof, sep, proof = text.rpartition(",p=")
    if not sep:
        raise ScramError("malformed client-final message: no proof")
    items = _attributes(without_proof, "client-final message")
    if len(items) < 2 or items[0][0] != "c" or items[1][0] != "r":
        raise ScramError("malformed client-final message")
    return ClientFinal(_unb64(items[0][1], "channel binding"), items[1][1], _unb64(proof, "proof"), without_proof)


def verify_client_proof(mechanism: str, stored: bytes, auth_message: str, proof: bytes) -> bool:
    """Whether ``proof`` shows knowledge of the client key whose hash is ``stored``."""
    client_signature = signature(mechanism, stored, auth_message)
    if len(proof) != len(client_signature):
        return False
    return hmac.compare_digest(stored_key(mechanism, _xor(proof, client_signature)), stored)


class ScramClient:
    """The client side: ``first()``, then ``final(server_first)``, then ``verify(server_final)``."""

    def __init__(self, mechanism: str, user: str, password: str, *, nonce: str | None = None) -> None:
        if mechanism not in HASH_NAMES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._user = user
        self._password = password
        self._nonce = nonce or new_nonce()
        self._bare = ""
        self._expected = b""

    def first(self) -> str:
        self._bare = f"n={escape_name(self._user)},r={self._nonce}"
        return "n,," + self._bare

    def final(self, server_first_message: str) -> str:
        items = dict(_attributes(server_first_message, "server-first message"))
        if "e" in items:
            raise ScramError(f"the server refused: {items['e']}")
        nonce, salt_text, iterations_text = items.get("r", ""), items.get("s", ""), items.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) <= len(self._nonce):
            raise ScramError("the server's nonce does not extend the client's")
        salt = _unb64(salt_text, "salt")
        if not salt:
            raise ScramError("empty salt")
        if not iterations_text.isdigit():
            raise ScramError("malformed iteration count")
        iterations = int(iterations_text)
        if iterations < MIN_ITERATIONS:  # as Kafka's client: a server may not weaken the key
            raise ScramError(f"requested iterations {iterations} is less than the minimum {MIN_ITERATIONS}")
        if iterations > CLIENT_MAX_ITERATIONS:
            raise ScramError(f"requested iterations {iterations} is more than {CLIENT_MAX_ITERATIONS}")
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        without_proof = f"c={b64(b'n,,')},r={nonce}"
        auth_message = f"{self._bare},{server_first_message},{without_proof}"
        key = client_key(self.mechanism, salted)
        proof = _xor(key, signature(self.mechanism, stored_key(self.mechanism, key), auth_message))
        self._expected = signature(self.mechanism, server_key(self.mechanism, salted), auth_message)
        return f"{without_proof},p={b64(proof)}"

    def verify(self, server_final_message: str) -> None:
        """ScramError unless the server proved it knows the credential."""
        items = dict(_attributes(server_final_message, "server-final message"))
        if "e" in items:
            raise ScramError(f"the server refused: {items['e']}")
        if not self._expected or not hmac.compare_digest(_unb64(items.get("v", ""), "signature"), self._expected):
            raise ScramError("the server's signature does not match")
