"""Random and mutated frames thrown at a SASL listener before authentication: no handler other than ApiVersions,
SaslHandshake and SaslAuthenticate is ever reached, the broker never crashes, and an honest client is served
after every case."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.broker._wire import Wire
from tests.integration.security.conftest import PLAIN_JAAS

import rill.testing
from rill.api.registry import ApiHandler
from rill.protocol import ApiKey, encode_request

pytestmark = pytest.mark.timeout(300)
ALLOWED = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}

SEEDS = [
    encode_request(ApiKey.API_VERSIONS, 3, 1, "fz", {"client_software_name": "f", "client_software_version": "1"}),
    encode_request(ApiKey.SASL_HANDSHAKE, 1, 2, "fz", {"mechanism": "PLAIN"}),
    encode_request(ApiKey.SASL_HANDSHAKE, 0, 3, "fz", {"mechanism": "SCRAM-SHA-256"}),
    encode_request(ApiKey.SASL_AUTHENTICATE, 2, 4, "fz", {"auth_bytes": b"\0alice\0alice-secret"}),
    encode_request(ApiKey.SASL_AUTHENTICATE, 1, 5, "fz", {"auth_bytes": b"n,,n=alice,r=abcdefgh"}),
    encode_request(ApiKey.METADATA, 9, 6, "fz", {"topics": None, "allow_auto_topic_creation": True}),
    encode_request(
        ApiKey.CREATE_TOPICS, 5, 7, "fz", {"topics": [{"name": "fz", "num_partitions": 1, "replication_factor": 1}]}
    ),
]


@pytest.fixture(scope="module")
def watched() -> Iterator[tuple[rill.testing.TestBroker, list[int]]]:
    """A SASL broker whose handlers record every call of an API other than the three (there must be none)."""
    configs = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": "0",
    }
    reached: list[int] = []
    with rill.testing.broker(configs) as b:
        dispatcher = b.broker._server.handler._holder[0]
        dispatcher.handlers = dict(dispatcher.handlers)  # this broker's own copy: the registry is left alone
        for key, h in list(dispatcher.handlers.items()):
            if key in ALLOWED:
                continue

            def wrap(fn: Any, key: int = key) -> Any:
                async def recorded(ctx: Any, body: Any) -> Any:
                    if ctx.listener_name == "SASL_PLAINTEXT" and not ctx.security.authenticated:
                        reached.append(key)
                    return await fn(ctx, body)

                return recorded

            dispatcher.handlers[key] = ApiHandler(h.api_key, h.min_version, h.max_version, wrap(h.fn))
        yield b, reached


def _throw(address: str, frames: list[bytes]) -> None:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        try:
            for frame in frames:
                s.sendall(frame)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(3)
            while s.recv(65536):
                pass
        except OSError:  # reset, or not connected any more: the broker closed it
            pass


def _honest_client_served(b: rill.testing.TestBroker) -> None:
    w = Wire(b.listener_address("SASL_PLAINTEXT"))
    try:
        assert w.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        assert w.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-secret"})["error_code"] == 0
        assert w.call(ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})["brokers"]
    finally:
        w.close()


def _mutate(seed: bytes, flips: list[tuple[int, int]]) -> bytes:
    data = bytearray(seed)
    for pos, value in flips:
        data[4 + pos % max(1, len(data) - 4)] = value  # the size prefix stays: the body is what is fuzzed
    return bytes(data)


frames = st.one_of(
    st.builds(
        _mutate,
        st.sampled_from(SEEDS),
        st.lists(st.tuples(st.integers(0, 500), st.integers(0, 255)), min_size=1, max_size=6),
    ),
    st.binary(min_size=0, max_size=300).map(lambda b: struct.pack(">i", len(b)) + b),
    st.tuples(st.integers(0, 80), st.integers(0, 15), st.binary(max_size=120)).map(
        lambda t: (lambda body: struct.pack(">i", len(body)) + body)(struct.pack(">hhi", t[0], t[1], 1) + t[2])
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.lists(frames, min_size=1, max_size=4))
def test_nothing_unauthenticated_reaches_a_handler(
    watched: tuple[rill.testing.TestBroker, list[int]], case: list[bytes]
) -> None:
    b, reached = watched
    _throw(b.listener_address("SASL_PLAINTEXT"), case)
    assert reached == []


def test_the_broker_still_serves_after_the_fuzzing(watched: tuple[rill.testing.TestBroker, list[int]]) -> None:
    b, reached = watched
    for seed in SEEDS:
        _throw(b.listener_address("SASL_PLAINTEXT"), [seed, seed])
    _honest_client_served(b)
    assert reached == []
