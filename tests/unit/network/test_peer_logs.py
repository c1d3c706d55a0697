"""Log lines a client can cause at will are rate-limited per cause, over real sockets: one line at its
level, the rest at DEBUG, and the next line says how many were held back."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable

import pytest

from rill.network import SocketServer
from rill.network.connection_quotas import ConnectionQuotas

from .conftest import ToyHandler, frame, read_frame, wait_for

pytestmark = pytest.mark.timeout(60)

Runner = Callable[..., None]


async def connect(server: SocketServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = server.bound_address
    return await asyncio.open_connection(host, port)


def _lines(caplog: pytest.LogCaptureFixture, level: int, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and text in r.getMessage()]


def test_bad_frame_sizes_log_one_warning_per_interval(run_server: Runner, caplog: pytest.LogCaptureFixture) -> None:
    async def body(server: SocketServer, handler: ToyHandler) -> None:
        async def bad_client(size: int) -> None:
            r, w = await connect(server)
            w.write(struct.pack(">i", size) + b"x" * 8)
            assert await asyncio.wait_for(r.read(), 5.0) == b""
            w.close()

        for i in range(40):
            await bad_client(-1 - i)
        assert len(_lines(caplog, logging.WARNING, "socket.request.max.bytes")) == 1
        assert len(_lines(caplog, logging.DEBUG, "socket.request.max.bytes")) == 39
        server.peer_log.interval_s = 0.0  # the interval has passed
        await bad_client(2**31 - 1)
        warnings = _lines(caplog, logging.WARNING, "socket.request.max.bytes")
        assert len(warnings) == 2 and "and 39 more such lines" in warnings[1]
        # Other causes have limits of their own; clients with good frames are served.
        r, w = await connect(server)
        w.write(frame(b"echo:fine"))
        assert await read_frame(r) == b"fine"
        w.close()

    with caplog.at_level(logging.DEBUG, logger="rill.network"):
        run_server(body, max_request_bytes=1000)


def test_refused_and_failing_connections_log_one_line_per_interval(
    run_server: Runner, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(server: SocketServer, handler: ToyHandler) -> None:
        r, w = await connect(server)
        w.write(frame(b"echo:in"))
        assert await read_frame(r) == b"in"
        for _ in range(20):  # max.connections.per.ip 1: each is refused
            refused_r, refused_w = await connect(server)
            assert await asyncio.wait_for(refused_r.read(), 5.0) == b""
            refused_w.close()
        w.close()
        await wait_for(lambda: server.connection_count == 0)
        for _ in range(20):  # a request that makes the handler fail, repeated
            fr, fw = await connect(server)
            fw.write(frame(b"boom"))
            assert await asyncio.wait_for(fr.read(), 5.0) == b""
            fw.close()

    with caplog.at_level(logging.DEBUG, logger="rill.network"):
        run_server(body, quotas=ConnectionQuotas(max_per_ip=1))
    assert len(_lines(caplog, logging.INFO, "max.connections.per.ip is 1")) == 1
    assert len(_lines(caplog, logging.ERROR, "request handler failed")) == 1
    assert len(_lines(caplog, logging.DEBUG, "request handler failed")) == 19
