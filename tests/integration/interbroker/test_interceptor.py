"""The request interceptor (``rill.testing.interceptor``) in front of a real broker: frames pass unchanged, and a
rule holds, cuts or rewrites exactly the requests it names (by API and by the broker id in the client id)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import rill.testing
from rill.client.connection import BrokerConnection, NetworkError
from rill.protocol import ApiKey
from rill.testing import TestBroker
from rill.testing.interceptor import RequestInterceptor

METADATA_BODY = {"topics": None, "allow_auto_topic_creation": False}


@pytest.fixture(scope="module")
def broker() -> Iterator[TestBroker]:
    with rill.testing.broker() as b:
        yield b


@pytest.fixture
def proxy(broker: TestBroker) -> Iterator[RequestInterceptor]:
    with RequestInterceptor(broker.host, broker.port) as p:
        yield p


def _connect(proxy: RequestInterceptor, client_id: str) -> BrokerConnection:
    return BrokerConnection("127.0.0.1", proxy.port, client_id=client_id, timeout_s=10.0)


def test_frames_pass_and_are_counted_by_sender(proxy: RequestInterceptor) -> None:
    with _connect(proxy, "broker-7-fetcher") as a, _connect(proxy, "someone") as b:
        for conn in (a, b, a):
            _, body = conn.request(ApiKey.METADATA, METADATA_BODY)
            assert body["brokers"]
    assert proxy.count(ApiKey.METADATA, source=7) == 2
    assert proxy.count(ApiKey.METADATA) == 3
    assert proxy.count(ApiKey.API_VERSIONS) == 2


def test_hold_keeps_the_named_senders_request_until_released(proxy: RequestInterceptor) -> None:
    rule = proxy.hold(ApiKey.METADATA, source=3)
    with _connect(proxy, "broker-3-fetcher") as held, _connect(proxy, "broker-4-fetcher") as other:
        done: list[Any] = []
        t = threading.Thread(target=lambda: done.append(held.request(ApiKey.METADATA, METADATA_BODY)))
        t.start()
        got = rule.wait()
        assert got.source == 3 and got.client_id == "broker-3-fetcher"
        assert other.request(ApiKey.METADATA, METADATA_BODY)[1]["brokers"]  # another sender is not held
        assert not done
        rule.release()
        t.join(10)
        assert done and done[0][1]["brokers"]
        assert held.request(ApiKey.METADATA, METADATA_BODY)[1]["brokers"]  # held once (times=1)


def test_fail_cuts_the_connection_and_a_new_one_goes_through(proxy: RequestInterceptor) -> None:
    proxy.fail(ApiKey.METADATA)
    with _connect(proxy, "broker-1-x") as conn, pytest.raises(NetworkError):
        conn.request(ApiKey.METADATA, METADATA_BODY)
    with _connect(proxy, "broker-1-x") as conn:
        assert conn.request(ApiKey.METADATA, METADATA_BODY)[1]["brokers"]


def test_rewrite_request_and_response(proxy: RequestInterceptor, broker: TestBroker) -> None:
    def ask_for_a_topic(body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "topics": [{"name": "no-such-topic", "topic_id": None}]}

    def rename_broker(body: dict[str, Any]) -> dict[str, Any]:
        for b in body["brokers"]:
            b["host"] = "rewritten"
        return body

    proxy.rewrite_request(ApiKey.METADATA, ask_for_a_topic, times=1)
    proxy.rewrite_response(ApiKey.METADATA, rename_broker, source=5)
    with _connect(proxy, "broker-5-x") as conn:
        _, body = conn.request(ApiKey.METADATA, METADATA_BODY)
        assert [t["name"] for t in body["topics"]] == ["no-such-topic"]
        assert [b["host"] for b in body["brokers"]] == ["127.0.0.1"]  # the first matching rule acted
        _, body = conn.request(ApiKey.METADATA, METADATA_BODY)
        assert body["topics"] == [] and [b["host"] for b in body["brokers"]] == ["rewritten"]
    with _connect(proxy, "broker-6-x") as conn:
        assert [b["host"] for b in conn.request(ApiKey.METADATA, METADATA_BODY)[1]["brokers"]] == [broker.host]
