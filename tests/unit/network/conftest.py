"""A toy request handler and helpers for driving a real SocketServer over 127.0.0.1 sockets."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from rill.common import FileRegion
from rill.network import ConnectionInfo, ResponseChunk, SocketServer
from rill.network.event_loop import loop_factory
from rill.network.handler import DeferredResponse


@dataclass(frozen=True, slots=True)
class Listener:
    listener_name: str
    host: str
    port: int


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class ToyHandler:
    """Commands (frame payloads):

    ``echo:<x>``          -> frame(``<x>``)
    ``sleep:<sec>:<x>``   -> frame(``<x>``) after sleeping
    ``none``              -> no response
    ``boom``              -> raises
    ``file:<i>``          -> frame header + the i-th registered FileRegion
    ``parts:<x>``         -> frame(``<x>``) written as several chunks
    ``defer:<sec>:<x>``   -> a deferred answer: frame(``<x>``) after sleeping (``release:<x>`` ends it at once)
    ``hold:<x>``          -> a deferred answer: frame(``<x>``) once ``release:<x>`` is handled (``<x>`` ends
                             before a ``#``: what follows pads the frame)
    ``fail:<x>``          -> raises (as ``boom``), and may overlap
    ``throttle:<ms>:<x>`` -> frame(``<x>``), the connection to be muted for ``<ms>`` after it (a client over its
                             quota), and may overlap

    ``defer:``, ``hold:``, ``release:``, ``fail:``, ``throttle:`` and ``ov:`` frames may overlap deferred answers
    (``ov:<x>`` echoes ``<x>``).
    """

    def __init__(self) -> None:
        self.regions: list[FileRegion] = []
        self.closed: list[ConnectionInfo] = []
        self.seen: list[bytes] = []
        self.writable: list[bool] = []  # per frame: could the handler patch it in place
        self.held: dict[bytes, asyncio.Future[None]] = {}
        self.deferred: list[asyncio.Future[Sequence[ResponseChunk]]] = []  # the tasks of deferred answers

    async def handle(self, conn: ConnectionInfo, data: memoryview) -> Sequence[ResponseChunk] | DeferredResponse | None:
        payload = bytes(data)
        self.seen.append(payload)
        self.writable.append(not data.readonly)
        if payload.startswith(b"echo:"):
            return [frame(payload[5:])]
        if payload.startswith(b"sleep:"):
            _, secs, rest = payload.split(b":", 2)
            await asyncio.sleep(float(secs))
            return [frame(rest)]
        if payload == b"none":
            return None
        if payload == b"boom":
            raise RuntimeError("toy handler failure")
        if payload.startswith(b"file:"):
            region = self.regions[int(payload[5:])]
            return [struct.pack(">i", region.length), region]
        if payload.startswith(b"defer:"):
            _, secs, rest = payload.split(b":", 2)
            return self._defer(self._later(float(secs), rest))
        if payload.startswith(b"hold:"):
            rest = payload[5:].split(b"#", 1)[0]
            held = self.held[rest] = asyncio.get_running_loop().create_future()
            return self._defer(self._after(held, rest))
        if payload.startswith(b"release:"):
            held = self.held.pop(payload[8:])
            held.set_result(None)
            return [frame(b"released")]
        if payload.startswith(b"ov:"):
            return [frame(payload[3:])]
        if payload.startswith(b"fail:"):
            raise RuntimeError("toy handler failure")
        if payload.startswith(b"throttle:"):
            _, ms, rest = payload.split(b":", 2)
            conn.throttle.mute_ms = int(ms)
            return [frame(rest)]
        if payload.startswith(b"parts:"):
            body = payload[6:]
            return [struct.pack(">i", len(body)), body[:1], bytearray(body[1:3]), memoryview(body[3:])]
        return [frame(b"?" + payload)]

    def _defer(self, answer: Coroutine[Any, Any, Sequence[ResponseChunk]]) -> DeferredResponse:
        task = asyncio.ensure_future(answer)
        self.deferred.append(task)
        return DeferredResponse(task)

    @staticmethod
    async def _later(secs: float, rest: bytes) -> Sequence[ResponseChunk]:
        await asyncio.sleep(secs)
        return [frame(rest)]

    @staticmethod
    async def _after(held: asyncio.Future[None], rest: bytes) -> Sequence[ResponseChunk]:
        await held
        if rest == b"boom":
            raise RuntimeError("toy deferred failure")
        return [frame(rest)]

    def may_overlap(self, conn: ConnectionInfo, data: memoryview) -> bool:
        return bytes(data[:3]) == b"ov:" or bytes(data).startswith(
            (b"defer:", b"hold:", b"release:", b"fail:", b"throttle:")
        )

    def connection_closed(self, conn: ConnectionInfo) -> None:
        self.closed.append(conn)


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


ServerTest = Callable[[SocketServer, ToyHandler], Awaitable[None]]


@pytest.fixture(params=["uvloop", "asyncio"])
def run_server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Run ``body(server, handler)`` against a started SocketServer on 127.0.0.1:0, on both loops."""
    if request.param == "asyncio":
        monkeypatch.setenv("RILL_EVENT_LOOP", "asyncio")
    else:
        monkeypatch.delenv("RILL_EVENT_LOOP", raising=False)

    def runner(body: ServerTest, timeout: float = 30.0, **kwargs: Any) -> None:
        async def main() -> None:
            handler = ToyHandler()
            server = SocketServer(handler, "127.0.0.1", 0, **kwargs)
            await server.start()
            try:
                await asyncio.wait_for(body(server, handler), timeout)
            finally:
                await server.stop(timeout=5.0)

        with asyncio.Runner(loop_factory=loop_factory()) as r:
            r.run(main())

    return runner
