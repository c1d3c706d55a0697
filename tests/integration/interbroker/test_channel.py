"""The broker-to-broker client against real Rill brokers: versions, round trips, pipelining, timeouts,
a broker killed mid-flight and the reconnect backoff."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

import rill.testing
from rill.cluster.channel import (
    BrokerConnection,
    DisconnectException,
    NetworkClientConfig,
    NetworkException,
    TimeoutException,
    UnsupportedVersionException,
)
from rill.cluster.network_client import NetworkClient
from rill.errors import ErrorCode
from rill.network.event_loop import run
from rill.protocol import MESSAGES, ApiKey, decode_request_header, encode_response
from rill.records.builder import build_batch
from rill.records.record import Record, decode_records_in
from rill.testing import TestBroker

NODE = 0
# Declared for the codec only (brokers coordinate through ZooKeeper), so no broker advertises them.
CLUSTER_APIS = {
    ApiKey.LEADER_AND_ISR,
    ApiKey.STOP_REPLICA,
    ApiKey.UPDATE_METADATA,
    ApiKey.CONTROLLED_SHUTDOWN,
    ApiKey.ALTER_PARTITION,
}


def _address(b: TestBroker) -> tuple[str, int]:
    return b.host, b.port


def _with_client(b: TestBroker, fn: Callable[[NetworkClient], Awaitable[None]], **config: Any) -> None:
    async def main() -> None:
        client = NetworkClient(NetworkClientConfig(**config), {NODE: _address(b)})
        try:
            await asyncio.wait_for(fn(client), 60)
        finally:
            await client.close()

    run(main())


async def _call(client: NetworkClient, api_key: int, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
    response = await client.request(NODE, api_key, body, **kw)
    assert response is not None
    return response.body


async def _create_topic(client: NetworkClient, name: str, partitions: int = 1) -> None:
    body = {
        "topics": [
            {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}
        ],
        "timeout_ms": 10000,
    }
    result = (await _call(client, ApiKey.CREATE_TOPICS, body))["topics"][0]
    assert (result["name"], result["error_code"]) == (name, 0)


def _fetch_body(topic: str, offset: int, max_wait_ms: int = 0) -> dict[str, Any]:
    return {
        "max_wait_ms": max_wait_ms,
        "min_bytes": 1,
        "topics": [
            {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}
        ],
        "forgotten_topics_data": [],
    }


@pytest.fixture
def broker() -> Iterator[TestBroker]:
    with rill.testing.broker() as b:
        yield b


def test_api_versions_decide_each_api_version(broker: TestBroker) -> None:
    async def main() -> None:
        conn = BrokerConnection(*_address(broker), node_id=NODE)
        await conn.connect()
        try:
            assert conn.ready
            for key in (ApiKey.FETCH, ApiKey.PRODUCE, ApiKey.METADATA, ApiKey.CREATE_TOPICS):
                broker_max = conn.api_versions[key][1]
                assert conn.version_for(key) == min(broker_max, MESSAGES[key].max_version)
            assert conn.version_for(ApiKey.FETCH, max_version=12) == 12
            # declared by the codec, but the broker has no handler: not advertised, so never sent
            assert not CLUSTER_APIS & set(conn.api_versions)
            with pytest.raises(UnsupportedVersionException, match="does not support LEADER_AND_ISR"):
                await conn.request(ApiKey.LEADER_AND_ISR, {})
            with pytest.raises(UnsupportedVersionException, match="outside"):
                await conn.request(ApiKey.FETCH, _fetch_body("t", 0), version=99)
            response = await conn.request(ApiKey.API_VERSIONS, {"client_software_name": "rill-test",
                                                                "client_software_version": "1.0"})  # fmt: skip
            assert response is not None and response.body["error_code"] == 0
            assert response.api_version == conn.version_for(ApiKey.API_VERSIONS)
        finally:
            await conn.close()
        assert conn.closed and conn.close_reason == "closed by the client"

    run(main())


def test_metadata_create_topics_produce_and_fetch(broker: TestBroker) -> None:
    async def main(client: NetworkClient) -> None:
        await _create_topic(client, "replicated")
        meta = await _call(
            client,
            ApiKey.METADATA,
            {"topics": [{"name": "replicated"}], "allow_auto_topic_creation": False},
            max_version=12,
        )
        assert meta["brokers"][0]["port"] == broker.port
        assert [(t["name"], len(t["partitions"])) for t in meta["topics"]] == [("replicated", 1)]

        values = [f"v{i}".encode() for i in range(5)]
        batch = build_batch([Record(0, 1_700_000_000_000 + i, None, v) for i, v in enumerate(values)])
        produce = {
            "acks": -1,
            "timeout_ms": 5000,
            "topic_data": [{"name": "replicated", "partition_data": [{"index": 0, "records": batch}]}],
        }
        response = await client.request(NODE, ApiKey.PRODUCE, produce, max_version=12)
        assert response is not None and response.api_version == 12
        part = response.body["responses"][0]["partition_responses"][0]
        assert (part["error_code"], part["base_offset"]) == (0, 0)

        fetched = await client.request(NODE, ApiKey.FETCH, _fetch_body("replicated", 0), max_version=12)
        assert fetched is not None and fetched.api_version == 12
        p = fetched.body["responses"][0]["partitions"][0]
        assert (p["error_code"], p["high_watermark"]) == (0, 5)
        assert isinstance(p["records"], memoryview | bytes)
        records = decode_records_in(p["records"])
        assert [(r.offset, r.value) for r in records] == list(enumerate(values))

        # acks=0 has no response; the connection goes on
        assert await client.request(NODE, ApiKey.PRODUCE, {**produce, "acks": 0}, max_version=12) is None
        meta = await _call(client, ApiKey.METADATA, {"topics": None, "allow_auto_topic_creation": False})
        assert "replicated" in {t["name"] for t in meta["topics"]}

    _with_client(broker, main)


def test_many_pipelined_requests_match_their_responses(broker: TestBroker) -> None:
    async def main(client: NetworkClient) -> None:
        conn = await client.ready(NODE)
        n = 400

        async def one(i: int) -> None:
            body = await _call(
                client,
                ApiKey.METADATA,
                {"topics": [{"name": f"missing-{i}"}], "allow_auto_topic_creation": False},
                max_version=12,
            )
            assert [(t["name"], t["error_code"]) for t in body["topics"]] == [
                (f"missing-{i}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            ]

        tasks = [asyncio.ensure_future(one(i)) for i in range(n)]
        await asyncio.sleep(0)  # every task has written its request; no response was read yet
        assert conn.in_flight_count == 64
        await asyncio.gather(*tasks)
        assert conn.in_flight_count == 0 and client.is_ready(NODE)

    _with_client(broker, main, max_in_flight_requests_per_connection=64)


def test_a_timed_out_request_fails_and_its_connection_closes(broker: TestBroker) -> None:
    async def main(client: NetworkClient) -> None:
        await _create_topic(client, "quiet")
        first = await client.ready(NODE)
        started = time.monotonic()
        parked = asyncio.ensure_future(
            client.request(NODE, ApiKey.FETCH, _fetch_body("quiet", 0, 10_000), max_version=12, timeout_ms=300)
        )
        behind = asyncio.ensure_future(_call(client, ApiKey.METADATA, {"topics": None}))
        with pytest.raises(TimeoutException, match=r"FETCH v12 .* no response within 300 ms") as timed_out:
            await parked
        assert timed_out.value.code == ErrorCode.REQUEST_TIMED_OUT
        assert 0.28 < time.monotonic() - started < 3
        # the request pipelined behind it fails at once, with the reason
        with pytest.raises(DisconnectException, match=r"closed after FETCH v12 .* timed out"):
            await behind
        assert first.closed and not client.is_ready(NODE)
        # the next request opens a new connection
        body = await _call(client, ApiKey.METADATA, {"topics": None})
        assert "quiet" in {t["name"] for t in body["topics"]}
        assert (await client.ready(NODE)) is not first

    _with_client(broker, main)


def test_a_killed_broker_fails_requests_in_flight_and_the_client_reconnects_after_restart() -> None:
    with rill.testing.broker(subprocess=True) as b:

        async def main(client: NetworkClient) -> None:
            await _create_topic(client, "doomed")
            conn = await client.ready(NODE)
            waiting = [
                asyncio.ensure_future(
                    client.request(NODE, ApiKey.FETCH, _fetch_body("doomed", 0, 20_000), max_version=12)
                )
                for _ in range(3)
            ]
            while conn.in_flight_count < 3:
                await asyncio.sleep(0.01)
            started = time.monotonic()
            await asyncio.to_thread(b.kill)
            for w in waiting:
                with pytest.raises(DisconnectException, match=r"FETCH v12 .* failed: connection (closed by|broken)"):
                    await w
            assert time.monotonic() - started < 5  # promptly: not after the 20 s the fetches would wait
            assert conn.closed
            with pytest.raises(NetworkException, match="cannot connect to node 0"):
                await client.request(NODE, ApiKey.METADATA, {"topics": None})
            await asyncio.to_thread(b.start)  # the same port and data
            body = await _call(client, ApiKey.METADATA, {"topics": None})
            assert "doomed" in {t["name"] for t in body["topics"]}
            assert client.is_ready(NODE) and (await client.ready(NODE)) is not conn

        _with_client(b, main, reconnect_backoff_ms=20, reconnect_backoff_max_ms=200)


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


def test_reconnect_backoff_doubles_per_failure_up_to_the_max() -> None:
    port = _closed_port()

    async def main() -> None:
        client = NetworkClient(
            NetworkClientConfig(reconnect_backoff_ms=100, reconnect_backoff_max_ms=400), {NODE: ("127.0.0.1", port)}
        )
        try:
            waits = []
            for _ in range(6):
                started = time.monotonic()
                with pytest.raises(NetworkException, match=r"Connection refused|Errno 111"):
                    await client.request(NODE, ApiKey.METADATA, {"topics": None})
                waits.append(time.monotonic() - started)
                assert client.connection_delay_ms(NODE) > 0
            # no wait before the first attempt; then 100, 200, 400 ms (+/-20%, capped at 400), then 400 ms
            assert waits[0] < 0.05
            for got, nominal in zip(waits[1:], (0.1, 0.2, 0.4, 0.4, 0.4), strict=True):
                assert min(nominal * 0.8, 0.4) - 0.01 <= got <= min(nominal * 1.2, 0.4) + 0.25, waits
        finally:
            await client.close()

    run(main())


def test_closing_the_client_ends_a_request_waiting_out_the_reconnect_backoff() -> None:
    port = _closed_port()

    async def main() -> None:
        async with NetworkClient(
            NetworkClientConfig(reconnect_backoff_ms=5000, reconnect_backoff_max_ms=5000), {NODE: ("127.0.0.1", port)}
        ) as client:
            with pytest.raises(NetworkException, match="cannot connect"):
                await client.request(NODE, ApiKey.METADATA, {"topics": None})
            waiting = asyncio.ensure_future(client.request(NODE, ApiKey.METADATA, {"topics": None}))
            await asyncio.sleep(0.05)
            assert not waiting.done()
        with pytest.raises(NetworkException, match="abandoned: the network client is closed"):
            await waiting

    run(main())


def test_a_broker_that_knows_an_older_api_versions_is_asked_again_at_its_version() -> None:
    """Kafka brokers answer an ApiVersions version they do not know with UNSUPPORTED_VERSION in the v0 body
    format; Rill's broker knows every version the codec does, so an older broker is played by a small server."""
    asked: list[int] = []

    async def older_broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        table = [
            {"api_key": ApiKey.API_VERSIONS, "min_version": 0, "max_version": 2},
            {"api_key": ApiKey.METADATA, "min_version": 0, "max_version": 8},
        ]
        while True:
            try:
                size = int.from_bytes(await reader.readexactly(4), "big")
            except asyncio.IncompleteReadError:
                break
            frame = await reader.readexactly(size)
            header, _ = decode_request_header(frame)
            asked.append(header.api_version)
            if header.api_version > 2:
                body = {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": table}
                writer.write(
                    b"".join(bytes(c) for c in encode_response(ApiKey.API_VERSIONS, 0, header.correlation_id, body))
                )
            else:
                body = {"error_code": 0, "api_keys": table, "throttle_time_ms": 0}
                writer.write(
                    b"".join(
                        bytes(c)
                        for c in encode_response(ApiKey.API_VERSIONS, header.api_version, header.correlation_id, body)
                    )
                )
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(older_broker, "127.0.0.1", 0)
        try:
            conn = BrokerConnection(*server.sockets[0].getsockname()[:2])
            await conn.connect()
            assert asked == [MESSAGES[ApiKey.API_VERSIONS].max_version, 2]
            assert conn.api_versions[ApiKey.METADATA] == (0, 8)
            assert conn.version_for(ApiKey.METADATA) == 8
            await conn.close()
        finally:
            server.close()
            await server.wait_closed()

    run(main())


def test_a_frame_answering_no_request_closes_the_connection_before_it_is_read() -> None:
    """A peer that sends a frame no request asked for (here declaring 1 GiB, then streaming bytes) is not read
    into memory: the connection closes at the frame's correlation id, as nothing in flight bounds its time."""
    streamed = [0]

    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        size = int.from_bytes(await reader.readexactly(4), "big")
        header, _ = decode_request_header(await reader.readexactly(size))
        table = [{"api_key": ApiKey.API_VERSIONS, "min_version": 0, "max_version": header.api_version}]
        body = {"error_code": 0, "api_keys": table, "throttle_time_ms": 0}
        chunks = encode_response(ApiKey.API_VERSIONS, header.api_version, header.correlation_id, body)
        writer.write(b"".join(bytes(c) for c in chunks))
        writer.write((1 << 30).to_bytes(4, "big") + (12345).to_bytes(4, "big"))
        try:
            for _ in range(256):  # up to 256 MiB, as fast as the client takes it
                writer.write(bytes(1 << 20))
                await writer.drain()
                streamed[0] += 1
        except ConnectionError:
            pass
        writer.transport.abort()

    async def main() -> None:
        server = await asyncio.start_server(peer, "127.0.0.1", 0)
        try:
            conn = BrokerConnection(*server.sockets[0].getsockname()[:2])
            await conn.connect()
            deadline = time.monotonic() + 10
            while not conn.closed:
                assert time.monotonic() < deadline and streamed[0] < 256, "the unasked frame was read on"
                await asyncio.sleep(0.01)
            assert "unknown correlation id 12345" in (conn.close_reason or "")
            assert streamed[0] < 64
            await conn.close()
        finally:
            server.close()
            await server.wait_closed()

    run(main())


def test_connection_setup_times_out_when_the_broker_never_answers() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel accepts the connection; nobody answers ApiVersions
    try:

        async def main() -> None:
            conn = BrokerConnection(*silent.getsockname(), NetworkClientConfig(socket_connection_setup_timeout_ms=300))
            started = time.monotonic()
            with pytest.raises(NetworkException, match="setup timed out after 300 ms"):
                await conn.connect()
            assert 0.28 < time.monotonic() - started < 3
            assert conn.closed

        run(main())
    finally:
        silent.close()


def test_close_fails_requests_in_flight_and_refuses_new_ones(broker: TestBroker) -> None:
    async def main() -> None:
        client = NetworkClient(NetworkClientConfig(), {NODE: _address(broker)})
        await _create_topic(client, "closing")
        parked = asyncio.ensure_future(
            client.request(NODE, ApiKey.FETCH, _fetch_body("closing", 0, 10_000), max_version=12)
        )
        await asyncio.sleep(0.05)
        await client.close()
        with pytest.raises(DisconnectException, match="closed by the client"):
            await parked
        with pytest.raises(NetworkException, match="client is closed"):
            await client.request(NODE, ApiKey.METADATA, {"topics": None})

    run(main())
