"""A share group's coordinator keeps the group in ``__consumer_offsets`` (KIP-932's records, as Kafka does), on
a three-broker cluster with raw requests:

- before ``__consumer_offsets`` exists, no broker takes a share group as its own: one coordinator, once it does;
- the coordinator SIGKILLed: the next one knows the member (ShareGroupDescribe), refuses to reset the offsets of
  the group while it has it (NON_EMPTY_GROUP), and goes on with the member at its epoch;
- the group emptied and given offsets, its coordinator SIGKILLed again: the next one lists it once, as Empty,
  describes its offsets, and deletes it with its state;
- a partition leader at its bound of share sessions that is not the group's coordinator keeps its members'
  sessions (it cannot tell a member from an id that is none) and refuses a new one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from rill.client.client import KafkaClient
from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.testing.cluster import TestCluster, cluster

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

RETRIED = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


@pytest.fixture
def c() -> Iterator[TestCluster]:
    with cluster(brokers=3) as c:
        yield c


def _heartbeat(client: KafkaClient, node: int, member: str, epoch: int, topics: list[str] | None) -> dict[str, Any]:
    body = {"group_id": "sg", "member_id": member, "member_epoch": epoch, "rack_id": None,
            "subscribed_topic_names": topics}  # fmt: skip
    return dict(client.connection(node).request(ApiKey.SHARE_GROUP_HEARTBEAT, body, version=1)[1])


def _coordinator(c: TestCluster, avoid: int = -1) -> int:
    """The node id of the group's coordinator (another than ``avoid``, once the group has moved)."""
    deadline = time.monotonic() + 60
    while True:
        with KafkaClient(c.bootstrap_servers, timeout_s=30) as client:
            for node in client.refresh_metadata([]).brokers:
                try:
                    body = client.connection(node).request(ApiKey.FIND_COORDINATOR, {"key": "sg", "key_type": 0})[1]
                except Exception:  # a broker just killed
                    continue
                if body["error_code"] == 0 and body["node_id"] != avoid:
                    return int(body["node_id"])
        assert time.monotonic() < deadline, "no coordinator found"
        time.sleep(0.2)


def _until_answered(call: Any, code_of: Any = lambda r: r["error_code"]) -> Any:
    deadline = time.monotonic() + 60
    while (r := call()) is not None and code_of(r) in RETRIED and time.monotonic() < deadline:
        time.sleep(0.2)
    return r


def _describe(client: KafkaClient, node: int) -> dict[str, Any]:
    return _until_answered(lambda: client.connection(node).request(
        ApiKey.SHARE_GROUP_DESCRIBE, {"group_ids": ["sg"]}, version=1)[1]["groups"][0])  # fmt: skip


def _alter(client: KafkaClient, node: int, offset: int) -> dict[str, Any]:
    body = {"group_id": "sg", "topics": [{"topic_name": "t", "partitions": [
        {"partition_index": 0, "start_offset": offset}]}]}  # fmt: skip
    return _until_answered(lambda: client.connection(node).request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, body,
                                                                   version=0)[1])  # fmt: skip


def _listed(client: KafkaClient) -> list[tuple[int, str, str]]:
    out = []
    for node in client.refresh_metadata([]).brokers:
        try:
            r = client.connection(node).request(ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": ["share"]},
                                                version=5)[1]  # fmt: skip
        except Exception:  # a broker just killed, still in the metadata
            continue
        out += [(node, g["group_id"], g["group_state"]) for g in r["groups"]]
    return out


def _wait_isr(c: TestCluster, count: int, node: int) -> None:
    """Every partition of ``__consumer_offsets`` (``count``) and ``t`` back in sync on ``node``."""
    c.wait_for(lambda: all(node in c.isr("__consumer_offsets", p) for p in range(count)) and node in c.isr("t", 0),
               90, f"{node} in every ISR")  # fmt: skip


