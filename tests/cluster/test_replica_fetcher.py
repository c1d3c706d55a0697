"""The follower's fetcher against its leader, on a real cluster: it pauses on a partition the leader refuses
instead of asking again at once, truncates to the leader's end when its own log runs past it, starts over at the
leader's log start when its log ends below it, and leaves no leader epoch behind that its log does not hold.

The brokers' inter-broker requests go through proxies in the test (``interceptors=True``): a rewritten request
makes the leader refuse a partition, a rewritten OffsetForLeaderEpoch answer leaves a follower's log longer than
its leader's, and held fetches keep a follower from copying chosen records.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition as KafkaTopicPartition
from tests.cluster._helpers import admin
from tests.cluster._raw import connect, create_assigned, list_latest, produce, state, wait_isr

from rill.log.checkpoints import read_epoch_checkpoint
from rill.protocol import ApiKey
from rill.testing.cluster import TestCluster, cluster
from rill.testing.interceptor import Intercepted

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

BACKOFF_MS = 200  # the test cluster's replica.fetch.backoff.ms


@pytest.fixture(scope="module")
def c() -> Iterator[TestCluster]:
    with cluster(3, interceptors=True, replica_lag_time_max_ms=30000) as running:
        yield running


def _names(topic: str) -> Any:
    def has(request: Intercepted) -> bool:
        return any(t["topic"] == topic for t in request.body["topics"])

    return has


def _kill_leader_after_records_only_it_holds(
    c: TestCluster, topic: str, leader: int, follower: int, count: int
) -> None:
    """``count`` records both replicas hold, then ``count`` more the follower never copies (its fetches held);
    then the leader is killed and the follower's fetches let go."""
    with connect(c, leader) as conn:
        assert produce(conn, topic, count, acks=-1) == (0, 0)
        # the follower's next fetch, whatever it names (an incremental fetch names only what changed)
        held = c.interceptor(leader).hold(ApiKey.FETCH, source=follower)
        held.wait()
        assert produce(conn, topic, count, acks=1) == (0, count)
    c.kill(leader)
    held.release()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.timing
def test_a_refused_partition_is_fetched_again_after_the_backoff_not_in_a_loop(c: TestCluster) -> None:
    """The leader answers a follower's fetch of a partition with an error at once (here UNKNOWN_LEADER_EPOCH: the
    follower's fetches are rewritten to name the next epoch, as when a follower hears of an election before its
    leader). Kafka's fetcher delays such a partition by replica.fetch.backoff.ms; without that the follower
    sends fetch after fetch as fast as the leader answers."""
    create_assigned(c, "spin", [0, 1])
    wait_isr(c, "spin", {0, 1})
    epoch = int(state(c, "spin")["leader_epoch"])

    def next_epoch(body: dict[str, Any]) -> dict[str, Any]:
        for t in body["topics"]:
            if t["topic"] == "spin":
                for p in t["partitions"]:
                    p["current_leader_epoch"] = epoch + 1
        return body

    proxy = c.interceptor(0)
    rule = proxy.rewrite_request(ApiKey.FETCH, next_epoch, source=1, predicate=_names("spin"))
    try:
        # the follower's incremental fetches name a partition again once its fetch offset moves
        with connect(c, 0) as conn:
            assert produce(conn, "spin", 1) == (0, 0)
        rule.wait()
        window = 3.0
        before, cpu_before = proxy.count(ApiKey.FETCH, source=1), _cpu_seconds(c.pid(1))
        time.sleep(window)
        fetches, cpu = proxy.count(ApiKey.FETCH, source=1) - before, _cpu_seconds(c.pid(1)) - cpu_before
    finally:
        rule.remove()
    print(f"fetches from broker 1 in {window:g} s: {fetches}; its CPU time: {cpu:.2f} s")
    assert fetches <= 2 * window / (BACKOFF_MS / 1000) + 5, f"{fetches} fetches in {window:g} s"
    wait_isr(c, "spin", {0, 1})


