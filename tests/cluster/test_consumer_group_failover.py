"""A consumer group (KIP-848) outlives its coordinator: the ``__consumer_offsets`` leader is SIGKILLed, the new
leader replays the group's records, and every member carries on at its epoch with its assignment."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tests.cluster._helpers import create_topic
from tests.integration.broker._wire import Wire

from rill.coordinator.group.group_metadata_manager import partition_for
from rill.errors import ErrorCode
from rill.metadata.store import OFFSETS_TOPIC
from rill.protocol import ApiKey, encode_versioned
from rill.testing.cluster import TestCluster, cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

GROUP = "kip848-failover"
TOPIC = "kip848-fo"


@pytest.fixture(scope="module")
def rill3c() -> Iterator[TestCluster]:
    overrides = {
        "group.consumer.heartbeat.interval.ms": "500",
        "group.consumer.min.heartbeat.interval.ms": "100",
        "group.consumer.session.timeout.ms": "60000",
        "offsets.topic.num.partitions": "3",
    }
    with cluster(brokers=3, overrides=overrides, min_insync_replicas=2, num_partitions=3) as c:
        yield c


def _wire(c: TestCluster, node: int) -> Wire:
    return Wire(c.broker(node).bootstrap_servers, timeout=30)


def _hb(w: Wire, member_id: str, epoch: int, **fields: Any) -> dict[str, Any]:
    body = {"group_id": GROUP, "member_id": member_id, "member_epoch": epoch, "rebalance_timeout_ms": -1,
            "subscribed_topic_names": None, "topic_partitions": None}  # fmt: skip
    body.update(fields)
    return w.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, body)


RETRIABLE = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


def _until_served(c: TestCluster, call: Any) -> dict[str, Any]:
    """The first answer that is not "ask again" (the coordinator is still loading or learning of the topic)."""
    answers: list[dict[str, Any]] = []

    def served() -> bool:
        answers.append(call())
        return answers[-1]["error_code"] not in RETRIABLE

    c.wait_for(served, 40, "the coordinator to serve the group")
    return answers[-1]


def _parts(resp: dict[str, Any]) -> dict[uuid.UUID, set[int]]:
    return {tp["topic_id"]: set(tp["partitions"]) for tp in resp["assignment"]["topic_partitions"]}


def _owned(parts: dict[uuid.UUID, set[int]]) -> list[dict[str, Any]]:
    return [{"topic_id": t, "partitions": sorted(ps)} for t, ps in parts.items()]


def _replica_sizes(c: TestCluster, partition: int) -> set[int]:
    sizes = set()
    for node in c.brokers:
        w = _wire(c, node)
        try:
            r = w.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": [{"topic": OFFSETS_TOPIC, "partitions": [partition]}]})
        finally:
            w.close()
        for result in r["results"]:
            for t in result["topics"]:
                sizes.update(p["partition_size"] for p in t["partitions"])
    return sizes


def test_members_keep_their_epochs_and_assignments_across_a_coordinator_kill(rill3c: TestCluster) -> None:
    c = rill3c
    create_topic(c, TOPIC, partitions=4)
    w = _wire(c, c.brokers[0])
    try:
        found = w.call(ApiKey.FIND_COORDINATOR, 3, {"key": GROUP, "key_type": 0})
        assert found["error_code"] == 0, found
    finally:
        w.close()
    offsets_partition = partition_for(GROUP, 3)
    c.wait_for(lambda: len(c.isr(OFFSETS_TOPIC, offsets_partition)) == 3, 40, "the full ISR of the group's partition")
    coordinator = c.leader(OFFSETS_TOPIC, offsets_partition)
    w = _wire(c, coordinator)
    join = {"rebalance_timeout_ms": 30_000, "subscribed_topic_names": [TOPIC], "topic_partitions": []}
    a = _until_served(c, lambda: _hb(w, "member-a", 0, **join))
    assert a["error_code"] == 0, a
    b = _hb(w, "member-b", 0, **join)
    a = _hb(w, "member-a", 1)
    a_parts = _parts(a)
    a = _hb(w, "member-a", 1, topic_partitions=_owned(a_parts))
    b = _hb(w, "member-b", 2)
    assert (a["member_epoch"], b["member_epoch"]) == (2, 2)
    b_parts = _parts(b)
    assert sum(len(p) for p in [*a_parts.values(), *b_parts.values()]) == 4
    commit = w.call(ApiKey.OFFSET_COMMIT, 9, {
        "group_id": GROUP, "generation_id_or_member_epoch": 2, "member_id": "member-a", "group_instance_id": None,
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})  # fmt: skip
    assert commit["topics"][0]["partitions"][0]["error_code"] == 0
    w.close()
    # Every replica has the group's records before the coordinator dies.
    c.wait_for(lambda: len(_replica_sizes(c, offsets_partition)) == 1, 30, "the followers to catch up")

    c.kill(coordinator)
    c.wait_for(lambda: c.leader(OFFSETS_TOPIC, offsets_partition) not in (coordinator, -1), 40, "a new coordinator")
    successor = c.leader(OFFSETS_TOPIC, offsets_partition)
    w = _wire(c, successor)
    try:
        a2 = _until_served(c, lambda: _hb(w, "member-a", 2, topic_partitions=_owned(a_parts)))
        assert (a2["error_code"], a2["member_epoch"]) == (0, 2), a2
        b2 = _hb(w, "member-b", 2, topic_partitions=_owned(b_parts), rebalance_timeout_ms=30_000,
                 subscribed_topic_names=[TOPIC])  # fmt: skip
        assert (b2["error_code"], b2["member_epoch"], _parts(b2)) == (0, 2, b_parts)
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [GROUP]})["groups"][0]
        assert (d["group_state"], d["group_epoch"], d["assignment_epoch"]) == ("Stable", 2, 2), d
        member = {"group_id": GROUP, "member_id": "member-a", "member_epoch": 2, "topics": None}
        fetched = w.call(ApiKey.OFFSET_FETCH, 9, {"groups": [member]})["groups"][0]
        assert fetched["error_code"] == 0
        assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 42
    finally:
        w.close()
        c.restart(coordinator)


def test_clients_read_everything_across_a_coordinator_kill(rill3c: TestCluster) -> None:
    """confluent-kafka consumers with group.protocol=consumer while the group's coordinator is SIGKILLed:
    every record is read, no partition is owned by two members at once, committed offsets never go back."""
    import confluent_kafka
    from tests.integration.groups._consumers import ConsumerThread, Ownership

    c, group, topic, partitions = rill3c, "kip848-clients", "kip848-load", 6
    create_topic(c, topic, partitions=partitions)
    producer = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all",
                                         "enable.idempotence": True, "message.timeout.ms": 60000})  # fmt: skip
    produced: list[bytes] = []

    def produce(n: int) -> None:
        for _ in range(n):
            value = f"r{len(produced)}".encode()
            produced.append(value)
            producer.produce(topic, value, partition=len(produced) % partitions)
        assert producer.flush(90) == 0

    def committed() -> dict[int, int]:
        probe = confluent_kafka.Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": group})
        try:
            tps = probe.committed([confluent_kafka.TopicPartition(topic, p) for p in range(partitions)], timeout=30)
            return {tp.partition: tp.offset for tp in tps}
        finally:
            probe.close()

    ownership = Ownership()
    members = [ConsumerThread(n, c.bootstrap_servers, group, topic, ownership) for n in ("x", "y", "z")]
    for m in members:
        m.start()
    produce(600)
    c.wait_for(lambda: ownership.seen >= set(produced), 90, "every record before the kill")
    before = committed()
    offsets_partition = partition_for(group, 3)
    coordinator = c.leader(OFFSETS_TOPIC, offsets_partition)
    c.wait_for(lambda: len(_replica_sizes(c, offsets_partition)) == 1, 30, "the followers to catch up")
    c.kill(coordinator)
    try:
        produce(600)
        c.wait_for(lambda: ownership.seen >= set(produced), 120, "every record after the kill")
        for m in members:
            m.stop()
        after = committed()
    finally:
        c.restart(coordinator)
    assert not ownership.overlaps(), ownership.overlaps()
    assert all(after[p] >= before[p] for p in before), (before, after)
    assert sum(after.values()) == len(produced)


def test_a_group_config_set_on_any_broker_applies_at_the_coordinator(rill3c: TestCluster) -> None:
    c, group = rill3c, "kip848-configured"
    create_topic(c, "kip848-cfg", partitions=1)
    w = _wire(c, c.brokers[0])
    try:
        _until_served(c, lambda: w.call(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0}))
    finally:
        w.close()
    coordinator = c.leader(OFFSETS_TOPIC, partition_for(group, 3))
    other = next(b for b in c.brokers if b != coordinator)
    w = _wire(c, other)
    try:
        altered = w.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
            {"resource_type": 32, "resource_name": group, "configs": [
                {"name": "consumer.heartbeat.interval.ms", "config_operation": 0, "value": "900"}]}]})  # fmt: skip
        assert altered["responses"][0]["error_code"] == 0, altered
    finally:
        w.close()
    w = _wire(c, coordinator)
    try:

        def seen_by_coordinator() -> bool:  # configs reach the other brokers through ZooKeeper's watches
            keys = ["consumer.heartbeat.interval.ms"]
            r = w.call(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
                {"resource_type": 32, "resource_name": group, "configuration_keys": keys}],
                "include_synonyms": False, "include_documentation": False})  # fmt: skip
            return bool(r["results"][0]["configs"][0]["value"] == "900")

        c.wait_for(seen_by_coordinator, 30, "the coordinator to see the group's config")
        body = {"group_id": group, "member_id": "m", "member_epoch": 0, "rebalance_timeout_ms": 30_000,
                "subscribed_topic_names": ["kip848-cfg"], "topic_partitions": []}  # fmt: skip
        joined = _until_served(c, lambda: w.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, body))
        assert (joined["error_code"], joined["heartbeat_interval_ms"]) == (0, 900), joined
    finally:
        w.close()


def test_a_mixed_group_outlives_its_coordinator(rill3c: TestCluster) -> None:
    """A classic group upgraded by a consumer-protocol member keeps both kinds of members, their epochs and their
    assignments when the coordinator is SIGKILLed: the new one replays the conversion's records."""
    c, group, topic = rill3c, "mixed-failover", "mixed-fo"
    create_topic(c, topic, partitions=4)
    w = _wire(c, c.brokers[0])
    try:  # creates __consumer_offsets if this test runs alone
        assert w.call(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})["error_code"] == 0
    finally:
        w.close()
    offsets_partition = partition_for(group, 3)
    c.wait_for(lambda: len(c.isr(OFFSETS_TOPIC, offsets_partition)) == 3, 40, "the full ISR of the group's partition")
    coordinator = c.leader(OFFSETS_TOPIC, offsets_partition)
    w = _wire(c, coordinator)
    subscription = encode_versioned("ConsumerProtocolSubscription", 1, {
        "topics": [topic], "user_data": None, "owned_partitions": []})  # fmt: skip
    join = {"group_id": group, "session_timeout_ms": 30_000, "rebalance_timeout_ms": 30_000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": subscription}]}  # fmt: skip
    joined = _until_served(c, lambda: w.call(ApiKey.JOIN_GROUP, 3, join))
    classic, generation = joined["member_id"], joined["generation_id"]
    everything = encode_versioned("ConsumerProtocolAssignment", 0, {
        "assigned_partitions": [{"topic": topic, "partitions": [0, 1, 2, 3]}], "user_data": None})  # fmt: skip
    synced = w.call(ApiKey.SYNC_GROUP, 3, {"group_id": group, "generation_id": generation, "member_id": classic,
                                           "group_instance_id": None,
                                           "assignments": [{"member_id": classic, "assignment": everything}]})
    assert synced["error_code"] == 0, synced
    upgraded = w.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {
        "group_id": group, "member_id": "member-c", "member_epoch": 0, "rebalance_timeout_ms": 30_000,
        "subscribed_topic_names": [topic], "topic_partitions": []})  # fmt: skip
    assert (upgraded["error_code"], upgraded["member_epoch"]) == (0, generation + 1), upgraded
    w.close()
    c.wait_for(lambda: len(_replica_sizes(c, offsets_partition)) == 1, 30, "the followers to catch up")

    c.kill(coordinator)
    c.wait_for(lambda: c.leader(OFFSETS_TOPIC, offsets_partition) not in (coordinator, -1), 40, "a new coordinator")
    w = _wire(c, c.leader(OFFSETS_TOPIC, offsets_partition))
    try:
        beat = {"group_id": group, "generation_id": generation, "member_id": classic}
        answer = _until_served(c, lambda: w.call(ApiKey.HEARTBEAT, 1, beat))
        assert answer["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS  # still a member, told to rejoin
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [group]})["groups"][0]
        assert (d["group_epoch"], d["assignment_epoch"]) == (generation + 1, generation + 1), d
        members = {m["member_id"]: (m["member_type"], m["member_epoch"]) for m in d["members"]}
        assert members == {classic: (0, generation), "member-c": (1, generation + 1)}
        listed = w.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})["groups"]
        assert (group, "consumer") in [(g["group_id"], g["group_type"]) for g in listed]
    finally:
        w.close()
        c.restart(coordinator)
