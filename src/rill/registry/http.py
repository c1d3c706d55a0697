"""A small HTTP/1.1 server on asyncio streams for the registry's JSON API.

Persistent connections (HTTP/1.1 keep-alive unless ``Connection: close``; HTTP/1.0 closes), bodies
by ``Content-Length`` or chunked transfer coding, bounded header and body sizes. Malformed requests
get a 400 and the connection is closed; the handler's exceptions never reach the client as a crash.
"""

from __future__ import annotations

import asyncio
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
IDLE_TIMEOUT_S = 120.0

# (method, path, query, headers (lower-case names), body) -> (status, JSON value)
Handler = Callable[[str, str, dict[str, str], dict[str, str], bytes], Awaitable[tuple[int, Any]]]


class BadRequest(Exception):
    pass


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
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
            if len(out) + size > MAX_BODY_BYTES:
                raise BadRequest("request body too large")
            out += await reader.readexactly(size)
            await reader.readexactly(2)
    length_text = headers.get("content-length", "0").strip() or "0"
    if not length_text.isdigit():
        raise BadRequest("bad Content-Length")
    length = int(length_text)
    if length > MAX_BODY_BYTES:
        raise BadRequest("request body too large")
    return await reader.readexactly(length) if length else b""


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
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_TIMEOUT_S)
                except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
                    return
                except asyncio.LimitOverrunError:
                    writer.write(_response(431, {"error_code": 431, "message": "Request headers too large"}, False))
                    await writer.drain()
                    return
                try:
                    method, target, version, headers = self._parse_head(head)
                    body = await _read_body(reader, headers)
                except (BadRequest, asyncio.LimitOverrunError) as e:
                    writer.write(_response(400, {"error_code": 400, "message": f"Bad request: {e}"}, False))
                    await writer.drain()
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
                writer.write(_response(status, payload, keep_alive))
                await writer.drain()
                if not keep_alive:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        except asyncio.CancelledError:
            return
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

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
