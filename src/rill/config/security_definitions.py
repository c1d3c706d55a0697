"""Kafka's security broker configs: listeners' TLS (``ssl.*``) and SASL (``sasl.*``), the inter-broker
channel's security, and authentication limits. Defined into ``BROKER_CONFIGS`` beside the others.

Every one of these may also be set for one listener as ``listener.name.<listener>.<config>`` (the listener
name in lower case), which wins over the unprefixed value on that listener; a JAAS config may also be set
per mechanism as ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (``rill.security.listener_configs``).
Key store and trust store files are PEM (``ssl.keystore.type=PEM``; a JKS or PKCS12 file is refused at start).
"""

from __future__ import annotations

from rill.config.config_def import ConfigType, Importance, at_least, one_of
from rill.config.definitions import BROKER_CONFIGS

B = ConfigType.BOOLEAN
S, INT, LONG, LST, P = ConfigType.STRING, ConfigType.INT, ConfigType.LONG, ConfigType.LIST, ConfigType.PASSWORD
HIGH, MEDIUM, LOW = Importance.HIGH, Importance.MEDIUM, Importance.LOW
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
STORE_TYPES = ("JKS", "PKCS12", "PEM")
AUTHORIZER_CLASSES = (
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
)


def _super_users(value: str) -> str | None:
    for item in (value or "").split(";"):
        kind, sep, name = item.strip().partition(":")
        if item.strip() and (not sep or not kind or not name):
            return f"{item.strip()!r} is not a principal (Type:name)"
    return None


def _jaas(value: str) -> str | None:
    from rill.security.jaas import jaas_problem

    return jaas_problem(value)


def _mapping_rules(value: str) -> str | None:
    from rill.security.ssl_principal_mapper import rules_problem

    return rules_problem(value)


SECURITY_CONFIGS: list[tuple[str, ConfigType, object, str, object, Importance]] = [
    ("security.inter.broker.protocol", S, "PLAINTEXT", "Security protocol between brokers (when "
     "inter.broker.listener.name is not set).", one_of(*SECURITY_PROTOCOLS), MEDIUM),
    ("sasl.enabled.mechanisms", LST, "GSSAPI", "SASL mechanisms a SASL listener offers (Rill serves PLAIN, "
     "SCRAM-SHA-256 and SCRAM-SHA-512).", None, MEDIUM),
    ("sasl.mechanism.inter.broker.protocol", S, "GSSAPI", "SASL mechanism brokers use between themselves.",
     None, MEDIUM),
    ("sasl.jaas.config", P, None, "JAAS login module text (PLAIN users as user_NAME=\"password\"; the "
     "broker's own username and password towards other brokers).", _jaas, MEDIUM),
    ("sasl.server.max.receive.size", INT, 524288, "Largest frame accepted before authentication.",
     at_least(1), LOW),
    ("connections.max.reauth.ms", LONG, 0, "Longest SASL session before the client must authenticate "
     "again on its connection (0: sessions never expire).", at_least(0), MEDIUM),
    ("connection.failed.authentication.delay.ms", INT, 100, "Wait before answering (and closing) a failed "
     "authentication.", at_least(0), LOW),
    ("ssl.protocol", S, "TLSv1.3", "TLS protocol of the SSL context.", None, MEDIUM),
    ("ssl.enabled.protocols", LST, "TLSv1.2,TLSv1.3", "TLS versions accepted.",
     lambda v: None if v and all(x in ("TLSv1.2", "TLSv1.3", "TLSv1.1", "TLSv1") for x in v)
     else "must list TLS versions (TLSv1.2, TLSv1.3)", MEDIUM),
    ("ssl.cipher.suites", LST, "", "TLS 1.2 cipher suites allowed (OpenSSL or IANA names; empty: the "
     "defaults).", None, LOW),
    ("ssl.client.auth", S, "none", "Whether clients must present a certificate: required, requested, none.",
     one_of("required", "requested", "none"), MEDIUM),
    ("ssl.keystore.type", S, "JKS", "Key store format (Rill reads PEM).", one_of(*STORE_TYPES), MEDIUM),
    ("ssl.keystore.location", S, None, "Key store file: PEM with the certificate chain and the private key.",
     None, HIGH),
    ("ssl.keystore.password", P, None, "Password of the key store file.", None, HIGH),
    ("ssl.key.password", P, None, "Password of the private key (an encrypted PEM key).", None, HIGH),
    ("ssl.keystore.certificate.chain", P, None, "The certificate chain in PEM, given in the config.", None, HIGH),
    ("ssl.keystore.key", P, None, "The private key in PEM, given in the config.", None, HIGH),
    ("ssl.truststore.type", S, "JKS", "Trust store format (Rill reads PEM).", one_of(*STORE_TYPES), MEDIUM),
    ("ssl.truststore.location", S, None, "Trust store file: PEM CA certificates.", None, HIGH),
    ("ssl.truststore.password", P, None, "Password of the trust store file.", None, HIGH),
    ("ssl.truststore.certificates", P, None, "Trusted CA certificates in PEM, given in the config.", None, HIGH),
    ("ssl.endpoint.identification.algorithm", S, "https", "Host name check of the server certificate when "
     "this broker connects to another (empty: none).", None, LOW),
    ("ssl.principal.mapping.rules", S, "DEFAULT", "Principal name of a client certificate: rules "
     "RULE:pattern/replacement/[LU] over its subject DN, DEFAULT the DN itself.", _mapping_rules, LOW),
    ("authorizer.class.name", S, "", "The authorizer: kafka.security.authorizer.AclAuthorizer or "
     "org.apache.kafka.metadata.authorizer.StandardAuthorizer (both Rill's ACL authorizer); empty: none.",
     one_of("", *AUTHORIZER_CLASSES), LOW),
    ("super.users", S, "", "Principals allowed everything, separated by semicolons (User:admin;User:bob).",
     _super_users, LOW),
    ("allow.everyone.if.no.acl.found", B, False, "Whether a resource no ACL matches is open to everyone.",
     None, LOW),
]  # fmt: skip

