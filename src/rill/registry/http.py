"""A small HTTP/1.1 server on asyncio streams for the registry's JSON API.

Persistent connections (HTTP/1.1 keep-alive unless ``Connection: close``; HTTP/1.0 closes), bodies
by ``Content-Length`` or chunked transfer coding, bounded header and body sizes. Malformed requests
get a 400 and the connection is closed; the handler's exceptions never reach the client as a crash.

Clients that are slow or do not read cost bounded time and memory: a request (head and body) must
arrive within ``IDLE_TIMEOUT_S`` of the previous answer (or of the connection), an answer must be taken
by the client within ``WRITE_TIMEOUT_S``, else the connection is closed; the bodies held at once by all
connections together are at most ``MAX_BODIES_BYTES`` (a body waits, unread, for room).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, urlsplit

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_HEADER_BYTES = 64 << 10
MAX_BODY_BYTES = 16 << 20
MAX_BODIES_BYTES = 64 << 20
"""Bytes of request bodies held at once (being read or handled), all connections together."""
IDLE_TIMEOUT_S = 120.0
"""Time for the next request to arrive whole (head and body) on a connection."""
WRITE_TIMEOUT_S = 30.0
"""Time for a client to take an answer (and the end of the connection)."""

# (method, path, query, headers (lower-case names), body) -> (status, JSON value)
Handler = Callable[[str, str, dict[str, str], dict[str, str], bytes], Awaitable[tuple[int, Any]]]


class BadRequest(Exception):
    pass


class BodyBudget:
    """Bytes of request bodies held at once across connections; ``take`` waits, in arrival order, for room."""

    def __init__(self, total: int) -> None:
        self.free = total
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def take(self, nbytes: int) -> None:
        if self.free >= nbytes and not self._waiters:
            self.free -= nbytes
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((nbytes, future))
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled():  # granted just as the wait was given up
                self.give(nbytes)
            raise

    def give(self, nbytes: int) -> None:
        self.free += nbytes
        while self._waiters:
            wanted, future = self._waiters[0]
            if future.done():  # given up
                self._waiters.popleft()
                continue
            if wanted > self.free:
                return
            self._waiters.popleft()
            self.free -= wanted
            future.set_result(None)


async def _read_body(
    reader: asyncio.StreamReader, headers: dict[str, str], reserve: Callable[[int], Awaitable[None]]
) -> bytes:
    """The request's body; ``reserve(n)`` is awaited before ``n`` more bytes of it are read."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        out = bytearray()
        while True:
            size_line = await reader.readuntil(b"\r\n")
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError:
                raise BadRequest("bad chunk size") from None
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                    pass
                return bytes(out)
            if size < 0 or len(out) + size > MAX_BODY_BYTES:
                raise BadRequest("request body too large")
            await reserve(size)
            out += await reader.readexactly(size)
            await reader.readexactly(2)
    length_text = headers.get("content-length", "0").strip() or "0"
    if not length_text.isdigit():
        raise BadRequest("bad Content-Length")
    length = int(length_text)
    if length > MAX_BODY_BYTES:
        raise BadRequest("request body too large")
    if not length:
        return b""
    await reserve(length)
    return await reader.readexactly(length)


async def _write(writer: asyncio.StreamWriter, data: bytes) -> bool:
    """Write an answer; False (and the connection aborted) when the client does not take it in time."""
    writer.write(data)
    try:
        async with asyncio.timeout(WRITE_TIMEOUT_S):
            await writer.drain()
    except TimeoutError:
        writer.transport.abort()
        return False
    return True


def _response(status: int, payload: Any, keep_alive: bool) -> bytes:
    body = b"" if payload is None else json.dumps(payload).encode()
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    head = [
        f"HTTP/1.1 {status} {reason}",
        f"Content-Type: {CONTENT_TYPE}",
        f"Content-Length: {len(body)}",
        "Connection: keep-alive" if keep_alive else "Connection: close",
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


class HttpServer:
    def __init__(self, handler: Handler, host: str, port: int) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.bodies = BodyBudget(MAX_BODIES_BYTES)

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=MAX_HEADER_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        held = [0]  # body bytes this connection holds of the budget

        async def reserve(nbytes: int) -> None:
            await self.bodies.take(nbytes)
            held[0] += nbytes

        def let_go() -> None:
            if held[0]:
                self.bodies.give(held[0])
                held[0] = 0

        try:
            while True:
                try:
                    async with asyncio.timeout(IDLE_TIMEOUT_S):
                        try:
                            head = await reader.readuntil(b"\r\n\r\n")
                        except asyncio.LimitOverrunError:
                            message = {"error_code": 431, "message": "Request headers too large"}
                            await _write(writer, _response(431, message, False))
                            return
                        method, target, version, headers = self._parse_head(head)
                        body = await _read_body(reader, headers, reserve)
                except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
                    return
                except (BadRequest, asyncio.LimitOverrunError) as e:
                    await _write(writer, _response(400, {"error_code": 400, "message": f"Bad request: {e}"}, False))
                    return
                connection = headers.get("connection", "").lower()
                keep_alive = (version == "HTTP/1.1" and connection != "close") or connection == "keep-alive"
                url = urlsplit(target)
                query = dict(parse_qsl(url.query, keep_blank_values=True))
                try:
                    status, payload = await self.handler(method, url.path or "/", query, headers, body)
                except Exception as e:  # answered, logged, and the server goes on
                    log.exception("HTTP %s %s failed", method, target)
                    status, payload = 500, {"error_code": 500, "message": f"Internal server error: {e}"}
                del body
                let_go()
                if not await _write(writer, _response(status, payload, keep_alive)) or not keep_alive:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        except asyncio.CancelledError:
            writer.transport.abort()  # stopping: what is unsent is dropped
            return
        finally:
            let_go()
            self._connections.discard(task)
            writer.close()
            try:
                async with asyncio.timeout(WRITE_TIMEOUT_S):
                    await writer.wait_closed()
            except TimeoutError:
                writer.transport.abort()  # the client never took the end of what it was sent
            except Exception:
                pass

    @staticmethod
    def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
        try:
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = lines[0].split(" ")
        except ValueError:
            raise BadRequest("malformed request line") from None
        if not version.startswith("HTTP/1."):
            raise BadRequest(f"unsupported protocol {version}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep:
                raise BadRequest("malformed header line")
            headers[name.strip().lower()] = value.strip()
        return method.upper(), target, version, headers
