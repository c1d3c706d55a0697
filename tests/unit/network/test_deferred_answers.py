"""Deferred answers over real sockets: a request whose answer waits (an acks=all Produce waiting for its
followers) lets the connection handle its next request if the handler says it may overlap, and the answers still
go out in request order; any other request waits until the deferred answers are out; a failed deferred answer
closes the connection after the answers before it; a closed connection cancels what it deferred."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable

import pytest

from rill.network import SocketServer
from rill.network.connection import MAX_QUEUED_FRAMES

from .conftest import ToyHandler, frame, read_frame, wait_for

pytestmark = pytest.mark.timeout(60)

MIB = 1024 * 1024

Runner = Callable[..., None]


async def connect(server: SocketServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = server.bound_address
    return await asyncio.open_connection(host, port)


async def release(server: SocketServer, name: bytes) -> None:
    """End the deferred answer held under ``name``, from a connection of its own."""
    r2, w2 = await connect(server)
    w2.write(frame(b"release:" + name))
    assert await read_frame(r2) == b"released"
    w2.close()


def test_overlapping_requests_are_handled_while_an_answer_waits_and_answered_in_order(run_server: Runner) -> None:
    async def body(server: SocketServer, handler: ToyHandler) -> None:
        reader, writer = await connect(server)
        # The release comes on the same connection, after the request it releases: handled only if the
        # connection goes on while the first answer waits (a connection that did not would wait forever).
        writer.write(frame(b"hold:a") + frame(b"ov:b") + frame(b"release:a"))
        got = [await asyncio.wait_for(read_frame(reader), 5) for _ in range(3)]
        assert got == [b"a", b"b", b"released"]
        assert handler.seen == [b"hold:a", b"ov:b", b"release:a"]
        writer.close()

    run_server(body)


def test_a_request_that_may_not_overlap_waits_for_the_deferred_answers(run_server: Runner) -> None:
    async def body(server: SocketServer, handler: ToyHandler) -> None:
        reader, writer = await connect(server)
        writer.write(frame(b"hold:a") + frame(b"echo:x"))
        await wait_for(lambda: b"a" in handler.held)
        await asyncio.sleep(0.2)
        assert handler.seen == [b"hold:a"]  # echo:x is not handled before a's answer is out
        await release(server, b"a")
        assert [await asyncio.wait_for(read_frame(reader), 5) for _ in range(2)] == [b"a", b"x"]
        assert handler.seen[-1] == b"echo:x"
        writer.close()

    run_server(body)


def test_an_answer_ready_at_once_waits_for_the_deferred_ones_before_it(run_server: Runner) -> None:
    async def body(server: SocketServer, handler: ToyHandler) -> None:
        reader, writer = await connect(server)
        writer.write(frame(b"defer:0.3:slow") + frame(b"ov:fast") + frame(b"defer:0:quick"))
        got = [await asyncio.wait_for(read_frame(reader), 5) for _ in range(3)]
        assert got == [b"slow", b"fast", b"quick"]
        writer.close()

    run_server(body)


def test_a_failed_deferred_answer_closes_the_connection_after_the_answers_before_it(run_server: Runner) -> None:
    async def body(server: SocketServer, handler: ToyHandler) -> None:
        reader, writer = await connect(server)
        writer.write(frame(b"defer:0:first") + frame(b"hold:boom") + frame(b"ov:after"))
        assert await asyncio.wait_for(read_frame(reader), 5) == b"first"
        await wait_for(lambda: len(handler.seen) == 3)
        await release(server, b"boom")
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed: no answer after the failed one
        await wait_for(lambda: server.request_bytes == 0)

    run_server(body)


def test_a_closed_connection_cancels_its_deferred_answers_and_lets_go_of_their_bytes(run_server: Runner) -> None:
    async def body(server: SocketServer, handler: ToyHandler) -> None:
        _, writer = await connect(server)
        writer.write(frame(b"hold:a") + frame(b"hold:b"))
        await wait_for(lambda: len(handler.deferred) == 2)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # a reset: nobody is left to answer
        await wait_for(lambda: all(t.cancelled() for t in handler.deferred))
        await wait_for(lambda: server.request_bytes == 0)
        # The server still answers others.
        r2, w2 = await connect(server)
        w2.write(frame(b"echo:ok"))
        assert await read_frame(r2) == b"ok"
        w2.close()

    run_server(body)


def test_deferred_answers_count_in_the_connection_pipeline(run_server: Runner) -> None:
    async def body(server: SocketServer, handler: ToyHandler) -> None:
        reader, writer = await connect(server)
        count = MAX_QUEUED_FRAMES + 8
        writer.write(b"".join(frame(b"hold:%d" % i) for i in range(count)))
        await wait_for(lambda: len(handler.deferred) == MAX_QUEUED_FRAMES)
        await asyncio.sleep(0.2)
        assert len(handler.deferred) == MAX_QUEUED_FRAMES  # no more taken in while they wait
        r2, w2 = await connect(server)
        for i in range(count):
            await wait_for(lambda i=i: b"%d" % i in handler.held)  # type: ignore[misc]
            w2.write(frame(b"release:%d" % i))
            assert await read_frame(r2) == b"released"
        got = [await asyncio.wait_for(read_frame(reader), 5) for _ in range(count)]
        assert got == [b"%d" % i for i in range(count)]
        writer.close()
        w2.close()

    run_server(body)


def test_a_half_closed_connection_still_gets_its_deferred_answers(run_server: Runner) -> None:
    async def body(server: SocketServer, handler: ToyHandler) -> None:
        reader, writer = await connect(server)
        writer.write(frame(b"hold:a"))
        writer.write_eof()
        await wait_for(lambda: b"a" in handler.held)
        await release(server, b"a")
        assert await asyncio.wait_for(read_frame(reader), 5) == b"a"
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()

    run_server(body)


def test_a_deferred_request_lets_go_of_its_frame_and_its_bytes(run_server: Runner) -> None:
    """A request whose answer waits is handled (a Produce's records are appended): its frame is let go of, so a
    connection's deferred requests hold neither memory in proportion to their sizes nor the broker-wide
    queued.max.request.bytes (1 MiB here) against everyone, this connection included."""
    pad = b"#" + b"x" * (256 * 1024)

    async def body(server: SocketServer, handler: ToyHandler) -> None:
        reader, writer = await connect(server)
        count = 8  # 2 MiB of frames, twice the bound
        writer.write(b"".join(frame(b"hold:%d" % i + pad) for i in range(count)))
        await wait_for(lambda: len(handler.deferred) == count)
        assert server.request_bytes == 0
        pool = server.memory_pool
        assert pool.owned_bytes == pool.idle_bytes  # every frame's buffer is back in the pool
        r2, w2 = await connect(server)
        for i in range(count):
            w2.write(frame(b"release:%d" % i))
            assert await asyncio.wait_for(read_frame(r2), 5) == b"released"
        got = [await asyncio.wait_for(read_frame(reader), 5) for _ in range(count)]
        assert got == [b"%d" % i for i in range(count)]
        writer.close()
        w2.close()

    run_server(body, max_queued_bytes=MIB)


def test_nothing_after_a_failed_request_is_handled_while_the_answers_before_it_wait(run_server: Runner) -> None:
    async def body(server: SocketServer, handler: ToyHandler) -> None:
        reader, writer = await connect(server)
        writer.write(frame(b"hold:a") + frame(b"fail:x") + frame(b"ov:after"))
        await wait_for(lambda: b"fail:x" in handler.seen)
        await asyncio.sleep(0.2)  # ov:after has arrived: the connection closes after a's answer, unhandled
        assert b"ov:after" not in handler.seen
        await release(server, b"a")
        assert await asyncio.wait_for(read_frame(reader), 5) == b"a"
        assert await asyncio.wait_for(reader.read(), 5) == b""
        assert b"ov:after" not in handler.seen

    run_server(body)


def test_nothing_more_is_handled_once_a_deferred_answer_failed(run_server: Runner) -> None:
    async def body(server: SocketServer, handler: ToyHandler) -> None:
        reader, writer = await connect(server)
        writer.write(frame(b"hold:a") + frame(b"hold:boom"))
        await wait_for(lambda: len(handler.deferred) == 2)
        await release(server, b"boom")
        await wait_for(lambda: handler.deferred[1].done())
        writer.write(frame(b"ov:after"))  # the connection closes after a's answer: this one is not handled
        await asyncio.sleep(0.2)
        await release(server, b"a")
        assert await asyncio.wait_for(read_frame(reader), 5) == b"a"
        assert await asyncio.wait_for(reader.read(), 5) == b""
        assert b"ov:after" not in handler.seen

    run_server(body)


def test_a_throttled_answer_behind_deferred_ones_goes_out_before_the_mute(run_server: Runner) -> None:
    """KIP-219: a throttled answer is written at once, then the connection is muted; behind deferred answers,
    it is written in its turn, the mute after it, and nothing more is handled until the mute ends."""

    async def body(server: SocketServer, handler: ToyHandler) -> None:
        reader, writer = await connect(server)
        writer.write(frame(b"hold:a") + frame(b"throttle:5000:b") + frame(b"ov:c"))
        await wait_for(lambda: b"throttle:5000:b" in handler.seen)
        await asyncio.sleep(0.2)  # ov:c has arrived
        assert b"ov:c" not in handler.seen
        await release(server, b"a")
        assert await asyncio.wait_for(read_frame(reader), 5) == b"a"
        assert await asyncio.wait_for(read_frame(reader), 2.5) == b"b"  # not after the 5 s mute
        assert b"ov:c" not in handler.seen
        writer.close()

    run_server(body)
