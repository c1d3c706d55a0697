"""Share groups across broker failures on a three-broker cluster, with confluent-kafka ShareConsumers: the share
partitions' state lives with the share coordinator in ``__share_group_state`` (replicated), not on the
share-partition leader. A data partition's leader SIGKILLed: its new leader reads the state, so no accepted
record is delivered again and every other record is. The share coordinator SIGKILLed: acknowledgements made
while it moves are kept by the next one, and a new data leader reads them from there. And one broker that led
both, SIGKILLed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.share._share import produce, share_consumer, warm_up

from rill.coordinator.group.group_metadata_manager import partition_for
from rill.coordinator.share.share_coordinator_shard import SharePartitionKey
from rill.metadata.store import SHARE_GROUP_STATE_TOPIC
from rill.testing.cluster import TestCluster, cluster

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

STATE_PARTITIONS = 6
OVERRIDES = {
    "group.share.heartbeat.interval.ms": "500",
    "share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS),
}


@pytest.fixture
def c() -> Iterator[TestCluster]:
    with cluster(brokers=3, overrides=OVERRIDES) as c:
        yield c


def _topic_id(admin: AdminClient, topic: str) -> uuid.UUID:
    from confluent_kafka import TopicCollection

    tid = admin.describe_topics(TopicCollection([topic]))[topic].result(30).topic_id
    high, low = tid.get_most_significant_bits(), tid.get_least_significant_bits()
    return uuid.UUID(bytes=high.to_bytes(8, "big", signed=True) + low.to_bytes(8, "big", signed=True))


def _state_partition(group: str, topic_id: uuid.UUID) -> int:
    return partition_for(SharePartitionKey(group, topic_id, 0).coordinator_key(), STATE_PARTITIONS)


def _setup(c: TestCluster, *, together: bool = False) -> tuple[str, int, int]:
    """Topic ``t`` (one partition, three replicas) and a share group whose share coordinator is not the
    partition's leader (``together``: is): (group, data leader, coordinator)."""
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    admin.create_topics([NewTopic("t", 1, 3)])["t"].result(30)
    c.wait_for(lambda: c.leader("t", 0) >= 0 and len(c.isr("t", 0)) == 3, 60, "t-0 led with three in sync")
    first = share_consumer(c.bootstrap_servers, "starter", ["t"])  # makes __share_group_state
    try:
        warm_up(c.bootstrap_servers, first, "t", 1, timeout=90)
    finally:
        first.close()
    topic_id = _topic_id(admin, "t")
    leader = c.leader("t", 0)
    for i in range(100):
        group = f"sg{i}"
        p = _state_partition(group, topic_id)
        coordinator = c.leader(SHARE_GROUP_STATE_TOPIC, p)
        if coordinator >= 0 and (coordinator == leader) == together:
            c.wait_for(lambda p=p: len(c.isr(SHARE_GROUP_STATE_TOPIC, p)) == 3, 60, "the state partition in sync")
            return group, leader, coordinator
    raise AssertionError(f"no group's share coordinator is {'on' if together else 'off'} the data leader")


def _accept(consumer: Any, want: set[bytes], timeout: float = 90.0) -> None:
    """Poll, ACCEPT and commit until every record of ``want`` was accepted (warm-up records too)."""
    deadline = time.monotonic() + timeout
    accepted: set[bytes] = set()
    while not want <= accepted:
        assert time.monotonic() < deadline, f"accepted {sorted(accepted)} of {sorted(want)}"
        msgs = [m for m in consumer.poll(0.5) if m.error() is None]
        for m in msgs:
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            accepted.add(m.value())
        if msgs:
            results = consumer.commit_sync(60)
            assert all(e is None for e in results.values()), results


def _hold(consumer: Any, timeout: float = 60.0) -> list[bytes]:
    """Acquire some records and never acknowledge them."""
    deadline = time.monotonic() + timeout
    held: list[Any] = []
    while not held:
        assert time.monotonic() < deadline, "nothing acquired"
        held = [m for m in consumer.poll(0.5) if m.error() is None]
    return [m.value() for m in held]


