"""The broker applies Kafka's socket.send.buffer.bytes and socket.receive.buffer.bytes to its connections."""

from __future__ import annotations

import socket
import time

import pytest

from rill.testing import broker

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("overrides", "sndbuf", "rcvbuf"),
    [
        ({}, 102400, 102400),  # Kafka's defaults
        ({"socket.send.buffer.bytes": "65536", "socket.receive.buffer.bytes": "32768"}, 65536, 32768),
    ],
)
def test_buffer_sizes_reach_accepted_connections(overrides: dict[str, str], sndbuf: int, rcvbuf: int) -> None:
    with broker(overrides) as b, socket.create_connection((b.host, b.port)):
        server = b.broker._server
        deadline = time.monotonic() + 10
        while not server._connections and time.monotonic() < deadline:
            time.sleep(0.01)
        (conn,) = list(server._connections)
        sock = conn.transport.get_extra_info("socket")
        # Linux doubles what is asked for, to leave room for its bookkeeping.
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == 2 * sndbuf
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == 2 * rcvbuf
