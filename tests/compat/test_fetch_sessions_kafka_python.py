"""kafka-python's consumer uses incremental fetch sessions (KIP-227): against Rill it gets a session, goes on
with incremental fetches, reads every record, and recovers when its session is evicted."""

from __future__ import annotations

import re
import socket
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from tests.integration.broker._wire import Wire

import rill.testing
from rill.api.fetch_session import FetchSessionCache
from rill.protocol import ApiKey

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 4


def _cache(b: rill.testing.TestBroker) -> FetchSessionCache:
    cache = b.broker.services.fetch_sessions
    assert isinstance(cache, FetchSessionCache)
    return cache


def _produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    for i in range(start, start + n):
        producer.send(topic, value=str(i).encode(), partition=i % PARTITIONS)
    producer.flush(60)
    producer.close()


def _consume(consumer: KafkaConsumer, want: int, got: dict[int, list[int]]) -> None:
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < want and time.monotonic() < deadline:
        for tp, msgs in consumer.poll(timeout_ms=500, max_records=1000).items():
            got.setdefault(tp.partition, []).extend(int(m.value) for m in msgs)


def _consumer(bootstrap: str, topic: str) -> KafkaConsumer:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100,
                             max_partition_fetch_bytes=4096)  # fmt: skip
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    return consumer


def _check(got: dict[int, list[int]], n: int) -> None:
    for p in range(PARTITIONS):
        assert got.get(p, []) == list(range(p, n, PARTITIONS))  # every record, once, in order


@pytest.fixture
def broker(request: Any) -> Iterator[rill.testing.TestBroker]:
    with rill.testing.broker(num_partitions=PARTITIONS, **getattr(request, "param", {})) as b:
        yield b


def test_kafka_python_reads_everything_through_incremental_fetches(broker: rill.testing.TestBroker) -> None:
    bootstrap = broker.bootstrap_servers
    _produce(bootstrap, "kp-sessions", 0, 400)
    consumer = _consumer(bootstrap, "kp-sessions")
    got: dict[int, list[int]] = {}
    _consume(consumer, 400, got)
    for wave in range(1, 11):  # records arriving while the session is open, a few partitions at a time
        _produce(bootstrap, "kp-sessions", 400 * wave, 400)
        _consume(consumer, 400 * (wave + 1), got)
    cache = _cache(broker)
    sessions = list(cache._sessions.values())
    consumer.close()
    _check(got, 4400)
    assert len(sessions) == 1 and len(sessions[0].partitions) == PARTITIONS
    assert sessions[0].epoch > 10  # one full fetch, then incremental ones


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _gauges(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^kafka_server_fetchsessioncache_(\w+) ([0-9.e+]+)$", text, re.M)}  # fmt: skip


METRICS_PORT = _free_port()


@pytest.mark.parametrize("broker", [{"max_incremental_fetch_session_cache_slots": 1, "metrics_port": METRICS_PORT}],
                         indirect=True)  # fmt: skip
def test_kafka_python_recovers_when_its_session_is_evicted(broker: rill.testing.TestBroker) -> None:
    """A follower's session takes the only slot: kafka-python's next incremental fetch is answered
    FETCH_SESSION_ID_NOT_FOUND, it falls back to full fetches (now without a session) and misses nothing."""
    bootstrap = broker.bootstrap_servers
    _produce(bootstrap, "kp-evicted", 0, 200)
    consumer = _consumer(bootstrap, "kp-evicted")
    got: dict[int, list[int]] = {}
    _consume(consumer, 200, got)
    cache = _cache(broker)
    (theirs,) = cache._sessions
    w = Wire(bootstrap)
    body = {"replica_id": 7, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1000, "isolation_level": 0,
            "session_id": 0, "session_epoch": 0, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "kp-evicted", "partitions": [{"partition": 0, "current_leader_epoch": -1,
                        "fetch_offset": 0, "log_start_offset": -1, "partition_max_bytes": 100}]}]}  # fmt: skip
    follower = w.call(ApiKey.FETCH, 12, body)["session_id"]
    w.close()
    assert follower and cache.get(theirs) is None and cache.evictions == 1
    _produce(bootstrap, "kp-evicted", 200, 200)
    _consume(consumer, 400, got)
    consumer.close()
    _check(got, 400)
    assert list(cache._sessions) == [follower]  # the consumer went on without a session
    assert _gauges(METRICS_PORT) == {"numincrementalfetchsessions": 1, "numincrementalfetchpartitionscached": 1,
                                     "incrementalfetchsessionevictions_total": 1}  # fmt: skip