def test_a_share_group_outlives_its_coordinator(c: TestCluster) -> None:
    with KafkaClient(c.bootstrap_servers, timeout_s=30) as client:
        client.create_topic("t", 1, replication_factor=3)
        nodes = sorted(client.refresh_metadata([]).brokers)
        # No FindCoordinator yet, so no __consumer_offsets: the first heartbeat makes it, and only the leader of
        # the group's partition answers once it has one (before, each broker took the group as its own).
        deadline = time.monotonic() + 60
        answers: dict[int, dict[str, Any]] = {}
        while time.monotonic() < deadline:
            answers = {n: _heartbeat(client, n, "m1", 0, ["t"]) for n in nodes}
            if any(a["error_code"] == 0 for a in answers.values()):
                break
            time.sleep(0.2)
        joined = [n for n, a in answers.items() if a["error_code"] == 0]
        assert len(joined) == 1, answers
        first = joined[0]
        offsets_partitions = len(client.topic("__consumer_offsets").partitions)
        assert first == _coordinator(c)
        epoch = answers[first]["member_epoch"]
        assert {a["error_code"] for n, a in answers.items() if n != first} <= set(RETRIED), answers

    c.kill(first)
    second = _coordinator(c, avoid=first)
    with KafkaClient(c.bootstrap_servers, timeout_s=30) as client:
        described = _describe(client, second)
        assert described["error_code"] == 0 and described["group_state"] == "Stable", described
        assert [m["member_id"] for m in described["members"]] == ["m1"], described
        refused = _alter(client, second, 0)
        assert refused["error_code"] == ErrorCode.NON_EMPTY_GROUP, refused
        again = _until_answered(lambda: _heartbeat(client, second, "m1", epoch, None))
        assert again["error_code"] == 0 and again["member_epoch"] >= epoch, again
        left = _heartbeat(client, second, "m1", -1, None)
        assert left["error_code"] == 0, left

        c.start(first)  # (``__share_group_state``, made by the first reset, needs its three replicas)
        _wait_isr(c, offsets_partitions, first)
        altered = _until_answered(lambda: _alter(client, second, 0), lambda r: r["responses"][0]["partitions"][0][
            "error_code"])  # fmt: skip
        assert altered["error_code"] == 0, altered
        assert [p["error_code"] for t in altered["responses"] for p in t["partitions"]] == [0], altered
    c.kill(second)
    third = _coordinator(c, avoid=second)
    with KafkaClient(c.bootstrap_servers, timeout_s=30) as client:
        c.wait_for(lambda: [g for g in _listed(client) if g[1] == "sg"] == [(third, "sg", "Empty")], 60,
                   "the group listed once, by its coordinator")  # fmt: skip
        offsets = _until_answered(lambda: client.connection(third).request(
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, {"groups": [{"group_id": "sg", "topics": None}]},
            version=0)[1]["groups"][0])  # fmt: skip
        starts = {(t["topic_name"], p["partition_index"]): p["start_offset"] for t in offsets["topics"]
                  for p in t["partitions"]}  # fmt: skip
        assert starts == {("t", 0): 0}, offsets
        deleted = client.connection(third).request(ApiKey.DELETE_GROUPS, {"groups_names": ["sg"]}, version=2)[1]
        assert [(r["group_id"], r["error_code"]) for r in deleted["results"]] == [("sg", 0)], deleted
        assert [g for g in _listed(client) if g[1] == "sg"] == []
        gone = client.connection(third).request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
                                                {"groups": [{"group_id": "sg", "topics": None}]}, version=0)[1]
        assert gone["groups"][0]["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND, gone


def _share_fetch(client: KafkaClient, node: int, group: str, member: str, epoch: int,
                 topic_id: uuid.UUID) -> dict[str, Any]:  # fmt: skip
    body = {"group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait_ms": 0,
            "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 3, "batch_size": 3, "forgotten_topics_data": [],
            "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}]}
    return dict(client.connection(node).request(ApiKey.SHARE_FETCH, body, version=1)[1])


def test_a_leader_keeps_the_sessions_of_members_another_broker_coordinates() -> None:
    with cluster(brokers=3, overrides={"group.share.max.share.sessions": "2"}) as c, \
            KafkaClient(c.bootstrap_servers, timeout_s=30) as client:  # fmt: skip
        client.create_topic("t", 1, replication_factor=3)
        leader = client.leader_for(client.partitions_for("t")[0])
        topic_id = client.connection(leader).request(ApiKey.METADATA, {
            "topics": [{"name": "t"}], "allow_auto_topic_creation": False}, version=12)[1]["topics"][0]["topic_id"]
        group = next(g for g in (f"g{i}" for i in range(100))
                     if client.coordinator(g).port != client.connection(leader).port)  # fmt: skip
        coordinator = client.coordinator(group)
        members = []
        for _ in range(3):
            r = _until_answered(lambda: dict(coordinator.request(ApiKey.SHARE_GROUP_HEARTBEAT, {
                "group_id": group, "member_id": "", "member_epoch": 0, "rack_id": None,
                "subscribed_topic_names": ["t"]}, version=1)[1]))  # fmt: skip
            assert r["error_code"] == 0, r
            members.append(r["member_id"])
        assert [_share_fetch(client, leader, group, m, 0, topic_id)["error_code"] for m in members[:2]] == [0, 0]
        refused = _share_fetch(client, leader, group, members[2], 0, topic_id)
        assert refused["error_code"] == ErrorCode.SHARE_SESSION_LIMIT_REACHED, refused
        assert _share_fetch(client, leader, group, members[0], 1, topic_id)["error_code"] == 0  # still open
