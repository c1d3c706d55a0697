"""A replicated cluster with SASL client listeners: SCRAM credentials written through one broker (in ZooKeeper's
``/config/users/<user>``, Kafka's format) authenticate on another at once; replication runs on the inter-broker
listener, PLAINTEXT beside the SASL one, or SASL_PLAINTEXT itself (the brokers authenticate to each other)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.integration.security._clients import add_scram_user, librdkafka_conf, round_trip
from tests.integration.security._pki import make_pki

from rill.testing.cluster import TestCluster, cluster

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="broker-secret" '
    'user_broker="broker-secret" user_alice="alice-secret";'
)
LISTENERS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
}


def _endpoint(c: TestCluster, broker: int, listener: str) -> str:
    data = c._zk_get(f"/brokers/ids/{broker}")
    assert data is not None
    registration = json.loads(data)
    assert registration["listener_security_protocol_map"][listener] == listener
    (address,) = [e.split("://", 1)[1] for e in registration["endpoints"] if e.startswith(f"{listener}://")]
    return str(address)


def _replicated_round_trip(c: TestCluster, conf: dict[str, object], topic: str) -> None:
    got = round_trip({**conf, "acks": "all"}, topic, n=20)
    assert len(got) == 20
    c.wait_for(lambda: sorted(c.isr(topic, 0)) == [0, 1], what=f"{topic}-0 fully in sync")


def test_scram_across_brokers_with_plaintext_inter_broker() -> None:
    with cluster(brokers=2, overrides={**LISTENERS, "num.partitions": 1, "min.insync.replicas": 2}) as c:
        add_scram_user(c.broker(0).bootstrap_servers, "alice", "scram-secret")
        stored = c._zk_get("/config/users/alice")
        assert stored is not None
        config = json.loads(stored)["config"]
        assert config["SCRAM-SHA-256"].startswith("salt=") and "iterations=4096" in config["SCRAM-SHA-256"]
        address = _endpoint(c, 1, "SASL_PLAINTEXT")
        conf = librdkafka_conf(address, "SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "scram-secret")
        _replicated_round_trip(c, conf, "scram-cluster")


def test_sasl_plaintext_inter_broker() -> None:
    overrides = {
        **LISTENERS,
        "num.partitions": 1,
        "min.insync.replicas": 2,  # acks=all then proves the follower fetched over SASL
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
    }
    with cluster(brokers=2, overrides=overrides) as c:
        data = c._zk_get("/brokers/ids/0")
        assert data is not None and json.loads(data)["port"] == int(_endpoint(c, 0, "SASL_PLAINTEXT").rsplit(":")[1])
        conf = librdkafka_conf(_endpoint(c, 0, "SASL_PLAINTEXT"), "SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret")
        _replicated_round_trip(c, conf, "sasl-replication")


def test_ssl_inter_broker_with_client_certificates(tmp_path: Path) -> None:
    """Replication over an SSL listener that requires client certificates: each broker checks the other's
    certificate (and host name) against its trust store and presents its own key store."""
    pki = make_pki(tmp_path)
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "inter.broker.listener.name": "SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "ssl.client.auth": "required",
        "num.partitions": 1,
        "min.insync.replicas": 2,
    }
    with cluster(brokers=2, overrides=overrides) as c:
        conf = {"bootstrap.servers": c.bootstrap_servers}  # clients on PLAINTEXT, replication on SSL
        _replicated_round_trip(c, conf, "ssl-replication")


def test_scram_over_sasl_ssl_inter_broker(tmp_path: Path) -> None:
    """The brokers authenticate to each other with SCRAM over TLS, as a user whose credential is in ZooKeeper
    (written once the cluster is up, through the PLAINTEXT listener)."""
    pki = make_pki(tmp_path)
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": (
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
            'password="broker-secret";'
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "num.partitions": 1,
        "min.insync.replicas": 2,
    }
    with cluster(brokers=2, overrides=overrides) as c:
        add_scram_user(c.broker(0).bootstrap_servers, "broker", "broker-secret")
        _replicated_round_trip(c, {"bootstrap.servers": c.bootstrap_servers}, "scram-replication")
