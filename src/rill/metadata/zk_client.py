"""The broker's ZooKeeper client and its security, as a Kafka 2.x/3.x broker configures them.

Authentication to ZooKeeper:

- SASL DIGEST-MD5: the ``Client`` section (``zookeeper.sasl.clientconfig``) of the JAAS file that the JVM
  system property ``java.security.auth.login.config`` names. Kafka's scripts pass system properties in
  ``KAFKA_OPTS``; Rill reads the same ``-Dkey=value`` words from that environment variable, so an existing
  ``KAFKA_OPTS="-Djava.security.auth.login.config=/etc/kafka/jaas.conf"`` works unchanged. The section holds
  ``org.apache.zookeeper.server.auth.DigestLoginModule required username="..." password="...";``.
  ``-Dzookeeper.sasl.client=false`` turns SASL off. Kerberos (``Krb5LoginModule``) is refused at start.
- TLS: ``zookeeper.ssl.client.enable=true`` with ``zookeeper.ssl.keystore.*`` (a client certificate, which a
  server with ZooKeeper's x509 authentication provider takes as the client's identity),
  ``zookeeper.ssl.truststore.*``, ``zookeeper.ssl.protocol`` / ``zookeeper.ssl.enabled.protocols``,
  ``zookeeper.ssl.cipher.suites`` and ``zookeeper.ssl.endpoint.identification.algorithm`` (HTTPS: the server's
  certificate must name the host of ``zookeeper.connect``). Stores are PEM files, as for the listeners.
  ``zookeeper.clientCnxnSocket`` is accepted and not needed (the client speaks TLS itself).

Znode ACLs (``zookeeper.set.acl=true``), Kafka's ``ZkData.defaultAcls``: every znode the broker creates is
writable by its creator only (ZooKeeper's ``auth`` scheme: the identity the broker authenticated with) and
readable by everyone, except below ``/config/users`` and ``/config/brokers`` (SCRAM credentials, broker
passwords), which only the creator may read. As in Kafka, this needs an authenticated client: a broker with
``zookeeper.set.acl=true`` and neither SASL nor a TLS client certificate refuses to start. Znodes made before
the setting was turned on keep their ACLs (Kafka's ``zookeeper-security-migration`` tool has no equivalent yet).
"""

from __future__ import annotations

import os
import shlex
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.security import ACL, CREATOR_ALL_ACL, READ_ACL_UNSAFE

from rill.config import ConfigError
from rill.security import ssl_factory
from rill.security.jaas import jaas_file_section

DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
SENSITIVE_ROOTS = ("/config/users", "/config/brokers")  # Kafka's sensitive root paths (ZkData.SensitiveRootPaths)
_SECURE_ACL: list[ACL] = [*CREATOR_ALL_ACL, *READ_ACL_UNSAFE]
_SENSITIVE_ACL: list[ACL] = list(CREATOR_ALL_ACL)


def znode_acl(path: str) -> list[ACL]:
    """The ACL a broker with ``zookeeper.set.acl=true`` gives a new znode (``path`` below the chroot)."""
    sensitive = any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOTS)
    return _SENSITIVE_ACL if sensitive else _SECURE_ACL


@dataclass(frozen=True)
class ZkClientSecurity:
    """How the broker authenticates to ZooKeeper and which ACLs its znodes get."""

    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_context: ssl.SSLContext | None = None
    set_acl: bool = False
    client_certificate: bool = False  # the TLS context presents a certificate (an identity for x509 auth)

    @classmethod
    def from_config(cls, get: Callable[[str], Any], environ: Mapping[str, str] | None = None) -> ZkClientSecurity:
        """From the broker's configs and the system properties in ``KAFKA_OPTS``; ConfigError says what is
        wrong (an unreadable JAAS file or key store, ``zookeeper.set.acl`` without authentication)."""
        props = jvm_system_properties((environ if environ is not None else os.environ).get("KAFKA_OPTS", ""))
        username = password = None
        jaas_path = props.get("java.security.auth.login.config")
        if jaas_path and props.get("zookeeper.sasl.client", "true").lower() != "false":
            username, password = _digest_credentials(jaas_path, props.get("zookeeper.sasl.clientconfig", "Client"))
        context, has_cert = None, False
        if get("zookeeper.ssl.client.enable"):
            context, has_cert = _tls_context(get)
        security = cls(username, password, context, bool(get("zookeeper.set.acl")), has_cert)
        if security.set_acl and username is None and not has_cert:
            raise ConfigError(
                "zookeeper.set.acl is true, but the broker does not authenticate to ZooKeeper: give it a JAAS "
                "Client section (KAFKA_OPTS=-Djava.security.auth.login.config=FILE) or a TLS client certificate "
                "(zookeeper.ssl.client.enable, zookeeper.ssl.keystore.location)"
            )
        return security


def jvm_system_properties(text: str) -> dict[str, str]:
    """The ``-Dkey=value`` words of a JVM command line (``KAFKA_OPTS``)."""
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise ConfigError(f"KAFKA_OPTS cannot be read as JVM options: {e}") from None
    out: dict[str, str] = {}
    for word in words:
        if word.startswith("-D") and len(word) > 2:
            key, _, value = word[2:].partition("=")
            out[key] = value
    return out


