"""Faults beyond a clean stop: the controller killed, a leader paused past its ZooKeeper session (a zombie that
comes back), under an idempotent acks=all producer."""

from __future__ import annotations

import time

import pytest
from tests.cluster._helpers import admin, create_topic
from tests.cluster.test_failover import PARTITIONS, SESSION_TIMEOUT_S, LoadProducer, _check_read_back, _wait_full_isr

from rill.testing.cluster import TestCluster

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(60)
def test_a_killed_broker_restarts_at_once(rill3: TestCluster) -> None:
    """Killed, a broker's ZooKeeper session (and its registration) lives on until the session timeout: a broker
    started again at once waits for it to expire, rather than taking it for another live broker of its id."""
    create_topic(rill3, "ft-restart", partitions=PARTITIONS)
    _wait_full_isr(rill3, ["ft-restart"])
    t0 = time.monotonic()
    rill3.restart(1, kill=True)
    print(f"broker 1 killed and started again in {time.monotonic() - t0:.1f} s")
    _wait_full_isr(rill3, ["ft-restart"])


@pytest.mark.timeout(120)
def test_controller_killed_another_takes_over(rill3: TestCluster) -> None:
    create_topic(rill3, "ft-ctl", partitions=PARTITIONS)
    _wait_full_isr(rill3, ["ft-ctl"])
    old = rill3.controller()
    t0 = time.monotonic()
    rill3.kill(old)
    try:
        rill3.wait_for(lambda: rill3.controller() not in (old, -1), SESSION_TIMEOUT_S + 5, "a new controller")
        took = time.monotonic() - t0
        print(f"controller {old} killed: broker {rill3.controller()} took over after {took:.2f} s")
        # the new controller moved leadership off the dead broker and serves topic creation
        rill3.wait_for(lambda: all(rill3.leader("ft-ctl", p) not in (old, -1) for p in range(PARTITIONS)), 10,
                       "leaders off the killed controller")  # fmt: skip
        create_topic(rill3, "ft-ctl-after", partitions=2, replication_factor=2)
        # Every broker learns of the topic from ZooKeeper: the one that created it first, the others soon after.
        rill3.wait_for(lambda: "ft-ctl-after" in admin(rill3).list_topics(timeout=10).topics, 10, "the new topic")
        md = admin(rill3).list_topics(timeout=10)
        assert md.controller_id == rill3.controller()
        assert all(p.leader not in (old, -1) for p in md.topics["ft-ctl-after"].partitions.values())
    finally:
        rill3.start(old)
    _wait_full_isr(rill3, ["ft-ctl"])
    assert rill3.controller() != old


@pytest.mark.timeout(120)
def test_controller_paused_past_its_session_is_fenced(rill3: TestCluster) -> None:
    """A paused controller (a zombie) comes back to find another controller: it rejoins as a plain broker, its
    replicas back in the ISR, and the new controller goes on electing leaders."""
    create_topic(rill3, "ft-zombie", partitions=PARTITIONS)
    _wait_full_isr(rill3, ["ft-zombie"])
    old = rill3.controller()
    rill3.pause(old)
    try:
        rill3.wait_for(lambda: rill3.controller() not in (old, -1), SESSION_TIMEOUT_S + 5, "a new controller")
    finally:
        rill3.resume(old)
    new = rill3.controller()
    _wait_full_isr(rill3, ["ft-zombie"])
    assert rill3.controller() == new
    victim = next(b for b in rill3.brokers if b not in (old, new))
    led = [p for p in range(PARTITIONS) if rill3.leader("ft-zombie", p) == victim]
    rill3.kill(victim)
    try:
        rill3.wait_for(lambda: all(rill3.leader("ft-zombie", p) not in (victim, -1) for p in range(PARTITIONS)),
                       SESSION_TIMEOUT_S + 5, f"leaders of {led} elected again")  # fmt: skip
    finally:
        rill3.start(victim)
    _wait_full_isr(rill3, ["ft-zombie"])


@pytest.mark.timeout(150)
def test_leader_paused_past_its_session_comes_back_as_a_follower(rill3: TestCluster) -> None:
    create_topic(rill3, "ft-pause", partitions=PARTITIONS)
    _wait_full_isr(rill3, ["ft-pause"])
    load = LoadProducer(rill3.bootstrap_servers, "ft-pause").start()
    try:
        time.sleep(1.0)
        victim = rill3.leader("ft-pause", 0)
        t0 = time.monotonic()
        rill3.pause(victim)
        try:
            rill3.wait_for(lambda: rill3.leader("ft-pause", 0) not in (victim, -1), 20, "a new leader")
            print(f"broker {victim} paused: new leader after {time.monotonic() - t0:.2f} s")
            time.sleep(2.0)
        finally:
            rill3.resume(victim)
        _wait_full_isr(rill3, ["ft-pause"])
        time.sleep(1.0)
    finally:
        load.stop()
    assert load.errors == []
    _check_read_back(rill3, load)


@pytest.mark.timeout(90)
@pytest.mark.rill_cluster_config(brokers=2)
def test_a_broker_stops_on_sigterm_when_zookeeper_is_gone(rill_cluster: TestCluster) -> None:
    """A controlled shutdown needs ZooKeeper; without it the broker gives up after controlled.shutdown.max.retries
    x controlled.shutdown.retry.backoff.ms (here 3 x 2 s) and stops anyway, as Kafka does, rather than hang."""
    create_topic(rill_cluster, "ft-nozk", partitions=2, replication_factor=2)
    rill_cluster.zookeeper.kill(0)
    for b in rill_cluster.brokers:
        t0 = time.monotonic()
        rill_cluster.broker(b).stop(timeout=30)  # raises when the broker had to be killed
        took = time.monotonic() - t0
        print(f"broker {b} stopped without ZooKeeper in {took:.1f} s")
        assert took < 15
