"""Random bytes on one connection never disturb another (hypothesis, real sockets, server in a thread)."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rill.network import SocketServer
from rill.network.event_loop import new_event_loop

from .conftest import ToyHandler, frame

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server_address() -> Iterator[tuple[str, int]]:
    loop = new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = SocketServer(ToyHandler(), "127.0.0.1", 0, max_request_bytes=64 * 1024)
    address = asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    yield address
    asyncio.run_coroutine_threadsafe(server.stop(timeout=2), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def recv_frame(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    return exact(struct.unpack(">i", exact(4))[0])


frames = st.one_of(
    st.binary(max_size=300),  # raw garbage, size prefix included
    st.binary(max_size=200).map(lambda b: frame(b"echo:" + b)),  # a well-formed request
    st.binary(max_size=200).map(frame),  # a well-formed frame with an unknown payload
    st.integers(min_value=-(2**31), max_value=2**31 - 1).map(lambda n: struct.pack(">i", n)),  # just a size
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunks=st.lists(frames, max_size=8))
def test_random_bytes_do_not_disturb_other_connections(server_address: tuple[str, int], chunks: list[bytes]) -> None:
    with (
        socket.create_connection(server_address, timeout=10) as good,
        socket.create_connection(server_address, timeout=10) as fuzz,
    ):
        for chunk in chunks:
            try:
                fuzz.sendall(chunk)
            except OSError:
                break  # the server closed the fuzzed connection: that is an allowed answer
        # The fuzzed connection gets answers and/or a close, never a hang.
        try:
            fuzz.shutdown(socket.SHUT_WR)
            while fuzz.recv(65536):
                pass
        except (ConnectionResetError, OSError):
            pass  # already closed by the server
        good.sendall(frame(b"echo:alive"))
        assert recv_frame(good) == b"alive"
