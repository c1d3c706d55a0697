"""KIP-848's consumer group protocol over the wire: epochs, incremental reconciliation (a partition is revoked
by its owner before another member gets it), fencing, and OffsetCommit/OffsetFetch with member epochs."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.broker._wire import Wire

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey

GROUP = "kip848-wire"
CONFIGS = {
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "1000",
}


def _create_topic(bootstrap: str, name: str, partitions: int) -> uuid.UUID:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    w = Wire(bootstrap)
    try:
        md = w.call(ApiKey.METADATA, 12, {"topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
                                          "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})  # fmt: skip
        return md["topics"][0]["topic_id"]
    finally:
        w.close()


def _hb(w: Wire, member_id: str, epoch: int, **fields: Any) -> dict[str, Any]:
    body = {"group_id": GROUP, "member_id": member_id, "member_epoch": epoch, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": -1, "subscribed_topic_names": None, "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": None}  # fmt: skip
    body.update(fields)
    return w.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, body)


def _parts(resp: dict[str, Any]) -> dict[uuid.UUID, set[int]] | None:
    if resp["assignment"] is None:
        return None
    return {tp["topic_id"]: set(tp["partitions"]) for tp in resp["assignment"]["topic_partitions"]}


def _join(w: Wire, member_id: str, topic: str, assignor: str = "uniform") -> dict[str, Any]:
    return _hb(w, member_id, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=[topic],
               server_assignor=assignor, topic_partitions=[])  # fmt: skip


@pytest.mark.rill_broker_config(**CONFIGS)
def test_a_partition_moves_only_after_its_owner_revoked_it(rill_broker) -> None:
    topic_id = _create_topic(rill_broker.bootstrap_servers, "kip848-t", 4)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        a = _join(w, "member-a", "kip848-t")
        assert a["error_code"] == 0, a
        assert a["member_epoch"] == 1 and _parts(a) == {topic_id: {0, 1, 2, 3}}

        b = _join(w, "member-b", "kip848-t")
        assert b["error_code"] == 0 and b["member_epoch"] == 2
        assert _parts(b) == {}  # the two partitions it is to get are still A's

        # A is told to give two up: its epoch stays until it has.
        a = _hb(w, "member-a", 1)
        assert a["member_epoch"] == 1
        kept = _parts(a)[topic_id]
        assert len(kept) == 2
        moving = {0, 1, 2, 3} - kept
        # B asks again before A revoked: nothing yet.
        b = _hb(w, "member-b", 2)
        assert b["error_code"] == 0 and (_parts(b) or {}).get(topic_id, set()) == set()

        # A still reports all four: it stays at epoch 1.
        a = _hb(w, "member-a", 1, topic_partitions=[{"topic_id": topic_id, "partitions": [0, 1, 2, 3]}])
        assert a["member_epoch"] == 1
        # A revoked: it moves to epoch 2, and B gets the two.
        a = _hb(w, "member-a", 1, topic_partitions=[{"topic_id": topic_id, "partitions": sorted(kept)}])
        assert a["member_epoch"] == 2
        b = _hb(w, "member-b", 2)
        assert _parts(b) == {topic_id: moving}

        # An epoch the coordinator never gave is fenced; a member it does not know is told so.
        assert _hb(w, "member-a", 7)["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
        assert _hb(w, "nobody", 2)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID

        # ConsumerGroupDescribe shows both, their epochs and targets.
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [GROUP], "include_authorized_operations": False})
        g = d["groups"][0]
        assert (g["error_code"], g["group_state"], g["group_epoch"], g["assignment_epoch"]) == (0, "Stable", 2, 2)
        assert g["assignor_name"] == "uniform"
        by_id = {m["member_id"]: m for m in g["members"]}
        assert by_id["member-b"]["member_epoch"] == 2
        assert {p for tp in by_id["member-b"]["assignment"]["topic_partitions"] for p in tp["partitions"]} == moving
        assert by_id["member-b"]["target_assignment"]["topic_partitions"][0]["topic_name"] == "kip848-t"

        # OffsetCommit v9 with member epochs.
        def commit(member: str, epoch: int, version: int = 9) -> int:
            r = w.call(ApiKey.OFFSET_COMMIT, version, {
                "group_id": GROUP, "generation_id_or_member_epoch": epoch, "member_id": member,
                "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": "kip848-t", "partitions": [
                    {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                     "committed_metadata": ""}]}]})  # fmt: skip
            return int(r["topics"][0]["partitions"][0]["error_code"])

        assert commit("member-a", 1) == ErrorCode.STALE_MEMBER_EPOCH
        assert commit("nobody", 2) == ErrorCode.UNKNOWN_MEMBER_ID
        assert commit("", -1) == ErrorCode.UNKNOWN_MEMBER_ID  # not a member, while the group has members
        assert commit("member-a", 2) == ErrorCode.NO_ERROR

        def fetch(member: str | None, epoch: int) -> dict[str, Any]:
            return w.call(ApiKey.OFFSET_FETCH, 9, {
                "groups": [{"group_id": GROUP, "member_id": member, "member_epoch": epoch,
                            "topics": [{"name": "kip848-t", "partition_indexes": [0]}]}],
                "require_stable": False})["groups"][0]  # fmt: skip

        # OffsetDelete: refused for a topic the live group subscribes to.
        deleted = w.call(ApiKey.OFFSET_DELETE, 0, {"group_id": GROUP, "topics": [
            {"name": "kip848-t", "partitions": [{"partition_index": 0}]}]})  # fmt: skip
        assert deleted["topics"][0]["partitions"][0]["error_code"] == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC

        assert fetch("member-b", 1)["error_code"] == ErrorCode.STALE_MEMBER_EPOCH
        assert fetch("nobody", 1)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
        for member, epoch in (("member-b", 2), (None, -1)):
            got = fetch(member, epoch)
            assert got["error_code"] == 0 and got["topics"][0]["partitions"][0]["committed_offset"] == 5

        # A leaves: the group epoch moves on and B gets everything once it heartbeats.
        left = _hb(w, "member-a", -1)
        assert (left["error_code"], left["member_epoch"]) == (0, -1)
        b = _hb(w, "member-b", 2)
        assert b["member_epoch"] == 3 and _parts(b) == {topic_id: {0, 1, 2, 3}}
        # A classic member of another protocol type than the consumer's cannot join the consumer group.
        joined = w.call(ApiKey.JOIN_GROUP, 5, {"group_id": GROUP, "session_timeout_ms": 10_000,
                                               "rebalance_timeout_ms": 10_000, "member_id": "",
                                               "group_instance_id": None, "protocol_type": "connect",
                                               "protocols": [{"name": "range", "metadata": b""}]})  # fmt: skip
        assert joined["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL

        # ListGroups: by type and state; DescribeGroups does not describe a consumer group.
        def listed(**filters: Any) -> list[tuple[str, str, str]]:
            r = w.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": [], **filters})
            return [(g["group_id"], g["group_state"], g["group_type"]) for g in r["groups"]]

        assert (GROUP, "Stable", "consumer") in listed()
        assert (GROUP, "Stable", "consumer") in listed(types_filter=["consumer"], states_filter=["stable"])
        assert GROUP not in [g for g, _, _ in listed(types_filter=["classic"])]
        assert GROUP not in [g for g, _, _ in listed(states_filter=["Empty"])]
        described = w.call(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [GROUP]})["groups"][0]
        assert described["error_code"] == 0 and described["group_state"] == "Dead"

        # DeleteGroups: refused while the group has a member, then the group and its offsets go.
        def delete() -> int:
            return int(w.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": [GROUP]})["results"][0]["error_code"])

        assert delete() == ErrorCode.NON_EMPTY_GROUP
        assert _hb(w, "member-b", 3, member_epoch=-1)["error_code"] == 0
        assert listed(types_filter=["consumer"]) == [(GROUP, "Empty", "consumer")]
        assert delete() == ErrorCode.NO_ERROR
        assert listed() == []
        assert fetch(None, -1)["topics"][0]["partitions"][0]["committed_offset"] == -1
    finally:
        w.close()


@pytest.mark.rill_broker_config(**CONFIGS)
def test_bad_heartbeats_are_refused(rill_broker) -> None:
    _create_topic(rill_broker.bootstrap_servers, "kip848-bad", 1)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        r = _hb(w, "m", 0, rebalance_timeout_ms=1000, subscribed_topic_names=["kip848-bad"], topic_partitions=[],
                server_assignor="sticky")  # fmt: skip
        assert r["error_code"] == ErrorCode.UNSUPPORTED_ASSIGNOR
        r = _hb(w, "m", 0, rebalance_timeout_ms=1000, subscribed_topic_names=None, topic_partitions=[])
        assert r["error_code"] == ErrorCode.INVALID_REQUEST
        r = _hb(w, "m", 0, rebalance_timeout_ms=1000, subscribed_topic_regex="kip(", topic_partitions=[])
        assert r["error_code"] == ErrorCode.INVALID_REGULAR_EXPRESSION
        r = _hb(w, "", 3)
        assert r["error_code"] == ErrorCode.INVALID_REQUEST
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [GROUP], "include_authorized_operations": False})
        assert d["groups"][0]["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND  # nothing was created
    finally:
        w.close()


@pytest.mark.rill_broker_config(**CONFIGS)
def test_static_member_returns_to_its_assignment_and_regex_subscriptions(rill_broker) -> None:
    bs = rill_broker.bootstrap_servers
    t1 = _create_topic(bs, "orders-eu", 2)
    t2 = _create_topic(bs, "orders-us", 2)
    _create_topic(bs, "payments", 2)
    w = Wire(bs, timeout=30)
    try:
        join = {"rebalance_timeout_ms": 30_000, "subscribed_topic_regex": "orders-.*", "topic_partitions": []}
        a = _hb(w, "a-1", 0, instance_id="instance-a", **join)
        assert a["error_code"] == 0 and _parts(a) == {t1: {0, 1}, t2: {0, 1}}  # payments does not match
        a = _hb(w, "a-1", 1, topic_partitions=[{"topic_id": t1, "partitions": [0, 1]},
                                               {"topic_id": t2, "partitions": [0, 1]}])  # fmt: skip
        # Another process with the same instance id while the first has not left: refused.
        dup = _hb(w, "a-2", 0, instance_id="instance-a", **join)
        assert dup["error_code"] == ErrorCode.UNRELEASED_INSTANCE_ID
        # The static member leaves for a restart (-2) and comes back with a new member id: same partitions and
        # epoch, no new group epoch.
        left = _hb(w, "a-1", -2, instance_id="instance-a")
        assert (left["error_code"], left["member_epoch"]) == (0, -2)
        back = _hb(w, "a-2", 0, instance_id="instance-a", **join)
        assert back["error_code"] == 0, back
        assert back["member_epoch"] == 1 and _parts(back) == {t1: {0, 1}, t2: {0, 1}}
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [GROUP]})["groups"][0]
        assert [(m["member_id"], m["instance_id"]) for m in d["members"]] == [("a-2", "instance-a")]
        assert d["group_epoch"] == 1
        assert d["members"][0]["subscribed_topic_regex"] == "orders-.*"
        # A new topic that matches the regex is assigned at the next heartbeat.
        t3 = _create_topic(bs, "orders-asia", 1)
        again = _hb(w, "a-2", 1)
        assert again["member_epoch"] == 2 and _parts(again)[t3] == {0}
    finally:
        w.close()


@pytest.mark.rill_broker_config(**CONFIGS, **{"group.initial.rebalance.delay.ms": "0"})
def test_an_empty_group_changes_protocol_and_keeps_its_offsets(rill_broker) -> None:
    _create_topic(rill_broker.bootstrap_servers, "kip848-switch", 1)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        joined = _hb(w, "m", 0, rebalance_timeout_ms=5000, subscribed_topic_names=["kip848-switch"],
                     topic_partitions=[])  # fmt: skip
        commit = w.call(ApiKey.OFFSET_COMMIT, 9, {
            "group_id": GROUP, "generation_id_or_member_epoch": joined["member_epoch"], "member_id": "m",
            "topics": [{"name": "kip848-switch", "partitions": [
                {"partition_index": 0, "committed_offset": 7, "committed_metadata": ""}]}]})  # fmt: skip
        assert commit["topics"][0]["partitions"][0]["error_code"] == 0
        assert _hb(w, "m", -1)["error_code"] == 0  # the consumer group is empty now
        classic = w.call(ApiKey.JOIN_GROUP, 3, {"group_id": GROUP, "session_timeout_ms": 10_000,
                                                "rebalance_timeout_ms": 10_000, "member_id": "",
                                                "protocol_type": "consumer",
                                                "protocols": [{"name": "range", "metadata": b""}]})  # fmt: skip
        assert classic["error_code"] == 0, classic
        listed = w.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})["groups"]
        assert [(g["group_id"], g["group_type"]) for g in listed] == [(GROUP, "classic")]
        fetched = w.call(ApiKey.OFFSET_FETCH, 1, {"group_id": GROUP, "topics": [
            {"name": "kip848-switch", "partition_indexes": [0]}]})  # fmt: skip
        assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 7
        # Now a live classic group whose member's subscription cannot be read: it cannot be upgraded, so a
        # consumer-protocol member is refused.
        refused = _hb(w, "m2", 0, rebalance_timeout_ms=5000, subscribed_topic_names=["kip848-switch"],
                      topic_partitions=[])  # fmt: skip
        assert refused["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    finally:
        w.close()


@pytest.mark.parametrize("kill", [False, True])
@pytest.mark.rill_broker_config(**CONFIGS)
def test_a_restarted_broker_replays_the_group(rill_broker, kill: bool) -> None:
    topic_id = _create_topic(rill_broker.bootstrap_servers, "kip848-restart", 2)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    a = _join(w, "member-a", "kip848-restart")
    b = _join(w, "member-b", "kip848-restart")
    a = _hb(w, "member-a", 1)
    kept = _parts(a)
    a = _hb(w, "member-a", 1, topic_partitions=[{"topic_id": topic_id, "partitions": sorted(kept[topic_id])}])
    b = _hb(w, "member-b", 2)
    assert (a["member_epoch"], b["member_epoch"]) == (2, 2)
    w.close()
    rill_broker.restart(kill=kill)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        owned = [{"topic_id": topic_id, "partitions": sorted(_parts(b)[topic_id])}]
        again = _hb(w, "member-b", 2, topic_partitions=owned, rebalance_timeout_ms=30_000,
                    subscribed_topic_names=["kip848-restart"])  # fmt: skip
        assert (again["error_code"], again["member_epoch"], _parts(again)) == (0, 2, _parts(b))
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [GROUP]})["groups"][0]
        assert (d["group_state"], d["group_epoch"], sorted(m["member_id"] for m in d["members"])) == (
            "Stable", 2, ["member-a", "member-b"])
    finally:
        w.close()


@pytest.mark.rill_broker_config(**CONFIGS, **{"group.consumer.max.size": "1"})
def test_a_full_group_refuses_a_new_member(rill_broker) -> None:
    _create_topic(rill_broker.bootstrap_servers, "kip848-full", 1)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        assert _join(w, "first", "kip848-full")["error_code"] == 0
        refused = _join(w, "second", "kip848-full")
        assert refused["error_code"] == ErrorCode.GROUP_MAX_SIZE_REACHED
        assert _join(w, "first", "kip848-full")["error_code"] == 0  # a member rejoining is not a new one
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [GROUP]})["groups"][0]
        assert [m["member_id"] for m in d["members"]] == ["first"]
    finally:
        w.close()


@pytest.mark.rill_broker_config(**CONFIGS)
def test_a_member_that_does_not_revoke_in_time_is_removed(rill_broker) -> None:
    topic_id = _create_topic(rill_broker.bootstrap_servers, "kip848-slow", 2)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        slow = _hb(w, "slow", 0, rebalance_timeout_ms=1000, subscribed_topic_names=["kip848-slow"],
                   topic_partitions=[])  # fmt: skip
        assert _parts(slow) == {topic_id: {0, 1}}
        assert _join(w, "other", "kip848-slow")["error_code"] == 0
        told = _hb(w, "slow", 1)  # told to give one up; it never reports that it did
        assert len(_parts(told)[topic_id]) == 1
        deadline = time.monotonic() + 20
        while True:  # within its rebalance timeout (1 s) plus a heartbeat, the other member gets both
            other = _hb(w, "other", 2)
            if other["error_code"] == 0 and (_parts(other) or {}).get(topic_id) == {0, 1}:
                break
            assert time.monotonic() < deadline, other
            time.sleep(0.2)
        assert other["member_epoch"] == 3
        assert _hb(w, "slow", 1)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    finally:
        w.close()


def _alter_group(w: Wire, group: str, name: str, value: str | None, op: int = 0) -> dict[str, Any]:
    return w.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
        {"resource_type": 32, "resource_name": group,
         "configs": [{"name": name, "config_operation": op, "value": value}]}]})["responses"][0]  # fmt: skip


def _describe_group_configs(w: Wire, group: str) -> dict[str, tuple[str, int]]:
    r = w.call(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [{"resource_type": 32, "resource_name": group,
                                                          "configuration_keys": None}],
                                           "include_synonyms": False, "include_documentation": False})  # fmt: skip
    return {c["name"]: (c["value"], c["config_source"]) for c in r["results"][0]["configs"]}


@pytest.mark.rill_broker_config(**CONFIGS)
def test_group_configs_override_the_brokers(rill_broker) -> None:
    _create_topic(rill_broker.bootstrap_servers, "kip848-cfg", 1)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        assert _describe_group_configs(w, GROUP)["consumer.heartbeat.interval.ms"] == ("500", 5)  # the broker's
        assert _alter_group(w, GROUP, "consumer.heartbeat.interval.ms", "700")["error_code"] == 0
        assert _describe_group_configs(w, GROUP)["consumer.heartbeat.interval.ms"] == ("700", 8)
        assert _join(w, "m", "kip848-cfg")["heartbeat_interval_ms"] == 700
        # Refused, changing nothing: below the broker's minimum (100), an unknown name, not a number.
        for name, value in (("consumer.heartbeat.interval.ms", "50"), ("consumer.nonsense", "1"),
                            ("consumer.session.timeout.ms", "soon")):  # fmt: skip
            assert _alter_group(w, GROUP, name, value)["error_code"] == ErrorCode.INVALID_CONFIG
        assert _describe_group_configs(w, GROUP)["consumer.heartbeat.interval.ms"] == ("700", 8)
        assert _alter_group(w, GROUP, "consumer.heartbeat.interval.ms", None, op=1)["error_code"] == 0  # DELETE
        assert _hb(w, "m", 1)["heartbeat_interval_ms"] == 500
        assert _alter_group(w, GROUP, "consumer.session.timeout.ms", "50000")["error_code"] == 0
        w.close()
        rill_broker.restart()  # kept in the cluster's metadata
        w = Wire(rill_broker.bootstrap_servers, timeout=30)
        assert _describe_group_configs(w, GROUP)["consumer.session.timeout.ms"] == ("50000", 8)
    finally:
        w.close()


def test_a_subscription_regex_cannot_hold_the_broker() -> None:
    """A member's SubscribedTopicRegex is matched against every topic name on the event loop. Python's
    backtracking ``re`` took exponential time for '(a+)+b' against a name of thirty a's: one heartbeat held the
    broker (every other client waited). Kafka matches them with RE2J; the broker matches them with RE2, linear in
    the name."""
    with rill.testing.broker(CONFIGS, subprocess=True) as broker:
        bs = broker.bootstrap_servers
        _create_topic(bs, "a" * 30, 1)
        w, other = Wire(bs, timeout=20), Wire(bs, timeout=20)
        try:
            r = _hb(w, "m", 0, rebalance_timeout_ms=30_000, subscribed_topic_regex="(a+)+b", topic_partitions=[])
            assert r["error_code"] == 0
            assert other.call(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
            r = _hb(w, "m2", 0, rebalance_timeout_ms=30_000, subscribed_topic_regex="(a)\\1", topic_partitions=[])
            assert r["error_code"] == ErrorCode.INVALID_REGULAR_EXPRESSION  # RE2 has no back-references, nor RE2J
        finally:
            w.close()
            other.close()
            broker.kill()


@pytest.mark.rill_broker_config(**CONFIGS)
def test_a_stored_regex_that_re2_refuses_does_not_stop_the_broker(rill_broker) -> None:
    """A member's regex written before it was checked with RE2 (a look-ahead Python's ``re`` took) is bytes the
    broker wrote that it no longer takes: the load skips the regex (the member subscribes to its named topics
    only) and the broker starts."""
    from rill.coordinator.group import consumer_group_records as records
    from rill.coordinator.group.consumer_group import ConsumerGroupMember

    _create_topic(rill_broker.bootstrap_servers, "kip848-re", 1)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        assert _join(w, "m", "kip848-re")["error_code"] == 0
    finally:
        w.close()
    consumer = rill_broker.broker.services.group_coordinator.consumer
    member = ConsumerGroupMember(member_id="m", subscribed_topic_names=("kip848-re",),
                                 subscribed_topic_regex="kip(?=848).*", rebalance_timeout_ms=30_000)  # fmt: skip
    kvs = [records.member_metadata_record(GROUP, member)]
    rill_broker._runner._call(consumer._write(GROUP, kvs), 30)  # as the previous version wrote it
    rill_broker.restart(kill=True)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [GROUP], "include_authorized_operations": False})
        assert d["groups"][0]["error_code"] == 0
        assert [m["member_id"] for m in d["groups"][0]["members"]] == ["m"]
    finally:
        w.close()
