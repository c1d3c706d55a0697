"""Fixtures of the security tests: a throwaway certificate authority (made with the ``openssl`` command at
test time: no key is kept in the repository), and brokers with TLS and SASL listeners."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import rill.testing

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA certificate (PEM): the trust store
    server: Path  # the broker's certificate chain and key in one PEM file (127.0.0.1 and localhost)
    server_cert: Path
    server_key: Path
    client_cert: Path  # a client certificate, subject CN=alice,OU=eng,O=acme
    client_key: Path
    other_ca: Path  # a CA that signed nothing here


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
             "-days", "2", "-subj", f"/CN={name}", cwd=d)  # fmt: skip


def _signed(d: Path, name: str, subject: str, ext: str | None) -> None:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", subject, cwd=d)  # fmt: skip
    args = ["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2"]  # fmt: skip
    if ext:
        (d / f"{name}.ext").write_text(ext)
        args += ["-extfile", f"{name}.ext"]
    _openssl(*args, cwd=d)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    d = tmp_path_factory.mktemp("pki")
    _ca(d, "ca")
    _ca(d, "other-ca")
    _signed(d, "server", "/CN=localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _signed(d, "client", "/O=acme/OU=eng/CN=alice", None)
    (d / "server-store.pem").write_text((d / "server.pem").read_text() + (d / "server.key").read_text())
    return Pki(d / "ca.pem", d / "server-store.pem", d / "server.pem", d / "server.key", d / "client.pem",
               d / "client.key", d / "other-ca.pem")  # fmt: skip


def tls_configs(pki: Pki, client_auth: str = "none") -> dict[str, str]:
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "ssl.client.auth": client_auth,
    }


@pytest.fixture
def secure_broker(pki: Pki) -> Iterator[rill.testing.TestBroker]:
    """A broker with four listeners: PLAINTEXT (first: the bootstrap of admin tools), SSL, SASL_PLAINTEXT
    (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and SASL_SSL (the same mechanisms)."""
    configs = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": "50",
        **tls_configs(pki),
    }
    with rill.testing.broker(configs) as b:
        yield b
