"""Kafka's ``KafkaPrincipal`` and the principal a TLS client certificate gives.

Every connection has a principal: ``User:ANONYMOUS`` on PLAINTEXT (and on SSL without a client certificate),
the certificate's subject distinguished name on SSL with one (``User:CN=alice,OU=eng,O=acme``: the RFC 2253
form Kafka's DefaultKafkaPrincipalBuilder takes from ``X500Principal.getName()``, most specific name first),
and ``User:<name>`` once SASL has authenticated ``name``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``Type:name`` (as ACLs and ``super.users`` write it); ValueError when there is no type."""
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise ValueError(f"{text!r} is not a principal (Type:name)")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")

# The attribute keywords RFC 2253 names (the others are written as their OID, as Java does).
_KEYWORDS = {
    "commonName": "CN",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_OIDS = {"emailAddress": "1.2.840.113549.1.9.1", "serialNumber": "2.5.4.5", "title": "2.5.4.12",
         "givenName": "2.5.4.42", "surname": "2.5.4.4"}  # fmt: skip


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _attribute(key: str, value: str) -> str:
    keyword = _KEYWORDS.get(key)
    if keyword is not None:
        return f"{keyword}={_escape(value)}"
    oid = _OIDS.get(key, key)
    return f"{oid}=#{_der_string(value)}"


def _der_string(value: str) -> str:
    """A value written by OID: its DER encoding in hex (IA5String for an e-mail address, as Java writes it)."""
    data = value.encode()
    return (bytes([0x16, len(data)]) + data).hex() if len(data) < 128 else data.hex()


def subject_dn(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """The RFC 2253 string of a subject as ``ssl.SSLSocket.getpeercert()`` gives it (RDNs in certificate
    order, least specific first): the RDNs reversed, multi-valued ones joined by ``+``."""
    return ",".join("+".join(_attribute(k, v) for k, v in rdn) for rdn in reversed(list(subject)))


def principal_from_certificate(
    peercert: Mapping[str, Any] | None, name_of: Callable[[str], str] | None = None
) -> KafkaPrincipal:
    """``User:<name>`` of a verified client certificate: its subject DN, or what ``name_of`` makes of it
    (``ssl.principal.mapping.rules``; ValueError when no rule applies); ANONYMOUS when there is none."""
    if not peercert or not peercert.get("subject"):
        return ANONYMOUS
    dn = subject_dn(peercert["subject"])
    return KafkaPrincipal(USER_TYPE, name_of(dn) if name_of is not None else dn)
