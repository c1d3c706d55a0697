"""The broker's own ZooKeeper connection secured as a Kafka 2.x/3.x broker's is: SASL DIGEST-MD5 from the JAAS
``Client`` section that ``KAFKA_OPTS`` names, TLS from ``zookeeper.ssl.*``, and ``zookeeper.set.acl`` giving
every znode the broker makes Kafka's ACLs (its creator writes; everyone reads, except SCRAM credentials).
Real ZooKeeper servers with SASL and x509 authentication, real brokers, confluent-kafka clients."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from tests.integration.security._pki import make_pki

from rill.testing.cluster import TestCluster

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

SERVER_JAAS = """Server {
  org.apache.zookeeper.server.auth.DigestLoginModule required
  user_rill="rill-secret"
  user_mallory="mallory-secret";
};
"""
SASL_SERVER = {"authProvider.sasl": "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"}


def _client_jaas(path: Path, user: str, password: str) -> Path:
    path.write_text(
        "// the broker's identity towards ZooKeeper\n"
        f'Client {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  username="{user}"\n'
        f'  password="{password}";\n}};\n'
    )
    return path


def _kazoo(hosts: str, user: str | None = None, password: str | None = None) -> KazooClient:
    sasl = None if user is None else {"mechanism": "DIGEST-MD5", "username": user, "password": password}
    client = KazooClient(hosts=hosts, timeout=5.0, sasl_options=sasl)
    client.start(15)
    return client


def _produce_and_read(c: TestCluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    for f in admin.create_topics([NewTopic(topic, 1, c.size)], operation_timeout=30).values():
        f.result(60)
    p = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all"})
    p.produce(topic, b"secured")
    assert p.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "g", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        msg = None
        for _ in range(100):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                break
        assert msg is not None and msg.value() == b"secured"
    finally:
        consumer.close()


def _add_scram_user(c: TestCluster, user: str) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"alice-secret", b"salt-of-alice-0"
    )
    for f in admin.alter_user_scram_credentials([upsert]).values():
        f.result(30)


def _assert_locked(client: KazooClient, topic: str) -> None:
    """What someone who reaches ZooKeeper without the broker's identity can no longer do."""
    for path in (f"/rill/brokers/topics/{topic}", f"/rill/brokers/topics/{topic}/partitions/0/state",
                 "/rill/controller_epoch", "/rill/cluster/id"):  # fmt: skip
        with pytest.raises(NoAuthError):
            client.set(path, b"{}")
    with pytest.raises(NoAuthError):
        client.delete("/rill/controller")
    with pytest.raises(NoAuthError):
        client.create(f"/rill/brokers/topics/{topic}/partitions/9", b"{}")
    with pytest.raises(NoAuthError):  # SCRAM credentials are not even readable
        client.get("/rill/config/users/alice")
    assert client.get(f"/rill/brokers/topics/{topic}")[0]  # the rest stays readable, as in Kafka


@pytest.fixture
def sasl_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestCluster]:
    server_jaas = tmp_path / "zk-server-jaas.conf"
    server_jaas.write_text(SERVER_JAAS)
    client_jaas = _client_jaas(tmp_path / "client-jaas.conf", "rill", "rill-secret")
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={client_jaas}")
    c = TestCluster(2, {"zookeeper.set.acl": "true"},
                    zookeeper_options={"jvm_options": [f"-Djava.security.auth.login.config={server_jaas}"],
                                       "config": SASL_SERVER})  # fmt: skip
    try:
        c.start()
        yield c
    finally:
        c.close()


def test_sasl_and_set_acl_lock_the_znodes_to_the_broker(sasl_cluster: TestCluster) -> None:
    c = sasl_cluster
    _produce_and_read(c, "orders")
    _add_scram_user(c, "alice")
    hosts = c.zookeeper.connect_string
    for user, password in ((None, None), ("mallory", "mallory-secret")):
        client = _kazoo(hosts, user, password)
        try:
            _assert_locked(client, "orders")
        finally:
            client.stop()
            client.close()
    owner = _kazoo(hosts, "rill", "rill-secret")  # the broker's own identity may (the test can fail for a reason)
    try:
        assert owner.get("/rill/config/users/alice")[0]
        acl, _ = owner.get_acls("/rill/brokers/topics/orders")
        assert {(a.id.scheme, a.id.id, a.perms) for a in acl} == {("sasl", "rill", 31), ("world", "anyone", 1)}
    finally:
        owner.stop()
        owner.close()
    leader = c.leader("orders", 0)
    c.kill(leader)  # the controller (maybe the other broker) re-elects: it may write the znodes both made
    c.wait_for(lambda: c.leader("orders", 0) not in (-1, leader), 30, "a new leader")
    c.start(leader)  # a restart authenticates again and finds its znodes
    c.wait_for(lambda: len(c.isr("orders", 0)) == 2, 30, "the restarted broker back in the ISR")
    _produce_and_read(c, "orders-after-restart")


