"""The pieces of the broker's ZooKeeper security that need no server: JAAS file sections, the JVM system
properties of KAFKA_OPTS, Kafka's znode ACLs by path, and the configs' refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from rill.config import BrokerConfig, ConfigError
from rill.metadata.zk_client import ZkClientSecurity, jvm_system_properties, znode_acl
from rill.security.jaas import jaas_file_section


def test_jaas_file_sections_with_comments_and_quoted_braces() -> None:
    text = """// the broker's logins
    KafkaServer { org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b"; };
    /* ZooKeeper */ Client {
        org.apache.zookeeper.server.auth.DigestLoginModule required
        username="rill" password="p}a//s";
    };"""
    (module,) = jaas_file_section(text, "Client") or []
    assert module.options == {"username": "rill", "password": "p}a//s"}
    assert jaas_file_section(text, "Server") is None
    with pytest.raises(ValueError):
        jaas_file_section("Client { x required a=1; ", "Client")


def test_jvm_system_properties() -> None:
    props = jvm_system_properties("-Xmx1g -Djava.security.auth.login.config='/etc/kafka/my jaas.conf' -Dflag")
    assert props == {"java.security.auth.login.config": "/etc/kafka/my jaas.conf", "flag": ""}


def test_znode_acls_follow_kafka_s_sensitive_paths() -> None:
    def kinds(path: str) -> set[tuple[str, str, int]]:
        return {(a.id.scheme, a.id.id, a.perms) for a in znode_acl(path)}

    assert kinds("/brokers/topics/t") == {("auth", "", 31), ("world", "anyone", 1)}
    assert kinds("/config/users/alice") == {("auth", "", 31)}
    assert kinds("/config/brokers") == {("auth", "", 31)}
    assert kinds("/config/usersx") == {("auth", "", 31), ("world", "anyone", 1)}


def _security(props: dict[str, str], kafka_opts: str = "") -> ZkClientSecurity:
    return ZkClientSecurity.from_config(BrokerConfig.from_properties(props).get, {"KAFKA_OPTS": kafka_opts})


def test_refusals(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not authenticate to ZooKeeper"):
        _security({"zookeeper.set.acl": "true"})
    with pytest.raises(ConfigError, match="cannot read the JAAS file"):
        _security({}, f"-Djava.security.auth.login.config={tmp_path / 'missing.conf'}")
    with pytest.raises(ConfigError, match="does not check certificate revocation"):
        _security({"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.crl.enable": "true"})
    not_pem = tmp_path / "store.jks"
    not_pem.write_bytes(b"\xfe\xed\xfe\xed")
    with pytest.raises(ConfigError, match=r"TLS to ZooKeeper \(zookeeper.ssl.\*\)"):
        _security({"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.truststore.location": str(not_pem)})
    jaas = tmp_path / "jaas.conf"
    module = 'org.apache.zookeeper.server.auth.DigestLoginModule required username="u" password="p";'
    jaas.write_text(f"Client {{ {module} }};")
    opts = f"-Djava.security.auth.login.config={jaas}"
    assert _security({"zookeeper.set.acl": "true"}, opts).sasl_username == "u"
    assert _security({}, opts + " -Dzookeeper.sasl.client=false").sasl_username is None
