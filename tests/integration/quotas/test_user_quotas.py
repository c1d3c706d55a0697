"""User quotas follow the authenticated principal: a quota on user alice throttles alice's SASL connection and not
an anonymous client with the same client id; a request_percentage quota throttles on time spent handling."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer
from tests.integration.broker._wire import Wire
from tests.integration.quotas._quota_clients import alter_quotas

import rill.testing
from rill.protocol import ApiKey

pytestmark = pytest.mark.timeout(90)

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
    'user_alice="alice-secret";'
)


def _throttles(conf: dict[str, str], topic: str) -> tuple[list[float], int]:
    """The throttle times librdkafka reports to throttle_cb, and the largest in its statistics (ms)."""
    seen: list[float] = []
    stats_max = [0]

    def on_stats(text: str) -> None:
        for broker in json.loads(text)["brokers"].values():
            stats_max[0] = max(stats_max[0], int(broker.get("throttle", {}).get("max", 0)))

    p = Producer({**conf, "client.id": "shared", "linger.ms": 5, "statistics.interval.ms": 200,
                  "stats_cb": on_stats, "throttle_cb": lambda e: seen.append(e.throttle_time)})  # fmt: skip
    p.produce(topic, b"z" * 150_000)  # 50 kB more than a new group may send in its first 10 s
    p.flush(30)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and not (seen and stats_max[0]):
        p.poll(0.1)
    return seen, stats_max[0]


def test_a_user_quota_applies_to_the_authenticated_principal() -> None:
    configs = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": PLAIN_JAAS,
    }
    with rill.testing.broker(configs) as b:
        plain = b.listener_address("PLAINTEXT")
        sasl = b.listener_address("SASL_PLAINTEXT")
        alter_quotas(plain, {"user": "alice"}, {"producer_byte_rate": 10_000.0})
        alice = {"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                 "sasl.username": "alice", "sasl.password": "alice-secret"}  # fmt: skip
        assert _throttles({"bootstrap.servers": plain}, "t") == ([], 0)  # User:ANONYMOUS has no quota
        seen, stats_max = _throttles(alice, "t")
        assert max(seen) > 0  # the rest of its first 10 s, then 50 kB at 10 kB/s: 15 s
        assert 14_000 <= stats_max <= 16_000


def test_a_request_percentage_quota_throttles_on_handling_time(rill_broker) -> None:
    w = Wire(rill_broker.bootstrap_servers)
    alter_quotas(rill_broker.bootstrap_servers, {"client-id": "wire-test"}, {"request_percentage": 0.01})
    body = {"topics": [], "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False}  # fmt: skip
    throttles = []
    for _ in range(200):  # until the first throttle (each throttled response mutes the connection)
        throttles.append(w.call(ApiKey.METADATA, 9, body)["throttle_time_ms"])
        if throttles[-1]:
            break
    # 0.01% of a thread over the 10 s a new group's windows count is 10 microseconds of handling: a few
    # requests exceed it; the throttle is bounded by one window (quota.window.size.seconds)
    assert max(throttles) > 0
    assert max(throttles) <= 1000
    w.close()