def test_a_follower_whose_log_runs_past_the_leaders_truncates_to_the_leaders_end(c: TestCluster) -> None:
    """Broker 2 led and wrote records broker 0 never copied; broker 0 leads now, and broker 2's truncation is
    given an answer that keeps them (the OffsetForLeaderEpoch response is rewritten to end its epoch at 2's log
    end). Its fetch from past the leader's end is answered OFFSET_OUT_OF_RANGE, and, as Kafka's follower does,
    it asks the leader's end (ListOffsets as a replica) and truncates there, then follows again."""
    create_assigned(c, "oor", [2, 0], **{"unclean.leader.election.enable": "true"})
    wait_isr(c, "oor", {0, 2})
    _kill_leader_after_records_only_it_holds(c, "oor", leader=2, follower=0, count=3)  # broker 2 alone held 3..5
    c.wait_for(lambda: state(c, "oor")["leader"] == 0, 30, "broker 0 leading")

    def end_at_six(body: dict[str, Any]) -> dict[str, Any]:
        for t in body["topics"]:
            if t["topic"] == "oor":
                for p in t["partitions"]:
                    p.update(leader_epoch=0, end_offset=6)
        return body

    c.interceptor(0).rewrite_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, end_at_six, source=2, predicate=_names("oor"))
    try:
        c.start(2)
        wait_isr(c, "oor", {0, 2}, timeout=30)
    finally:
        c.interceptor(0).clear()
    with connect(c, 0) as conn:
        assert produce(conn, "oor", 1, acks=-1) == (0, 3)
        assert list_latest(conn, "oor") == (0, 4)
    assert "to the leader's log end 3" in c.broker(2).log_tail(2000)


def test_a_follower_below_the_leaders_log_start_starts_over_there(c: TestCluster) -> None:
    create_assigned(c, "behind", [1, 0])
    wait_isr(c, "behind", {0, 1})
    c.kill(0)
    wait_isr(c, "behind", {1})
    with connect(c, 1) as conn:
        assert produce(conn, "behind", 5, acks=-1) == (0, 0)
    client = admin(c)  # referenced until its futures are done
    for f in client.delete_records([KafkaTopicPartition("behind", 0, 5)], request_timeout=30).values():
        f.result(30)
    c.start(0)
    wait_isr(c, "behind", {0, 1})
    assert "starting again at the leader's log start 5" in c.broker(0).log_tail(2000)


def _epochs(c: TestCluster, broker: int, topic: str) -> list[tuple[int, int]]:
    return read_epoch_checkpoint(c.data_dir / f"broker-{broker}" / "logs" / f"{topic}-0" / "leader-epoch-checkpoint")


def test_an_epoch_the_follower_led_without_records_leaves_its_cache(c: TestCluster) -> None:
    """Broker 2 is elected at epoch 1 with its log ending at 5 and writes nothing; broker 1, which has epoch 0
    records up to 10, is elected unclean after it while broker 2 is paused. Broker 2, back as follower (the same
    process: a restart would rebuild its cache from its log), truncates nothing (the leader's epoch 0 ends past
    its log end) but must drop its epoch 1 entry, or its cache would claim the epoch 0 records it fetches next for
    epoch 1 (Kafka truncates the cache even when the log truncation is a no-op)."""
    create_assigned(c, "epochs", [1, 2], **{"unclean.leader.election.enable": "true"})
    wait_isr(c, "epochs", {1, 2})
    _kill_leader_after_records_only_it_holds(c, "epochs", leader=1, follower=2, count=5)  # broker 1 alone holds 5..9
    c.wait_for(lambda: state(c, "epochs")["leader"] == 2, 30, "broker 2 leading")
    c.wait_for(lambda: _epochs(c, 2, "epochs") == [(0, 0), (1, 5)], 10, "broker 2's epoch 1 from offset 5")
    # Broker 1 comes back but cannot truncate to broker 2 (which would cut its records 5..9).
    asked = c.interceptor(2).hold(ApiKey.OFFSET_FOR_LEADER_EPOCH, source=1, predicate=_names("epochs"))
    try:
        c.start(1)
        asked.wait()
        c.pause(2)  # its session expires: no live ISR member, so broker 1 is elected unclean
        try:
            c.wait_for(lambda: state(c, "epochs")["leader"] == 1, 30, "broker 1 elected unclean")
            with connect(c, 1) as conn:  # and leading in its own view, before broker 2's answer reaches it (as a
                # follower of broker 2 still, it would rightly truncate to 5 on that answer)
                c.wait_for(lambda: list_latest(conn, "epochs")[0] == 0, 30, "broker 1 leading")
        finally:
            c.resume(2)
    finally:
        asked.release()
    wait_isr(c, "epochs", {1, 2})
    with connect(c, 1) as conn:
        assert produce(conn, "epochs", 1, acks=-1) == (0, 10)
    leader = _epochs(c, 1, "epochs")
    assert leader[0] == (0, 0) and leader[-1][1] == 10, leader
    assert _epochs(c, 2, "epochs") == leader
