"""The registry's HTTP server against clients that are slow or never read, over real sockets: a request must
arrive whole (body included) within the idle time, an answer must be taken within the write time, and the
request bodies held at once are bounded across connections; other clients are served meanwhile."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rill.registry import http

pytestmark = pytest.mark.timeout(60)
MIB = 1024 * 1024


class Served:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.server: http.HttpServer | None = None
        self.bodies: list[int] = []

    async def handle(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> tuple[int, Any]:
        self.bodies.append(len(body))
        return 200, {"path": path, "pad": "x" * 20_000 if path == "/big" else ""}


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.setattr(http, "IDLE_TIMEOUT_S", 0.5)
    monkeypatch.setattr(http, "WRITE_TIMEOUT_S", 0.5, raising=False)
    monkeypatch.setattr(http, "MAX_BODIES_BYTES", 8 * MIB, raising=False)
    s = Served()
    ready = threading.Event()
    stop: list[asyncio.Event] = []

    async def main() -> None:
        stop.append(asyncio.Event())
        s.server = http.HttpServer(s.handle, "127.0.0.1", 0)
        await s.server.start()
        ready.set()
        await stop[0].wait()
        await s.server.stop()

    thread = threading.Thread(target=s.loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    yield s
    s.loop.call_soon_threadsafe(stop[0].set)
    thread.join(10)
    s.loop.close()


def _connect(served: Served, receive_buffer: int | None = None) -> socket.socket:
    assert served.server is not None
    sock = socket.socket()
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", served.server.port))
    return sock


def _get(served: Served, path: str = "/ok") -> bytes:
    with _connect(served) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def _closed_by_server(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def _wait_for(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_a_body_that_never_arrives_whole_is_not_waited_for(served: Served) -> None:
    sock = _connect(served)
    sock.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"{" * 10)
    assert _get(served).startswith(b"HTTP/1.1 200")
    assert _closed_by_server(sock)
    sock.close()


def test_a_client_that_does_not_read_its_answers_is_closed(served: Served) -> None:
    assert served.server is not None
    sock = _connect(served, receive_buffer=4096)
    sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n" * 300)
    assert _get(served).startswith(b"HTTP/1.1 200")
    _wait_for(lambda: served.server is not None and served.server.connection_count == 0)
    sock.close()


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS line")


def test_bodies_held_at_once_are_bounded(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight clients each send all but the last byte of an 8 MiB body: one body's worth is held, the others wait
    unread; each completes in turn once its last byte comes."""
    monkeypatch.setattr(http, "IDLE_TIMEOUT_S", 30.0)
    size = 8 * MIB
    head = f"POST /x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
    payload = memoryview(head.encode() + b"b" * size)
    before = _rss_mib()
    socks = [_connect(served) for _ in range(8)]
    for sock in socks:
        sock.setblocking(False)
    offered = [0] * len(socks)

    def send_some() -> int:
        """Offer each socket the rest of its body but its last byte, as far as the socket takes it."""
        moved = 0
        for i, sock in enumerate(socks):
            data = payload[offered[i] : len(payload) - 1]
            if data:
                try:
                    n = sock.send(data)
                except BlockingIOError:
                    continue
                offered[i] += n
                moved += n
        return moved

    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < 1.0:  # until no socket takes more for a second
        if send_some():
            quiet_since = time.monotonic()
        time.sleep(0.01)
    grown = _rss_mib() - before
    assert grown < 32, f"RSS grew by {grown:.0f} MiB for 8 bodies of 8 MiB sent all but one byte"
    assert served.server is not None and served.server.bodies.free == 0

    def finish(i: int, sock: socket.socket) -> None:
        sock.setblocking(True)
        sock.settimeout(20)
        sock.sendall(payload[offered[i] :])
        answers[i] = sock.recv(100)

    answers: list[bytes] = [b""] * len(socks)
    threads = [threading.Thread(target=finish, args=(i, sock)) for i, sock in enumerate(socks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(a.startswith(b"HTTP/1.1 200") for a in answers), answers
    for sock in socks:
        sock.close()
    assert served.bodies.count(size) == 8
    _wait_for(lambda: served.server is not None and served.server.bodies.free == 8 * MIB)
