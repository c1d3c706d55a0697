"""The ``/metrics`` HTTP endpoint of a broker: Prometheus' text format, served on the broker's event loop (so
sources read broker state from the thread that owns it) or, outside a loop, in a daemon thread.

One request per connection. A client must send its request within ``_READ_TIMEOUT_S`` and take the whole answer
(and the connection's end) within ``_WRITE_TIMEOUT_S``; otherwise the connection is dropped, so a client that
sends slowly or never reads holds no page of metrics for longer."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client.exposition import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from rill.metrics import BrokerMetrics


class MetricsServer:
    """A running ``/metrics`` endpoint: call it (or ``stop()``) to stop; ``port`` is the bound port."""

    def __init__(self, host: str, port: int, stop: Callable[[], None], fd: int = -1) -> None:
        self.host = host
        self.port = port
        self.fd = fd  # the listening socket's descriptor
        self._stop = stop
        self._stopped = False

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._stop()

    def __call__(self) -> None:
        self.stop()


def start_http_server(host: str, port: int, metrics: BrokerMetrics) -> MetricsServer:
    """Serve ``metrics`` at ``http://host:port/metrics`` (port 0 picks a free one).

    Called from a running asyncio loop, the endpoint is served on that loop, so sources read broker state
    from the thread that owns it; called elsewhere, it runs in a daemon thread.
    """
    sock = socket.create_server((host, port), reuse_port=False)
    bound_port = int(sock.getsockname()[1])
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        return _serve_on_loop(loop, sock, host, bound_port, metrics)
    return _serve_in_thread(sock, host, bound_port, metrics)


_MAX_REQUEST_HEAD = 16 * 1024
_READ_TIMEOUT_S = 10.0
_WRITE_TIMEOUT_S = 10.0


def _http_response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _respond(request_head: bytes, metrics: BrokerMetrics) -> bytes:
    line = request_head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split()
    if len(parts) < 2:
        return _http_response("400 Bad Request", b"bad request\n")
    method, target = parts[0], parts[1].split("?", 1)[0]
    if method not in ("GET", "HEAD"):
        return _http_response("405 Method Not Allowed", b"only GET\n")
    if target not in ("/metrics", "/"):
        return _http_response("404 Not Found", b"metrics are at /metrics\n")
    body = metrics.render()
    response = _http_response("200 OK", body, CONTENT_TYPE_LATEST)
    return response if method == "GET" else response[: len(response) - len(body)]


def _serve_on_loop(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, host: str, port: int, metrics: BrokerMetrics
) -> MetricsServer:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            writer.write(_respond(head, metrics))
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            pass
        try:
            async with asyncio.timeout(_WRITE_TIMEOUT_S):  # the answer and the connection's end, both taken
                writer.close()
                await writer.wait_closed()
        except TimeoutError:
            writer.transport.abort()
        except OSError:
            pass

    holder: list[asyncio.Server] = []

    async def serve() -> None:
        holder.append(await asyncio.start_server(handle, sock=sock, limit=_MAX_REQUEST_HEAD))

    task = loop.create_task(serve(), name="metrics-http")

    def stop() -> None:
        if holder:
            holder[0].close()
        else:
            task.cancel()
            sock.close()

    return MetricsServer(host, port, stop, sock.fileno())


def _serve_in_thread(sock: socket.socket, host: str, port: int, metrics: BrokerMetrics) -> MetricsServer:
    stopping = threading.Event()
    sock.settimeout(0.2)

    def serve_one(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(_READ_TIMEOUT_S)  # each recv; sendall's whole answer within it too
            head = b""
            try:
                while b"\r\n\r\n" not in head and len(head) < _MAX_REQUEST_HEAD:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    head += chunk
                conn.sendall(_respond(head, metrics))
            except OSError:
                pass

    def loop() -> None:
        while not stopping.is_set():
            try:
                conn, _addr = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            threading.Thread(target=serve_one, args=(conn,), daemon=True, name="metrics-conn").start()

    thread = threading.Thread(target=loop, daemon=True, name="metrics-http")
    thread.start()

    def stop() -> None:
        stopping.set()
        thread.join(timeout=2.0)
        sock.close()

    return MetricsServer(host, port, stop, sock.fileno())
