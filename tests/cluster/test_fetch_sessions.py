"""The followers' fetches go in incremental fetch sessions (KIP-227), on a real 3-broker cluster: after one full
fetch a follower names only the partitions whose fetch offset changed, every record is replicated (the high
watermark, held by the whole ISR, reaches every record produced), and a session the leader does not know
(FETCH_SESSION_ID_NOT_FOUND) or a wrong epoch (INVALID_FETCH_SESSION_EPOCH) sends the follower back to a full
fetch, from which it goes on. A leader neither reads nor answers the partitions of a session with nothing new
(the quiet ones), yet an idle follower stays in every ISR, and an append to a quiet partition wakes the waiting
fetch at once (the followers wait up to 2 s here, so a missed wake would hold an acks=all produce that long).

The follower's Fetch requests pass through the test's proxies (``interceptors=True``), which record them and,
for the error cases, rewrite one request's session fields.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from tests.cluster._helpers import create_topic

from rill.protocol import ApiKey
from rill.testing.cluster import CLUSTER_DEFAULTS, TestCluster, cluster
from rill.testing.interceptor import Intercepted, Rule

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "sessions"
PARTITIONS = 12
FETCH_WAIT_MS = 2000  # replica.fetch.wait.max.ms (a third of the test cluster's replica.lag.time.max.ms)


@pytest.fixture(scope="module")
def c() -> Iterator[TestCluster]:
    with cluster(3, interceptors=True, auto_leader_rebalance_enable="false",
                 replica_fetch_wait_max_ms=str(FETCH_WAIT_MS)) as running:  # fmt: skip
        create_topic(running, TOPIC, PARTITIONS, 3)
        running.wait_for(lambda: all(len(running.isr(TOPIC, p)) == 3 for p in range(PARTITIONS)), 60, "full ISRs")
        yield running


def _produce(c: TestCluster, n: int) -> None:
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "1", "linger.ms": 5})
    for i in range(n):
        producer.produce(TOPIC, str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def _high_watermarks(c: TestCluster) -> int:
    consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "hw"})
    try:
        return sum(consumer.get_watermark_offsets(KafkaTopicPartition(TOPIC, p), timeout=10)[1]
                   for p in range(PARTITIONS))  # fmt: skip
    finally:
        consumer.close()


def _replicated(c: TestCluster, total: int) -> None:
    """Every record produced is below its partition's high watermark, and every ISR is whole: each follower
    holds everything."""
    c.wait_for(lambda: _high_watermarks(c) == total, 60, f"high watermarks summing to {total}")
    assert all(len(c.isr(TOPIC, p)) == 3 for p in range(PARTITIONS))


def _watch(c: TestCluster, leader: int) -> Rule:
    return c.interceptor(leader).rewrite_request(ApiKey.FETCH, lambda body: body, times=None,
                                                 predicate=lambda r: r.source is not None)  # fmt: skip


def _named(r: Intercepted) -> int:
    return sum(len(t["partitions"]) for t in r.body["topics"])


def test_followers_fetch_incrementally_and_replicate_everything(c: TestCluster) -> None:
    leader = c.leader(TOPIC, 0)
    led = [p for p in range(PARTITIONS) if c.leader(TOPIC, p) == leader]
    rule = _watch(c, leader)
    total = _high_watermarks(c)
    for _ in range(5):
        _produce(c, 200)
        total += 200
    _replicated(c, total)
    rule.remove()
    fetches = [r for r in rule.matched if r.body["topics"] or r.body["session_epoch"] > 0]
    incremental = [r for r in fetches if r.body["session_id"] != 0 and r.body["session_epoch"] > 0]
    assert len(incremental) >= len(fetches) - 2 and incremental  # a full fetch at most at the start
    # a quiet partition is not named again: no incremental fetch names every partition the follower follows
    assert all(_named(r) < len(led) + 6 for r in incremental)  # (other topics' partitions: __consumer_offsets...)
    assert min(_named(r) for r in incremental) < len(led)


@pytest.mark.parametrize("field, value", [("session_id", 123_456), ("session_epoch", 99_999)])
def test_a_session_error_sends_the_follower_back_to_a_full_fetch(c: TestCluster, field: str, value: int) -> None:
    """One follower fetch names a session the leader does not have (or an epoch it does not expect): the
    leader answers FETCH_SESSION_ID_NOT_FOUND (INVALID_FETCH_SESSION_EPOCH), the follower's next fetch is a full
    one (epoch 0), and replication goes on."""
    leader = c.leader(TOPIC, 0)
    follower = next(b for b in c.isr(TOPIC, 0) if b != leader)
    incremental = c.interceptor(leader).hold(ApiKey.FETCH, source=follower,
                                             predicate=lambda r: r.body["session_epoch"] > 0)  # fmt: skip
    incremental.wait()

    def broken(body: dict[str, Any]) -> dict[str, Any]:
        return {**body, field: value}

    rewritten = c.interceptor(leader).rewrite_request(ApiKey.FETCH, broken, source=follower, times=1)
    full = c.interceptor(leader).rewrite_request(ApiKey.FETCH, lambda b: b, source=follower, times=1,
                                                 predicate=lambda r: r.body["session_epoch"] == 0)  # fmt: skip
    total = _high_watermarks(c)
    incremental.release()  # the held one goes on as it was; the next one is rewritten
    rewritten.wait()
    again = full.wait()
    assert again.body["topics"]  # a full fetch names every partition again
    _produce(c, 300)
    _replicated(c, total + 300)
    c.interceptor(leader).clear()


def _state_versions(c: TestCluster) -> dict[int, tuple[int, list[int]]]:
    """Each partition's state znode version (every ISR change writes it) and ISR."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=c.zookeeper.connect_string + c.chroot, timeout=5.0)
    zk.start(10)
    try:
        out = {}
        for p in range(PARTITIONS):
            data, stat = zk.get(f"/brokers/topics/{TOPIC}/partitions/{p}/state")
            out[p] = (stat.version, json.loads(data)["isr"])
        return out
    finally:
        zk.stop()
        zk.close()


def test_an_idle_follower_stays_in_every_isr(c: TestCluster) -> None:
    """Nothing is produced for twice replica.lag.time.max.ms: the leaders answer the followers' fetches of quiet
    partitions without reading them, but still record each follower as caught up, so no ISR changes."""
    start = _high_watermarks(c)  # the earlier tests' records, all replicated (each ends so)
    _produce(c, PARTITIONS)
    _replicated(c, start + PARTITIONS)  # not the high watermarks read now: with acks=1 they may still move
    before = _state_versions(c)
    assert all(len(isr) == 3 for _, isr in before.values())
    lag_s = int(CLUSTER_DEFAULTS["replica.lag.time.max.ms"]) / 1000
    time.sleep(2 * lag_s + 1)  # the leaders' ISR checks run every half lag time: four of them
    assert _state_versions(c) == before


def test_an_append_to_a_quiet_partition_wakes_the_followers_at_once(c: TestCluster) -> None:
    """One record at a time, acks=all, to each partition in turn while the others are quiet: each is acknowledged
    as soon as the followers fetched it, not when their fetches' wait (2 s) runs out."""
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all", "linger.ms": 0})
    producer.produce(TOPIC, b"warm", partition=0)
    assert producer.flush(30) == 0
    took = []
    for p in range(PARTITIONS):
        t0 = time.monotonic()
        producer.produce(TOPIC, b"x", partition=p)
        assert producer.flush(30) == 0
        took.append(time.monotonic() - t0)
    assert max(took) < FETCH_WAIT_MS / 2000, [round(t, 3) for t in took]
