"""``rill.client`` over TLS and SASL listeners: SSL (with and without a client certificate), SASL_PLAINTEXT
PLAIN, SASL_SSL SCRAM-SHA-512, refused credentials and certificates, re-authentication when the broker gives
SASL sessions a lifetime (KIP-368), and the settings the client refuses."""

from __future__ import annotations

import time

import pytest
from tests.integration.security._clients import add_scram_user
from tests.integration.security.conftest import Pki, tls_configs

import rill.testing
from rill.client import AuthenticationError, ClientSecurity, IdempotentProducer, KafkaClient, SecurityConfigError
from rill.client.connection import BrokerConnection, NetworkError
from rill.common import TopicPartition
from rill.protocol import ApiKey
from rill.records.columnar import decode_columns

pytestmark = pytest.mark.timeout(120)

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def _jaas(module: str, user: str, password: str) -> str:
    return f'{module} required username="{user}" password="{password}";'


def _round_trip(client: KafkaClient, topic: str, n: int = 10) -> list[bytes]:
    """Create ``topic``, produce ``n`` records with the idempotent producer, fetch them back: the values."""
    client.create_topic(topic, 1)
    with IdempotentProducer(client) as producer:
        for i in range(n):
            producer.send(topic, f"{topic}-{i}".encode(), partition=0)
    tp = TopicPartition(topic, 0)
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        fetched = client.fetch({tp: len(got)})[tp]
        columns = decode_columns(fetched.records, len(got))
        got += [v for v in (columns.value(r) for r in range(len(columns))) if v is not None]
    return got


def _expected(topic: str, n: int = 10) -> list[bytes]:
    return [f"{topic}-{i}".encode() for i in range(n)]


def test_ssl_listener(secure_broker: rill.testing.TestBroker, pki: Pki) -> None:
    address = secure_broker.listener_address("SSL")
    security = ClientSecurity.from_properties(
        {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca)}
    )
    with KafkaClient(address, security=security, timeout_s=20) as client:
        assert _round_trip(client, "rc-ssl") == _expected("rc-ssl")
        # the brokers the metadata names are this listener's: every connection of the client is TLS
        (broker,) = client.cluster.brokers.values()
        assert f"{broker.host}:{broker.port}" == address
    # a trust store that did not sign the broker's certificate: a clear, immediate error
    untrusted = ClientSecurity.from_properties(
        {"security.protocol": "SSL", "ssl.truststore.location": str(pki.other_ca)}
    )
    started = time.monotonic()
    with pytest.raises(AuthenticationError, match=r"TLS handshake .* failed: .*certificate") as refused:
        KafkaClient(address, security=untrusted, timeout_s=20).list_topics()
    assert not refused.value.retriable and time.monotonic() - started < 10


def test_mutual_tls_with_a_pem_key_store(pki: Pki) -> None:
    configs = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", **tls_configs(pki, "required")}
    store = pki.client_cert.parent / "client-store.pem"
    store.write_text(pki.client_cert.read_text() + pki.client_key.read_text())
    metadata = {"topics": [], "allow_auto_topic_creation": False}
    with rill.testing.broker(configs) as b:
        address = _host_port(b.listener_address("SSL"))
        props = {
            "security.protocol": "SSL",
            "ssl.truststore.location": str(pki.ca),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(store),
        }
        with BrokerConnection(*address, security=ClientSecurity.from_properties(props)) as c:
            _, body = c.request(ApiKey.METADATA, metadata)
            assert body["brokers"]
            principals = {
                str(conn.info.security.principal)
                for conn in b.broker._server._connections
                if conn.info.listener_name == "SSL"
            }
            assert principals == {"User:CN=alice,OU=eng,O=acme"}
        # without the key store the broker refuses the handshake
        without = ClientSecurity.from_properties({k: v for k, v in props.items() if "keystore" not in k})
        with pytest.raises((AuthenticationError, NetworkError)):
            BrokerConnection(*address, security=without, timeout_s=10).request(ApiKey.METADATA, metadata)


def _host_port(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


def test_sasl_plaintext_plain(secure_broker: rill.testing.TestBroker) -> None:
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": _jaas(PLAIN, "alice", "alice-secret"),
        }
    )
    with KafkaClient(secure_broker.listener_address("SASL_PLAINTEXT"), security=security, timeout_s=20) as client:
        assert _round_trip(client, "rc-plain") == _expected("rc-plain")
        # a broken connection: the client connects again, and the new connection authenticates
        (old,) = client._conns.values()
        old._sock.close()
        assert client.latest_offsets([TopicPartition("rc-plain", 0)]) == {TopicPartition("rc-plain", 0): 10}
        (new,) = client._conns.values()
        assert new is not old and new.authentications == 1


