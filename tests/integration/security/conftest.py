"""Fixtures of the security tests: a throwaway certificate authority (made with the ``openssl`` command at
test time: no key is kept in the repository), and brokers with TLS and SASL listeners."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from tests.integration.security._pki import Pki, make_pki

import rill.testing

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    return make_pki(tmp_path_factory.mktemp("pki"))


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
