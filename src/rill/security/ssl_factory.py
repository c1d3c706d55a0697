"""``ssl.SSLContext`` from Kafka's ``ssl.*`` configs, after Kafka's SslFactory, for PEM key and trust stores.

Key store: ``ssl.keystore.location`` (a PEM file holding the certificate chain and the private key, the key
encrypted with ``ssl.key.password`` or ``ssl.keystore.password`` when it is) or the PEM text itself in
``ssl.keystore.certificate.chain`` and ``ssl.keystore.key``. Trust store: ``ssl.truststore.location`` (PEM CA
certificates) or ``ssl.truststore.certificates``. ``ssl.client.auth``: required, requested (a certificate is
checked when given), none. ``ssl.enabled.protocols`` bounds the TLS versions; ``ssl.cipher.suites`` (OpenSSL
names) narrows the TLS 1.2 ciphers.

OpenSSL's default security level (2) refuses a certificate signed with SHA-1 (CA_MD_TOO_WEAK) or holding an RSA
key below 2048 bits (EE_KEY_TOO_SMALL), which Kafka's Java broker takes from a private CA. Rill does not lower
the level on its own: the start stops with a line naming the cause and the setting that allows it,
``ssl.cipher.suites`` with OpenSSL's ``@SECLEVEL`` (``DEFAULT:@SECLEVEL=0`` for SHA-1, ``DEFAULT:@SECLEVEL=1``
for 1024-bit keys), for the listener (``listener.name.<l>.ssl.cipher.suites``) or the broker.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable
from typing import Any

from rill.config import ConfigError

ConfigGetter = Callable[[str], Any]
_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
             "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}  # fmt: skip
_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}


def _secret(value: Any) -> str | None:
    if value is None:
        return None
    text = value.value if hasattr(value, "value") else value  # a Password value or a plain string
    return str(text) if text else None


def _pem_file(path: str, kind: str, store_type: str) -> str:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise ConfigError(f"cannot read the {kind} {path}: {e}") from None
    if b"-----BEGIN" not in head:
        raise ConfigError(
            f"the {kind} {path} is not PEM (ssl.{kind.replace(' ', '')}.type={store_type}); Rill reads PEM files: "
            "convert it (keytool/openssl) and set the type to PEM"
        )
    return path


_WEAK = {
    "CA_MD_TOO_WEAK": ("its certificate is signed with a digest (SHA-1, MD5) that OpenSSL's security level {level} "
                       "refuses; Kafka's Java broker takes a SHA-1 signature. Sign the certificate with SHA-256, or "
                       "allow it with ssl.cipher.suites=DEFAULT:@SECLEVEL=0 (OpenSSL's security level 0: SHA-1 "
                       "signatures and small keys are then taken)"),
    "EE_KEY_TOO_SMALL": ("its key is smaller than OpenSSL's security level {level} takes (2048 bits for RSA at level "
                         "2); Kafka's Java broker takes 1024 bits. Use a larger key, or allow it with "
                         "ssl.cipher.suites=DEFAULT:@SECLEVEL=1"),
    "CA_KEY_TOO_SMALL": ("the key of a CA in its chain is smaller than OpenSSL's security level {level} takes; "
                         "Kafka's Java broker takes 1024 bits. Use a larger key, or allow it with "
                         "ssl.cipher.suites=DEFAULT:@SECLEVEL=1"),
}  # fmt: skip


def _key_store_error(what: str, ctx: ssl.SSLContext, e: ssl.SSLError | OSError) -> ConfigError:
    """The ConfigError of a key store that does not load: for a certificate OpenSSL's security level refuses, the
    cause in words and the setting that allows it."""
    reason = getattr(e, "reason", None)
    hint = _WEAK.get(reason) if isinstance(reason, str) else None
    if hint is None:
        return ConfigError(f"cannot load {what}: {e}")
    return ConfigError(f"cannot load {what}: {hint.format(level=ctx.security_level)} ({reason})")


def _load_key_store(ctx: ssl.SSLContext, get: ConfigGetter) -> bool:
    location = get("ssl.keystore.location")
    password = _secret(get("ssl.key.password")) or _secret(get("ssl.keystore.password"))
    if location:
        path = _pem_file(str(location), "key store", str(get("ssl.keystore.type")))
        try:
            ctx.load_cert_chain(path, password=password)
        except (ssl.SSLError, OSError) as e:
            raise _key_store_error(f"the key store {path}", ctx, e) from None
        return True
    chain, key = _secret(get("ssl.keystore.certificate.chain")), _secret(get("ssl.keystore.key"))
    if chain and key:
        # load_cert_chain reads files only: the PEM text goes through private temporary files.
        with tempfile.TemporaryDirectory(prefix="rill-ssl-") as tmp:
            os.chmod(tmp, 0o700)
            cert_path, key_path = os.path.join(tmp, "chain.pem"), os.path.join(tmp, "key.pem")
            for path, text in ((cert_path, chain), (key_path, key)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(text)
            try:
                ctx.load_cert_chain(cert_path, key_path, password=password)
            except ssl.SSLError as e:
                raise _key_store_error("ssl.keystore.certificate.chain / ssl.keystore.key", ctx, e) from None
        return True
    if chain or key:
        raise ConfigError("ssl.keystore.certificate.chain and ssl.keystore.key are set together")
    return False


def _load_trust_store(ctx: ssl.SSLContext, get: ConfigGetter) -> bool:
    location = get("ssl.truststore.location")
    certificates = _secret(get("ssl.truststore.certificates"))
    try:
        if location:
            ctx.load_verify_locations(cafile=_pem_file(str(location), "trust store", str(get("ssl.truststore.type"))))
            return True
        if certificates:
            ctx.load_verify_locations(cadata=certificates)
            return True
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"cannot load the trust store: {e}") from None
    return False


def _common(ctx: ssl.SSLContext, get: ConfigGetter) -> None:
    enabled = [str(v) for v in get("ssl.enabled.protocols") or ()]
    versions = sorted(_VERSIONS[v] for v in enabled if v in _VERSIONS)
    if not versions:
        raise ConfigError(f"ssl.enabled.protocols {enabled} names no TLS version")
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    ciphers = [str(c) for c in get("ssl.cipher.suites") or () if str(c)]
    if ciphers:
        try:
            ctx.set_ciphers(":".join(ciphers))
        except ssl.SSLError as e:
            raise ConfigError(f"ssl.cipher.suites {ciphers}: {e}") from None


def server_context(get: ConfigGetter) -> ssl.SSLContext:
    """The context of a TLS listener; ConfigError names what is missing or unreadable."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _common(ctx, get)
    if not _load_key_store(ctx, get):
        raise ConfigError("a TLS listener needs a key store: ssl.keystore.location, or ssl.keystore.certificate.chain "
                          "and ssl.keystore.key")  # fmt: skip
    client_auth = str(get("ssl.client.auth") or "none")
    ctx.verify_mode = _CLIENT_AUTH[client_auth]
    if client_auth != "none" and not _load_trust_store(ctx, get):
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return ctx


def client_context(get: ConfigGetter) -> ssl.SSLContext:
    """The context this broker connects to another broker's TLS listener with (its key store, when it has
    one, as the client certificate)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _common(ctx, get)
    ctx.check_hostname = bool(get("ssl.endpoint.identification.algorithm"))
    if not _load_trust_store(ctx, get):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    _load_key_store(ctx, get)
    return ctx
