"""confluent-kafka (librdkafka) over every listener type: SASL PLAIN and SCRAM-SHA-256/512 over plaintext and TLS,
TLS alone; failures are clear and leave the broker serving the others; Metadata gives each client the brokers'
endpoints for the listener it came in on."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka.admin import AdminClient
from tests.integration.security._clients import add_scram_user, auth_error, librdkafka_conf, round_trip
from tests.integration.security.conftest import Pki

import rill.testing

pytestmark = pytest.mark.timeout(120)


def test_plain_over_sasl_plaintext(secure_broker: rill.testing.TestBroker) -> None:
    address = secure_broker.listener_address("SASL_PLAINTEXT")
    conf = librdkafka_conf(address, "SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret")
    assert len(round_trip(conf, "plain")) == 20


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_over_sasl_ssl(secure_broker: rill.testing.TestBroker, pki: Pki, mechanism: str) -> None:
    add_scram_user(secure_broker.bootstrap_servers, "bob", "bob-secret", mechanism)
    address = secure_broker.listener_address("SASL_SSL")
    conf = librdkafka_conf(address, "SASL_SSL", mechanism, "bob", "bob-secret", ca=str(pki.ca))
    topic = mechanism.lower()
    assert sorted(round_trip(conf, topic)) == sorted(f"{topic}-{i}".encode() for i in range(20))
    # every connection of these clients authenticated as User:bob
    principals = {str(c.info.security.principal) for c in secure_broker.broker._server._connections
                  if c.info.listener_name == "SASL_SSL"}  # fmt: skip
    assert principals <= {"User:bob"}


def test_metadata_answers_with_the_listener_the_client_came_in_on(secure_broker: rill.testing.TestBroker) -> None:
    for listener, protocol in (("PLAINTEXT", "PLAINTEXT"), ("SASL_PLAINTEXT", "SASL_PLAINTEXT")):
        address = secure_broker.listener_address(listener)
        conf = librdkafka_conf(address, protocol, "PLAIN" if "SASL" in protocol else None, "alice", "alice-secret")
        brokers = AdminClient(conf).list_topics(timeout=10).brokers
        (only,) = brokers.values()
        assert f"{only.host}:{only.port}" == address


def test_wrong_password_unknown_user_and_wrong_mechanism_fail_clearly(
    secure_broker: rill.testing.TestBroker,
) -> None:
    add_scram_user(secure_broker.bootstrap_servers, "carol", "carol-secret")
    address = secure_broker.listener_address("SASL_PLAINTEXT")
    wrong_plain = auth_error(librdkafka_conf(address, "SASL_PLAINTEXT", "PLAIN", "alice", "nope"))
    assert "Invalid username or password" in wrong_plain
    unknown = auth_error(librdkafka_conf(address, "SASL_PLAINTEXT", "SCRAM-SHA-256", "mallory", "x"))
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in unknown
    wrong_scram = auth_error(librdkafka_conf(address, "SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "nope"))
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in wrong_scram
    counts = secure_broker.broker.services.security.authentications["SASL_PLAINTEXT"]
    assert counts[1] >= 3
    # the broker goes on serving a client with the right credentials
    good = librdkafka_conf(address, "SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "carol-secret")
    assert len(round_trip(good, "after-failures", n=5)) == 5


def test_tls_to_a_plaintext_port_and_plaintext_to_a_tls_port(
    secure_broker: rill.testing.TestBroker, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rill.network")
    tls_to_plain = auth_error(librdkafka_conf(secure_broker.bootstrap_servers, "SSL", ca=str(pki.ca)))
    assert "SSL" in tls_to_plain  # librdkafka names an SSL handshake failure
    assert any("speaks TLS to a listener that does not" in r.getMessage() for r in caplog.records)
    plain_to_tls = auth_error(librdkafka_conf(secure_broker.listener_address("SSL"), "PLAINTEXT"))
    assert plain_to_tls
    conf = librdkafka_conf(secure_broker.listener_address("SSL"), "SSL", ca=str(pki.ca))
    assert len(round_trip(conf, "tls-after-mixups", n=5)) == 5