def _delivered_up_to_end(c: TestCluster, group: str, timeout: float = 120.0) -> list[bytes]:
    """Produce b"end" and poll a new consumer of ``group`` (implicit acknowledgement) until it comes: every record
    delivered before it, in order (the partition's offsets below it)."""
    produce(c.bootstrap_servers, "t", [(0, b"end")])
    consumer = share_consumer(c.bootstrap_servers, group, ["t"])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + timeout
        while b"end" not in got:
            assert time.monotonic() < deadline, f"got {got}"
            got += [m.value() for m in consumer.poll(0.5) if m.error() is None]
    finally:
        consumer.close()
    return got


def test_data_leader_killed_keeps_acknowledgements(c: TestCluster) -> None:
    group, leader, _ = _setup(c)
    consumer = share_consumer(c.bootstrap_servers, group, ["t"], explicit=True)
    try:
        warm_up(c.bootstrap_servers, consumer, "t", 1, explicit=True, timeout=90)
        accepted = {b"a%d" % i for i in range(10)}
        produce(c.bootstrap_servers, "t", [(0, v) for v in sorted(accepted)])
        _accept(consumer, accepted)
        later = [b"b%d" % i for i in range(10)]
        produce(c.bootstrap_servers, "t", [(0, v) for v in later])
        assert set(_hold(consumer)) <= set(later)
        c.kill(leader)
        c.wait_for(lambda: c.leader("t", 0) not in (-1, leader), 60, "a new leader of t-0")
    finally:
        consumer.close()
    got = _delivered_up_to_end(c, group)
    assert not set(got) & accepted, f"accepted records delivered again: {sorted(set(got) & accepted)}"
    assert set(later) <= set(got), f"records lost: {sorted(set(later) - set(got))}"


def test_share_coordinator_killed_keeps_acknowledgements(c: TestCluster) -> None:
    group, leader, coordinator = _setup(c)
    consumer = share_consumer(c.bootstrap_servers, group, ["t"], explicit=True)
    try:
        warm_up(c.bootstrap_servers, consumer, "t", 1, explicit=True, timeout=90)
        before = {b"a%d" % i for i in range(5)}
        produce(c.bootstrap_servers, "t", [(0, v) for v in sorted(before)])
        _accept(consumer, before)
        c.kill(coordinator)  # the acknowledgements below are written while the state partition moves
        during = {b"b%d" % i for i in range(5)}
        produce(c.bootstrap_servers, "t", [(0, v) for v in sorted(during)])
        _accept(consumer, during)
        assert c.leader("t", 0) == leader
        later = [b"c%d" % i for i in range(5)]
        produce(c.bootstrap_servers, "t", [(0, v) for v in later])
        _hold(consumer)
        c.start(coordinator)  # back in the ISRs, then the data leader goes: its successor reads the state
        c.wait_for(lambda: len(c.isr("t", 0)) == 3, 90, "t-0 in sync again")
        c.wait_for(lambda: all(len(c.isr(SHARE_GROUP_STATE_TOPIC, p)) == 3 for p in range(STATE_PARTITIONS)), 90,
                   "__share_group_state in sync again")  # fmt: skip
        c.kill(leader)
        c.wait_for(lambda: c.leader("t", 0) not in (-1, leader), 60, "a new leader of t-0")
    finally:
        consumer.close()
    got = _delivered_up_to_end(c, group)
    accepted = before | during
    assert not set(got) & accepted, f"accepted records delivered again: {sorted(set(got) & accepted)}"
    assert set(later) <= set(got), f"records lost: {sorted(set(later) - set(got))}"