def test_sasl_ssl_scram_sha_512(secure_broker: rill.testing.TestBroker, pki: Pki) -> None:
    add_scram_user(secure_broker.bootstrap_servers, "carol", "carol-secret", "SCRAM-SHA-512")
    props = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": _jaas(SCRAM, "carol", "carol-secret"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
    }
    with KafkaClient(
        secure_broker.listener_address("SASL_SSL"), security=ClientSecurity.from_properties(props), timeout_s=20
    ) as client:
        assert _round_trip(client, "rc-scram") == _expected("rc-scram")


@pytest.mark.parametrize(("mechanism", "module"), [("PLAIN", PLAIN), ("SCRAM-SHA-256", SCRAM)])
def test_wrong_password_is_a_clear_error(secure_broker: rill.testing.TestBroker, mechanism: str, module: str) -> None:
    if mechanism != "PLAIN":
        add_scram_user(secure_broker.bootstrap_servers, "dave", "dave-secret", mechanism)
    user = "alice" if mechanism == "PLAIN" else "dave"
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": _jaas(module, user, "wrong"),
        }
    )
    started = time.monotonic()
    address = secure_broker.listener_address("SASL_PLAINTEXT")
    with pytest.raises(AuthenticationError) as refused, KafkaClient(address, security=security, timeout_s=20) as c:
        c.list_topics()
    message = str(refused.value)
    assert f"SASL {mechanism} authentication of user '{user}'" in message
    assert "SASL_AUTHENTICATION_FAILED" in message and not refused.value.retriable
    assert time.monotonic() - started < 10  # refused at once, not retried until the client's timeout


def test_session_lifetime_reauthenticates(pki: Pki) -> None:
    configs = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": _jaas(PLAIN, "admin", "admin-secret")[:-1] + ' user_alice="alice-secret";',
        "connections.max.reauth.ms": "1000",
    }
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": _jaas(PLAIN, "alice", "alice-secret"),
        }
    )
    metadata = {"topics": [], "allow_auto_topic_creation": False}
    with (
        rill.testing.broker(configs) as b,
        BrokerConnection(*_host_port(b.listener_address("SASL_PLAINTEXT")), security=security) as c,
    ):
        c.request(ApiKey.METADATA, metadata)
        time.sleep(1.2)  # past the session's end: the client authenticates again before the request
        _, body = c.request(ApiKey.METADATA, metadata)
        assert body["brokers"] and c.authentications == 2
        # a client that missed its moment: the broker closes the expired session at the next request, and
        # the connection sends it again once on a new connection
        c._reauth_at = None
        time.sleep(1.2)
        old_socket = c._sock
        _, body = c.request(ApiKey.METADATA, metadata)
        assert body["brokers"] and c.authentications == 3 and c._sock is not old_socket


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ({"security.protocol": "SSL", "ssl.truststore.type": "JKS"}, "ssl.truststore.type JKS"),
        ({"security.protocol": "SSL", "ssl.keystore.type": "PKCS12"}, "ssl.keystore.type PKCS12"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism GSSAPI"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism OAUTHBEARER"),
        ({"security.protocol": "SASL_SSL"}, "sasl.mechanism is required"),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": _jaas(SCRAM, "a", "b"),
            },
            "login module " + SCRAM,
        ),
        ({"security.protocol": "SSL", "ssl.truststore.certificates": "-----BEGIN"}, "ssl.truststore.certificates"),
        (
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.login.callback.handler.class": "X"},
            "sasl.login.callback.handler.class",
        ),
        ({"security.protocol": "TLS"}, "security.protocol TLS"),
        (
            {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"},
            "ssl.endpoint.identification.algorithm",
        ),
    ],
)
def test_settings_the_client_cannot_use_are_refused(props: dict[str, str], named: str) -> None:
    with pytest.raises(SecurityConfigError, match=named.replace(".", r"\.")):
        ClientSecurity.from_properties(props)


def test_a_jks_file_given_as_the_trust_store_is_refused(tmp_path: object) -> None:
    import pathlib

    store = pathlib.Path(str(tmp_path)) / "truststore.jks"
    store.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    security = ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.truststore.location": str(store)})
    with pytest.raises(SecurityConfigError, match="not a PEM file"):
        security.ssl_context()


def test_librdkafka_spellings_and_host_name_checking(pki: Pki) -> None:
    """A --command-config written for confluent-kafka gives the same settings; an empty
    ssl.endpoint.identification.algorithm turns the host name check off (the certificate is still checked)."""
    librdkafka = ClientSecurity.from_properties(
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
            "ssl.ca.location": str(pki.ca),
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    java = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": _jaas(SCRAM, "alice", "alice-secret"),
            "ssl.truststore.location": str(pki.ca),
            "ssl.endpoint.identification.algorithm": "",
            "bootstrap.servers": "ignored:9092",  # not a security setting: left to the caller
        }
    )
    assert librdkafka == java and "alice-secret" not in repr(java)
    context = java.ssl_context()
    assert context.check_hostname is False and context.verify_mode.name == "CERT_REQUIRED"
    checked = ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.truststore.location": str(pki.ca)})
    assert checked.ssl_context().check_hostname is True
