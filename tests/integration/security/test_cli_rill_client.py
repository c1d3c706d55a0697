"""The CLI tools that speak the protocol with ``rill.client`` (transactions, client quotas, delete-offsets) work
through a SASL_SSL listener with a Java-style client.properties (``--command-config``), and report refused
credentials in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import confluent_kafka
import pytest
from tests.integration.security._clients import add_scram_user
from tests.integration.security.conftest import Pki

import rill.testing
from rill.client import KafkaClient
from rill.common import TopicPartition

pytestmark = pytest.mark.timeout(120)


def _rill(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rill", *args], capture_output=True, text=True, timeout=60)


def _properties(path: Path, pki: Pki, password: str) -> Path:
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="erin" password="{password}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={pki.ca}\n"
    )
    return path


def test_rill_client_tools_through_sasl_ssl(secure_broker: rill.testing.TestBroker, pki: Pki, tmp_path: Path) -> None:
    plain = secure_broker.bootstrap_servers
    add_scram_user(plain, "erin", "erin-secret", "SCRAM-SHA-512")
    props = _properties(tmp_path / "client.properties", pki, "erin-secret")
    secure = ["--bootstrap-server", secure_broker.listener_address("SASL_SSL"), "--command-config", str(props)]

    # a committed transaction, so the coordinator has one to list
    producer = confluent_kafka.Producer({"bootstrap.servers": plain, "transactional.id": "txn-secure"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("txn-topic", b"v")
    producer.commit_transaction(30)
    listed = _rill("transactions", "list", *secure)
    assert listed.returncode == 0, listed.stderr
    assert "txn-secure" in listed.stdout
    described = _rill("transactions", "describe", "--transactional-id", "txn-secure", *secure)
    assert described.returncode == 0, described.stderr
    assert "CompleteCommit" in described.stdout

    altered = _rill("configs", "--alter", "--entity-type", "clients", "--entity-name", "reporting",
                    "--add-config", "producer_byte_rate=5242880", *secure)  # fmt: skip
    assert altered.returncode == 0, altered.stderr
    assert "Completed updating config for client-id 'reporting'." in altered.stdout
    shown = _rill("configs", "--describe", "--entity-type", "clients", "--entity-name", "reporting", *secure)
    assert shown.returncode == 0, shown.stderr
    assert "producer_byte_rate=5242880" in shown.stdout

    with KafkaClient(plain) as client:
        client.create_topic("offsets-topic", 2)
        client.commit_offsets("secure-group", {TopicPartition("offsets-topic", p): 3 + p for p in (0, 1)})
    deleted = _rill("groups", "--delete-offsets", "--group", "secure-group", "--topic", "offsets-topic:1", *secure)
    assert deleted.returncode == 0, deleted.stderr
    with KafkaClient(plain) as client:
        committed = client.fetch_committed("secure-group", [TopicPartition("offsets-topic", p) for p in (0, 1)])
    assert committed == {TopicPartition("offsets-topic", 0): 3, TopicPartition("offsets-topic", 1): -1}


def test_refused_credentials_in_one_line(secure_broker: rill.testing.TestBroker, pki: Pki, tmp_path: Path) -> None:
    add_scram_user(secure_broker.bootstrap_servers, "erin", "erin-secret", "SCRAM-SHA-512")
    props = _properties(tmp_path / "wrong.properties", pki, "not-the-password")
    secure = ["--bootstrap-server", secure_broker.listener_address("SASL_SSL"), "--command-config", str(props)]
    for args in (["transactions", "list"], ["configs", "--describe", "--entity-type", "clients"]):
        done = _rill(*args, *secure)
        assert done.returncode != 0
        assert "SASL SCRAM-SHA-512 authentication of user 'erin'" in done.stderr, done.stderr
        assert "SASL_AUTHENTICATION_FAILED" in done.stderr and "Traceback" not in done.stderr
    jks = tmp_path / "jks.properties"
    jks.write_text(props.read_text() + "ssl.truststore.type=JKS\n")
    done = _rill("transactions", "list", "--bootstrap-server", secure_broker.listener_address("SASL_SSL"),
                 "--command-config", str(jks))  # fmt: skip
    assert done.returncode != 0 and "ssl.truststore.type JKS is not supported" in done.stderr