def test_data_leader_and_share_coordinator_killed_at_once(c: TestCluster) -> None:
    """One broker leads the data partition and the share partition's state partition: both move at once, and the
    new data leader reads the state from a coordinator that loaded it from the replicated log."""
    group, leader, coordinator = _setup(c, together=True)
    assert leader == coordinator
    consumer = share_consumer(c.bootstrap_servers, group, ["t"], explicit=True)
    try:
        warm_up(c.bootstrap_servers, consumer, "t", 1, explicit=True, timeout=90)
        accepted = {b"a%d" % i for i in range(10)}
        produce(c.bootstrap_servers, "t", [(0, v) for v in sorted(accepted)])
        _accept(consumer, accepted)
        later = [b"b%d" % i for i in range(10)]
        produce(c.bootstrap_servers, "t", [(0, v) for v in later])
        _hold(consumer)
        c.kill(leader)
        c.wait_for(lambda: c.leader("t", 0) not in (-1, leader), 60, "a new leader of t-0")
    finally:
        consumer.close()
    got = _delivered_up_to_end(c, group)
    assert not set(got) & accepted, f"accepted records delivered again: {sorted(set(got) & accepted)}"
    assert set(later) <= set(got), f"records lost: {sorted(set(later) - set(got))}"


def test_a_stalled_share_coordinator_holds_up_only_its_share_partitions() -> None:
    """Two share groups read one partition; group A's share coordinator is another broker, group B's the
    partition's leader itself. A's state writes to its coordinator are held (the interceptor): A's acknowledgement
    waits for them, while B's acknowledgements go on, answered as durable."""
    import threading

    from rill.protocol import ApiKey

    with cluster(brokers=3, overrides=OVERRIDES, interceptors=True) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([NewTopic("t", 1, 3)])["t"].result(30)
        c.wait_for(lambda: c.leader("t", 0) >= 0 and len(c.isr("t", 0)) == 3, 60, "t-0 led with three in sync")
        first = share_consumer(c.bootstrap_servers, "starter", ["t"])
        try:
            warm_up(c.bootstrap_servers, first, "t", 1, timeout=90)
        finally:
            first.close()
        topic_id, leader = _topic_id(admin, "t"), c.leader("t", 0)

        def group(on_leader: bool) -> tuple[str, int]:
            for i in range(200):
                coordinator = c.leader(SHARE_GROUP_STATE_TOPIC, _state_partition(f"g{i}", topic_id))
                if coordinator >= 0 and (coordinator == leader) == on_leader:
                    return f"g{i}", coordinator
            raise AssertionError("no such group")

        (a, remote), (b, _) = group(False), group(True)
        ca = share_consumer(c.bootstrap_servers, a, ["t"], explicit=True)
        cb = share_consumer(c.bootstrap_servers, b, ["t"], explicit=True)
        try:
            warm_up(c.bootstrap_servers, ca, "t", 1, explicit=True, timeout=90)
            warm_up(c.bootstrap_servers, cb, "t", 1, explicit=True, timeout=90)
            produce(c.bootstrap_servers, "t", [(0, b"r%d" % i) for i in range(5)])
            got: list[Any] = []
            deadline = time.monotonic() + 30
            while len(got) < 5:
                assert time.monotonic() < deadline, got
                got += [m for m in ca.poll(0.5) if m.error() is None]
            held = c.interceptor(remote).hold(ApiKey.WRITE_SHARE_GROUP_STATE, source=leader, times=None,
                                              predicate=lambda r: r.body["group_id"] == a)  # fmt: skip
            for m in got:
                ca.acknowledge(m, AcknowledgeType.ACCEPT)
            committed: list[Any] = []
            commit = threading.Thread(target=lambda: committed.append(ca.commit_sync(60)))
            commit.start()
            held.wait(timeout=30)  # A's acknowledgement is on its way to its coordinator, and held there
            started = time.monotonic()
            _accept(cb, {b"r%d" % i for i in range(5)}, timeout=30)  # B goes on meanwhile
            assert time.monotonic() - started < 20
            assert commit.is_alive(), "A's acknowledgement was answered while its write was held"
            held.release()
            commit.join(60)
            assert committed and all(e is None for e in committed[0].values()), committed
        finally:
            ca.close()
            cb.close()