# The broker's own connection to ZooKeeper (rill.metadata.zk_client): TLS and the ACLs of the znodes it makes.
# SASL to ZooKeeper comes from the JAAS file of the JVM system properties in KAFKA_OPTS, as for Kafka.
ZOOKEEPER_SECURITY_CONFIGS: list[tuple[str, ConfigType, object, str, object, Importance]] = [
    ("zookeeper.set.acl", B, False, "Make the znodes the broker creates writable by its own ZooKeeper identity "
     "only (and SCRAM credentials readable by it only); needs SASL or a TLS client certificate.", None, HIGH),
    ("zookeeper.ssl.client.enable", B, False, "Connect to ZooKeeper over TLS.", None, HIGH),
    ("zookeeper.clientCnxnSocket", S, None, "The ZooKeeper client's socket class (accepted; Rill's client "
     "speaks TLS itself).", None, MEDIUM),
    ("zookeeper.ssl.keystore.location", S, None, "PEM file with the client certificate chain and key towards "
     "ZooKeeper.", None, MEDIUM),
    ("zookeeper.ssl.keystore.password", P, None, "Password of the ZooKeeper client key.", None, MEDIUM),
    ("zookeeper.ssl.keystore.type", S, None, "Key store format towards ZooKeeper (Rill reads PEM).",
     one_of("", *STORE_TYPES), MEDIUM),
    ("zookeeper.ssl.truststore.location", S, None, "PEM CA certificates trusted for ZooKeeper.", None, MEDIUM),
    ("zookeeper.ssl.truststore.password", P, None, "Password of the ZooKeeper trust store.", None, MEDIUM),
    ("zookeeper.ssl.truststore.type", S, None, "Trust store format towards ZooKeeper (Rill reads PEM).",
     one_of("", *STORE_TYPES), MEDIUM),
    ("zookeeper.ssl.protocol", S, "TLSv1.2", "TLS version towards ZooKeeper when "
     "zookeeper.ssl.enabled.protocols is not set.", one_of("TLSv1.2", "TLSv1.3", "TLSv1.1", "TLSv1"), LOW),
    ("zookeeper.ssl.enabled.protocols", LST, None, "TLS versions accepted towards ZooKeeper.", None, LOW),
    ("zookeeper.ssl.cipher.suites", LST, None, "TLS 1.2 cipher suites towards ZooKeeper.", None, LOW),
    ("zookeeper.ssl.endpoint.identification.algorithm", S, "HTTPS", "Host name check of ZooKeeper's "
     "certificate (empty: none).", None, LOW),
    ("zookeeper.ssl.crl.enable", B, False, "Certificate revocation lists (not supported: true is refused).",
     None, LOW),
    ("zookeeper.ssl.ocsp.enable", B, False, "OCSP (not supported: true is refused).", None, LOW),
]  # fmt: skip

for _name, _kind, _default, _doc, _validator, _imp in SECURITY_CONFIGS + ZOOKEEPER_SECURITY_CONFIGS:
    BROKER_CONFIGS.define(_name, _kind, _default, _doc, _validator, _imp)  # type: ignore[arg-type]
