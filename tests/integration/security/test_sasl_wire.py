"""The SASL exchange on the wire, request by request: what is accepted before authentication, handshake v0 with
bare tokens, errors and closes as Kafka answers them, the failed-authentication delay, re-authentication
(KIP-368), and the frame size bound before authentication."""

from __future__ import annotations

import struct
import time

import pytest
from tests.integration.broker._wire import Wire
from tests.integration.security._clients import add_scram_user, librdkafka_conf, round_trip
from tests.integration.security.conftest import PLAIN_JAAS

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey, encode_request

pytestmark = pytest.mark.timeout(60)

METADATA = (ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})


@pytest.fixture
def sasl_broker() -> rill.testing.TestBroker:
    configs = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": "300",
        "connections.max.reauth.ms": "1500",
        "sasl.server.max.receive.size": "4096",
    }
    with rill.testing.broker(configs) as b:
        yield b  # type: ignore[misc]


def _plain(user: str, password: str) -> bytes:
    return f"\0{user}\0{password}".encode()


def _authenticate(w: Wire, user: str = "alice", password: str = "alice-secret") -> dict[str, object]:
    assert w.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
    return w.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": _plain(user, password)})


def test_only_three_apis_before_authentication(sasl_broker: rill.testing.TestBroker) -> None:
    w = Wire(sasl_broker.listener_address("SASL_PLAINTEXT"))
    body = w.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    keys = {e["api_key"] for e in body["api_keys"]}
    assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS} <= keys
    w.send_raw(encode_request(ApiKey.METADATA, 9, 7, "t",
                                                                                       METADATA[2]))  # fmt: skip
    assert w.is_closed_by_peer()
    w = Wire(sasl_broker.listener_address("SASL_PLAINTEXT"))
    assert _authenticate(w)["error_code"] == 0
    assert w.call(*METADATA)["brokers"]


def test_handshake_errors(sasl_broker: rill.testing.TestBroker) -> None:
    w = Wire(sasl_broker.listener_address("SASL_PLAINTEXT"))
    body = w.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    assert body == {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": ["PLAIN", "SCRAM-SHA-256"]}
    assert w.is_closed_by_peer()
    w = Wire(sasl_broker.listener_address("SASL_PLAINTEXT"))
    body = w.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": _plain("alice", "alice-secret")})
    assert body["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    assert w.is_closed_by_peer()
    # on a listener without SASL, a handshake is refused and the connection goes on
    w = Wire(sasl_broker.bootstrap_servers)
    assert w.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    body = w.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b""})
    assert body["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    assert body["error_message"] == "SaslAuthenticate request received after successful authentication"
    assert w.call(*METADATA)["brokers"]
    # after authenticating, a SaslAuthenticate without a new handshake is refused the same way
    w = Wire(sasl_broker.listener_address("SASL_PLAINTEXT"))
    assert _authenticate(w)["error_code"] == 0
    assert w.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b""})["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    assert w.call(*METADATA)["brokers"]


def test_failed_authentication_is_delayed_then_closed(sasl_broker: rill.testing.TestBroker) -> None:
    w = Wire(sasl_broker.listener_address("SASL_PLAINTEXT"))
    started = time.monotonic()
    body = _authenticate(w, password="wrong")
    assert time.monotonic() - started >= 0.3  # connection.failed.authentication.delay.ms
    assert body["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert body["error_message"] == "Authentication failed: Invalid username or password"
    assert w.is_closed_by_peer()
    assert sasl_broker.broker.services.security.authentications["SASL_PLAINTEXT"] == [0, 1]


def test_handshake_v0_with_bare_tokens(sasl_broker: rill.testing.TestBroker) -> None:
    w = Wire(sasl_broker.listener_address("SASL_PLAINTEXT"))
    assert w.call(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
    token = _plain("alice", "alice-secret")
    w.send_raw(struct.pack(">i", len(token)) + token)
    assert w.read_frame() == b""  # PLAIN's empty server token
    assert w.call(*METADATA)["brokers"]
    w = Wire(sasl_broker.listener_address("SASL_PLAINTEXT"))
    assert w.call(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
    bad = _plain("alice", "nope")
    w.send_raw(struct.pack(">i", len(bad)) + bad)
    assert w.is_closed_by_peer()


def test_reauthentication(sasl_broker: rill.testing.TestBroker) -> None:
    w = Wire(sasl_broker.listener_address("SASL_PLAINTEXT"))
    body = _authenticate(w)
    assert body["error_code"] == 0 and body["session_lifetime_ms"] == 1500
    assert _authenticate(w)["error_code"] == 0  # the same principal again, on the same connection
    assert w.call(*METADATA)["brokers"]
    body = _authenticate(w, "admin", "admin-secret")  # another principal: refused, closed
    assert body["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Cannot change principals" in body["error_message"]
    assert w.is_closed_by_peer()
    # a session that expires without re-authentication: the next request closes the connection
    w = Wire(sasl_broker.listener_address("SASL_PLAINTEXT"))
    assert _authenticate(w)["error_code"] == 0
    time.sleep(1.6)
    w.send_raw(encode_request(ApiKey.METADATA, 9, 9, "t",
                                                                                       METADATA[2]))  # fmt: skip
    assert w.is_closed_by_peer()


def test_large_frame_before_authentication_closes(sasl_broker: rill.testing.TestBroker) -> None:
    w = Wire(sasl_broker.listener_address("SASL_PLAINTEXT"))
    w.send_raw(struct.pack(">i", 100_000) + b"\0" * 10)
    assert w.is_closed_by_peer()
    w = Wire(sasl_broker.listener_address("SASL_PLAINTEXT"))
    assert _authenticate(w)["error_code"] == 0
    assert w.call(*METADATA)["brokers"]


def test_authentications_are_counted_in_the_metrics() -> None:
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        metrics_port = s.getsockname()[1]
    configs = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": "0",
        "metrics.port": str(metrics_port),
    }
    with rill.testing.broker(configs) as b:
        _authenticate(Wire(b.listener_address("SASL_PLAINTEXT")))
        _authenticate(Wire(b.listener_address("SASL_PLAINTEXT")), password="wrong")
        _authenticate(Wire(b.listener_address("SASL_PLAINTEXT")), user="nobody")
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    assert 'kafka_server_socketservermetrics_successful_authentication_total{listener="SASL_PLAINTEXT"} 1.0' in text
    assert 'kafka_server_socketservermetrics_failed_authentication_total{listener="SASL_PLAINTEXT"} 2.0' in text


def test_a_restarted_broker_keeps_its_listeners_and_scram_users() -> None:
    configs = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
    }
    with rill.testing.broker(configs) as b:
        add_scram_user(b.bootstrap_servers, "gina", "gina-secret")
        before = b.listener_address("SASL_PLAINTEXT")
        b.restart()
        assert b.listener_address("SASL_PLAINTEXT") == before
        conf = librdkafka_conf(before, "SASL_PLAINTEXT", "SCRAM-SHA-256", "gina", "gina-secret")
        assert len(round_trip(conf, "after-restart", n=5)) == 5
