"""What a connection may send before it has authenticated: one frame at a time (Kafka's authenticator reads one
receive at a time), no larger than its listener's ``sasl.server.max.receive.size``
(``listener.name.<l>.sasl.server.max.receive.size`` over the broker-wide value)."""

from __future__ import annotations

import struct
import time

import pytest
from tests.integration.broker._wire import Wire
from tests.integration.security.conftest import PLAIN_JAAS

import rill.testing
from rill.protocol import ApiKey, encode_request

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def sasl_broker() -> rill.testing.TestBroker:
    configs = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SMALL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SMALL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": "1000",
        "sasl.server.max.receive.size": "4096",
        "listener.name.small.sasl.server.max.receive.size": "256",
    }
    with rill.testing.broker(configs) as b:
        yield b  # type: ignore[misc]


def test_an_unauthenticated_connection_holds_one_frame(sasl_broker: rill.testing.TestBroker) -> None:
    """A handshake, a failed authentication (answered after a one-second delay) and 1,000 ApiVersions behind it,
    in one write: while the failed authentication waits, nothing behind it has been read."""
    server = sasl_broker.broker._server
    w = Wire(sasl_broker.listener_address("SASL_PLAINTEXT"))
    authenticate = encode_request(ApiKey.SASL_AUTHENTICATE, 2, 2, "t", {"auth_bytes": b"\0alice\0wrong"})
    flood = b"".join(struct.pack(">ihhih", 10, ApiKey.API_VERSIONS, 0, 3 + i, -1) for i in range(1000))
    w.send_raw(encode_request(ApiKey.SASL_HANDSHAKE, 1, 1, "t", {"mechanism": "PLAIN"}) + authenticate + flood)
    w.read_frame()  # the handshake's answer
    most_queued = most_bytes = 0
    started = time.monotonic()
    while time.monotonic() - started < 0.8:  # within the failed authentication's delay
        most_queued = max(most_queued, server.queued_requests)
        most_bytes = max(most_bytes, server.request_bytes)
        time.sleep(0.005)
    assert most_queued == 0, f"{most_queued} frames queued behind an authentication under way"
    assert most_bytes <= len(authenticate) - 4
    w.read_frame()  # the failed authentication's answer, then the connection closes
    assert w.is_closed_by_peer()
    w.close()


@pytest.mark.parametrize(("listener", "size", "closed"), [
    ("SMALL", 300, True), ("SMALL", 200, False), ("SASL_PLAINTEXT", 300, False), ("SASL_PLAINTEXT", 5000, True),
])  # fmt: skip
def test_the_listeners_own_max_receive_size_applies(
    sasl_broker: rill.testing.TestBroker, listener: str, size: int, closed: bool
) -> None:
    w = Wire(sasl_broker.listener_address(listener))

    # An ApiVersions v3 whose client software name fills the frame to ``size`` bytes.
    def api_versions(name: str) -> bytes:
        body = {"client_software_name": name, "client_software_version": "1"}
        return encode_request(ApiKey.API_VERSIONS, 3, 1, "t", body)

    request = api_versions("n" * (size - (len(api_versions("")) - 4)))
    assert len(request) - 4 in (size, size + 1)
    w.send_raw(request)
    if closed:
        assert w.is_closed_by_peer()
    else:
        w.read_frame()
    w.close()
