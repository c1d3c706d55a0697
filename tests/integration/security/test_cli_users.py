"""``rill configs`` manages SCRAM users as kafka-configs does, and the CLI tools connect to SASL_SSL listeners
with a Java-style client.properties (``--command-config``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.integration.security.conftest import Pki

import rill.testing

pytestmark = pytest.mark.timeout(120)


def _rill(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rill", *args], capture_output=True, text=True, timeout=60)


def test_scram_users_through_the_cli(secure_broker: rill.testing.TestBroker, pki: Pki, tmp_path: Path) -> None:
    plain = ["--bootstrap-server", secure_broker.bootstrap_servers]
    done = _rill("configs", "--alter", "--entity-type", "users", "--entity-name", "frank", "--add-config",
                 "SCRAM-SHA-256=[iterations=8192,password=frank-secret],SCRAM-SHA-512=[password=frank-secret]",
                 *plain)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Completed updating config for user frank." in done.stdout
    shown = _rill("configs", "--describe", "--entity-type", "users", "--entity-name", "frank", *plain)
    assert shown.returncode == 0, shown.stderr
    assert "SCRAM-SHA-256=iterations=8192" in shown.stdout and "SCRAM-SHA-512=iterations=4096" in shown.stdout
    bad = _rill("configs", "--alter", "--entity-type", "users", "--entity-name", "frank", "--add-config",
                "SCRAM-SHA-256=[iterations=100,password=x]", *plain)  # fmt: skip
    assert bad.returncode != 0 and "iterations" in bad.stderr.lower()

    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="frank" password="frank-secret";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={pki.ca}\n"
    )
    secure = ["--bootstrap-server", secure_broker.listener_address("SASL_SSL"), "--command-config", str(props)]
    created = _rill("topics", "create", "cli-secure", *secure)
    assert created.returncode == 0, created.stderr
    listed = _rill("topics", "list", *secure)
    assert "cli-secure" in listed.stdout

    removed = _rill("configs", "--alter", "--entity-type", "users", "--entity-name", "frank", "--delete-config",
                    "SCRAM-SHA-512", *plain)  # fmt: skip
    assert removed.returncode == 0, removed.stderr
    refused = _rill("topics", "list", *secure)
    assert refused.returncode != 0