def _broker_start_error(tmp_path: Path, props: dict[str, str], env_opts: str, zk_hosts: str) -> str:
    """What ``rill broker`` prints when it cannot start (it must exit, not hang)."""
    lines = [f"{k}={v}" for k, v in {"node.id": "0", "listeners": "PLAINTEXT://127.0.0.1:0",
                                      "log.dirs": str(tmp_path / "data"), "zookeeper.connect": zk_hosts + "/rill",
                                      "zookeeper.connection.timeout.ms": "8000", **props}.items()]  # fmt: skip
    (tmp_path / "server.properties").write_text("\n".join(lines) + "\n")
    proc = subprocess.run([sys.executable, "-m", "rill", "broker", "--config", str(tmp_path / "server.properties")],
                          env={**os.environ, "KAFKA_OPTS": env_opts}, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode != 0
    return proc.stderr


def test_set_acl_without_authentication_refuses_to_start(tmp_path: Path) -> None:
    err = _broker_start_error(tmp_path, {"zookeeper.set.acl": "true"}, "", "127.0.0.1:1")
    assert "zookeeper.set.acl is true, but the broker does not authenticate to ZooKeeper" in err


def test_a_jaas_file_without_a_digest_client_section_is_named(tmp_path: Path) -> None:
    jaas = tmp_path / "jaas.conf"
    jaas.write_text('KafkaServer { org.apache.kafka.common.security.plain.PlainLoginModule required username="a" '
                    'password="b"; };\n')  # fmt: skip
    err = _broker_start_error(tmp_path, {}, f"-Djava.security.auth.login.config={jaas}", "127.0.0.1:1")
    assert "has no Client section" in err
    jaas.write_text("Client { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true; };\n")
    err = _broker_start_error(tmp_path, {}, f"-Djava.security.auth.login.config={jaas}", "127.0.0.1:1")
    assert "SASL DIGEST-MD5" in err and "Krb5LoginModule" in err


def test_tls_with_a_client_certificate_and_set_acl(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    client_store = tmp_path / "broker-zk-client.pem"
    client_store.write_text(pki.client_cert.read_text() + pki.client_key.read_text())
    zk_tls = {
        "ssl.keyStore.location": str(pki.server), "ssl.keyStore.type": "PEM",
        "ssl.trustStore.location": str(pki.ca), "ssl.trustStore.type": "PEM",
        "ssl.clientAuth": "need", "ssl.hostnameVerification": "false",
        "authProvider.x509": "org.apache.zookeeper.server.auth.X509AuthenticationProvider",
    }  # fmt: skip
    props = {
        "zookeeper.set.acl": "true", "zookeeper.ssl.client.enable": "true",
        "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty",
        "zookeeper.ssl.keystore.location": str(client_store), "zookeeper.ssl.keystore.type": "PEM",
        "zookeeper.ssl.truststore.location": str(pki.ca), "zookeeper.ssl.truststore.type": "PEM",
        "offsets.topic.replication.factor": "1",
    }  # fmt: skip
    c = TestCluster(1, props, zookeeper_options={"config": zk_tls, "secure_client_port": True})
    try:
        c.start()
        _produce_and_read(c, "tls-orders")
        plain = _kazoo(c.zookeeper.connect_string)  # the plain port, without the certificate
        try:
            with pytest.raises(NoAuthError):
                plain.set("/rill/brokers/topics/tls-orders", b"{}")
            acl, _ = plain.get_acls("/rill/brokers/topics/tls-orders")
            assert ("x509", "CN=alice,OU=eng,O=acme") in {(a.id.scheme, a.id.id) for a in acl}
        finally:
            plain.stop()
            plain.close()
    finally:
        c.close()


def test_a_broker_without_the_server_s_trust_cannot_reach_zookeeper_over_tls(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    zk_tls = {"ssl.keyStore.location": str(pki.server), "ssl.keyStore.type": "PEM",
              "ssl.trustStore.location": str(pki.ca), "ssl.trustStore.type": "PEM"}  # fmt: skip
    from rill.testing.zookeeper import ZooKeeperEnsemble

    with ZooKeeperEnsemble(1, config=zk_tls, secure_client_port=True) as zk:
        err = _broker_start_error(
            tmp_path,
            {"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.truststore.location": str(pki.other_ca),
             "zookeeper.connection.timeout.ms": "4000"},
            "",
            zk.secure_connect_string,
        )  # fmt: skip
    assert "cannot reach ZooKeeper" in err or "CERTIFICATE_VERIFY_FAILED" in err


def test_a_refused_zookeeper_login_is_named(tmp_path: Path) -> None:
    from rill.testing.zookeeper import ZooKeeperEnsemble

    server_jaas = tmp_path / "zk-server-jaas.conf"
    server_jaas.write_text(SERVER_JAAS)
    client_jaas = _client_jaas(tmp_path / "client-jaas.conf", "rill", "not-the-password")
    with ZooKeeperEnsemble(1, jvm_options=[f"-Djava.security.auth.login.config={server_jaas}"],
                           config=SASL_SERVER) as zk:  # fmt: skip
        err = _broker_start_error(tmp_path, {}, f"-Djava.security.auth.login.config={client_jaas}", zk.connect_string)
    assert "refused the broker's SASL authentication as 'rill'" in err