def _digest_credentials(path: str, section: str) -> tuple[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read the JAAS file {path} (java.security.auth.login.config): {e}") from None
    try:
        modules = jaas_file_section(text, section)
    except ValueError as e:
        raise ConfigError(f"the JAAS file {path}: {e}") from None
    if modules is None:
        raise ConfigError(
            f"the JAAS file {path} has no {section} section, which the ZooKeeper client logs in with "
            "(set -Dzookeeper.sasl.client=false to connect without SASL)"
        )
    for module in modules:
        if module.class_name == DIGEST_LOGIN_MODULE:
            username, password = module.options.get("username"), module.options.get("password")
            if not username or password is None:
                raise ConfigError(f"the JAAS file {path}: {section}'s DigestLoginModule needs username and password")
            return username, password
    names = ", ".join(m.class_name for m in modules)
    raise ConfigError(
        f"the JAAS file {path}: Rill authenticates to ZooKeeper with SASL DIGEST-MD5 ({DIGEST_LOGIN_MODULE}); "
        f"its {section} section names {names}"
    )


_TLS_NAMES = {  # ssl_factory's config name -> the ZooKeeper client's
    "ssl.keystore.location": "zookeeper.ssl.keystore.location",
    "ssl.keystore.password": "zookeeper.ssl.keystore.password",
    "ssl.keystore.type": "zookeeper.ssl.keystore.type",
    "ssl.truststore.location": "zookeeper.ssl.truststore.location",
    "ssl.truststore.password": "zookeeper.ssl.truststore.password",
    "ssl.truststore.type": "zookeeper.ssl.truststore.type",
    "ssl.cipher.suites": "zookeeper.ssl.cipher.suites",
    "ssl.endpoint.identification.algorithm": "zookeeper.ssl.endpoint.identification.algorithm",
}


def _tls_context(get: Callable[[str], Any]) -> tuple[ssl.SSLContext, bool]:
    for name in ("zookeeper.ssl.crl.enable", "zookeeper.ssl.ocsp.enable"):
        if get(name):
            raise ConfigError(f"{name}=true: Rill does not check certificate revocation on its ZooKeeper connection")

    def zk_get(name: str) -> Any:
        if name == "ssl.enabled.protocols":
            return get("zookeeper.ssl.enabled.protocols") or [get("zookeeper.ssl.protocol")]
        mapped = _TLS_NAMES.get(name)
        return get(mapped) if mapped else None

    try:
        context = ssl_factory.client_context(zk_get)
    except ConfigError as e:
        raise ConfigError(f"TLS to ZooKeeper (zookeeper.ssl.*): {e}") from None
    return context, bool(get("zookeeper.ssl.keystore.location"))


class _TlsHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler whose connections are made with the broker's own ``SSLContext``."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__()
        self._context = context

    def create_connection(self, address: tuple[str, int], hostname: str | None = None,
                          timeout: float | None = None, **_: Any) -> ssl.SSLSocket:  # fmt: skip
        raw = socket.create_connection(address, timeout)
        try:
            conn = self._context.wrap_socket(raw, server_hostname=hostname or address[0])
        except BaseException:
            raw.close()
            raise
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn


class _AclTransaction(TransactionRequest):  # type: ignore[misc]
    def create(self, path: str, value: bytes = b"", acl: list[ACL] | None = None,
               ephemeral: bool = False, sequence: bool = False) -> None:  # fmt: skip
        super().create(path, value, acl if acl is not None else znode_acl(path), ephemeral, sequence)


class _AclKazooClient(KazooClient):  # type: ignore[misc]
    """Gives every znode it creates Kafka's secure ACL for its path, unless the caller names one."""

    def create_async(self, path: str, value: bytes = b"", acl: list[ACL] | None = None,
                     *args: Any, **kwargs: Any) -> Any:  # fmt: skip
        return super().create_async(path, value, acl if acl is not None else znode_acl(path), *args, **kwargs)

    def transaction(self) -> _AclTransaction:
        return _AclTransaction(self)


def make_zk_client(hosts: str, timeout_s: float, security: ZkClientSecurity | None = None) -> KazooClient:
    """A kazoo client for ``hosts`` (``host:port,...[/chroot]``) authenticating and setting ACLs as
    ``security`` says (none: plaintext, open ACLs)."""
    if security is None:
        return KazooClient(hosts=hosts, timeout=timeout_s)
    kwargs: dict[str, Any] = {}
    if security.sasl_username is not None:
        kwargs["sasl_options"] = {
            "mechanism": "DIGEST-MD5",
            "username": security.sasl_username,
            "password": security.sasl_password,
        }
    if security.ssl_context is not None:
        kwargs["handler"] = _TlsHandler(security.ssl_context)
    cls = _AclKazooClient if security.set_acl else KazooClient
    client: KazooClient = cls(hosts=hosts, timeout=timeout_s, **kwargs)
    return client
