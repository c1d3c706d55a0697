"""Online migration between the classic and the consumer group protocols over the wire (KIP-848's upgrade and
downgrade, ``group.consumer.migration.policy``): a consumer-protocol member joining a live classic group makes
it a consumer group whose classic members stay and are served through JoinGroup/SyncGroup/Heartbeat, revoking
before another member is given their partitions; the last consumer-protocol member leaving makes it classic
again; the policy and the size limits refuse as Kafka does; a restarted broker replays the mixed group."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from tests.integration.broker._wire import Wire
from tests.integration.groups.test_consumer_group_wire import _create_topic

from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey, decode_versioned, encode_versioned

GROUP = "migrating"
TOPIC = "migrating-t"
CONFIGS = {
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
}


def _subscription(owned: list[int] | None = None) -> bytes:
    return encode_versioned("ConsumerProtocolSubscription", 1, {
        "topics": [TOPIC], "user_data": None,
        "owned_partitions": [{"topic": TOPIC, "partitions": sorted(owned)}] if owned else []})  # fmt: skip


def _assignment(partitions: list[int]) -> bytes:
    return encode_versioned("ConsumerProtocolAssignment", 0, {
        "assigned_partitions": [{"topic": TOPIC, "partitions": partitions}], "user_data": None})  # fmt: skip


def _partitions(data: bytes) -> set[int]:
    if not data:
        return set()
    _, body = decode_versioned("ConsumerProtocolAssignment", data)
    return {p for tp in body["assigned_partitions"] if tp["topic"] == TOPIC for p in tp["partitions"]}


def _join(w: Wire, member_id: str, owned: list[int] | None = None, protocol_type: str = "consumer") -> dict[str, Any]:
    body = {"group_id": GROUP, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000, "member_id": member_id,
            "group_instance_id": None, "protocol_type": protocol_type,
            "protocols": [{"name": "range", "metadata": _subscription(owned)}], "reason": None}  # fmt: skip
    resp = w.call(ApiKey.JOIN_GROUP, 5, body)
    if resp["error_code"] == ErrorCode.MEMBER_ID_REQUIRED:
        body["member_id"] = resp["member_id"]
        resp = w.call(ApiKey.JOIN_GROUP, 5, body)
    return resp


def _sync(w: Wire, member_id: str, generation: int, assignments: dict[str, bytes] | None = None) -> dict[str, Any]:
    return w.call(ApiKey.SYNC_GROUP, 5, {
        "group_id": GROUP, "generation_id": generation, "member_id": member_id, "group_instance_id": None,
        "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()]})  # fmt: skip


def _heartbeat(w: Wire, member_id: str, generation: int) -> int:
    return w.call(ApiKey.HEARTBEAT, 3, {"group_id": GROUP, "generation_id": generation, "member_id": member_id,
                                        "group_instance_id": None})["error_code"]  # fmt: skip


def _cg_heartbeat(w: Wire, member_id: str, epoch: int) -> dict[str, Any]:
    first = epoch == 0
    return w.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {
        "group_id": GROUP, "member_id": member_id, "member_epoch": epoch, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": 10_000 if first else -1, "subscribed_topic_names": [TOPIC] if first else None,
        "server_assignor": "uniform" if first else None,
        "topic_partitions": [] if first else None})  # fmt: skip


def _assigned(resp: dict[str, Any]) -> set[int] | None:
    if resp["assignment"] is None:
        return None
    return {p for tp in resp["assignment"]["topic_partitions"] for p in tp["partitions"]}


def _group_type(w: Wire) -> str | None:
    listed = w.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})["groups"]
    return next((g["group_type"] for g in listed if g["group_id"] == GROUP), None)


def _classic_group(bootstrap: str, b_gets: list[int] | None = None) -> tuple[dict[str, int], dict[str, set[int]]]:
    """Two classic members that joined together, synced with the leader's range assignment {0,1} / {2,3}.
    Returns their generations and partitions."""
    walls = [Wire(bootstrap, timeout=30) for _ in range(2)]
    try:
        first = _join(walls[0], "")  # a group of one, then the second joins: both rejoin together
        a = first["member_id"]
        assert _sync(walls[0], a, first["generation_id"], {a: _assignment([0, 1, 2, 3])})["error_code"] == 0
        with ThreadPoolExecutor(2) as pool:
            second = pool.submit(_join, walls[1], "")
            deadline = time.monotonic() + 30
            while _heartbeat(walls[0], a, first["generation_id"]) != ErrorCode.REBALANCE_IN_PROGRESS:
                assert time.monotonic() < deadline, "the second member's JoinGroup did not start a rebalance"
                time.sleep(0.05)
            rejoined = _join(walls[0], a, [0, 1, 2, 3])
            joined = second.result(30)
        b = joined["member_id"]
        generation = rejoined["generation_id"]
        assert rejoined["leader"] == a and joined["generation_id"] == generation
        plan = {a: _assignment([0, 1]), b: _assignment([2, 3] if b_gets is None else b_gets)}
        with ThreadPoolExecutor(2) as pool:
            synced_b = pool.submit(_sync, walls[1], b, generation)
            synced_a = _sync(walls[0], a, generation, plan)
            synced = (synced_a, synced_b.result(30))
        assert [s["error_code"] for s in synced] == [0, 0]
        return {a: generation, b: generation}, {a: _partitions(synced[0]["assignment"]),
                                                b: _partitions(synced[1]["assignment"])}  # fmt: skip
    finally:
        for w in walls:
            w.close()


def _commit(w: Wire, member_id: str, generation: int, offset: int, partition: int = 0) -> int:
    resp = w.call(ApiKey.OFFSET_COMMIT, 7, {
        "group_id": GROUP, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": partition, "committed_offset": offset, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})  # fmt: skip
    return resp["topics"][0]["partitions"][0]["error_code"]


def _fetched(w: Wire, partition: int = 0) -> int:
    resp = w.call(ApiKey.OFFSET_FETCH, 1, {"group_id": GROUP, "topics": [{"name": TOPIC,
                                                                          "partition_indexes": [partition]}]})
    return resp["topics"][0]["partitions"][0]["committed_offset"]


@pytest.mark.rill_broker_config(**CONFIGS)
def test_upgrade_serves_classic_members_then_downgrade(rill_broker) -> None:
    _create_topic(rill_broker.bootstrap_servers, TOPIC, 4)
    generations, owned = _classic_group(rill_broker.bootstrap_servers)
    (a, gen), (b, _) = generations.items()
    assert owned == {a: {0, 1}, b: {2, 3}}
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        assert _commit(w, a, gen, 5) == 0
        # A consumer-protocol member joins: the classic group becomes a consumer group, its members kept.
        c = _cg_heartbeat(w, "member-c", 0)
        assert c["error_code"] == 0, c
        assert c["member_epoch"] == gen + 1 and _assigned(c) == set()  # what it is to get is still held
        assert _group_type(w) == "consumer"
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [GROUP]})["groups"][0]
        assert {m["member_id"]: m["member_type"] for m in d["members"]} == {a: 0, b: 0, "member-c": 1}
        held = {m["member_id"]: {p for tp in m["assignment"]["topic_partitions"] for p in tp["partitions"]}
                for m in d["members"]}  # fmt: skip
        assert held == {a: {0, 1}, b: {2, 3}, "member-c": set()}
        assert _fetched(w) == 5  # the offsets stay with the group

        # The classic members learn of the rebalance by their heartbeat and rejoin, reporting what they own.
        assert _heartbeat(w, a, gen) == ErrorCode.REBALANCE_IN_PROGRESS
        for member in (a, b):
            joined = _join(w, member, sorted(owned[member]))
            assert joined["error_code"] == 0 and joined["leader"] == "" and joined["members"] == []
            synced = _sync(w, member, joined["generation_id"])
            assert synced["error_code"] == 0, synced
            kept = _partitions(synced["assignment"])
            assert kept <= owned[member]  # it is told to revoke, never to take another's partition
            owned[member] = kept
            generations[member] = joined["generation_id"]
            # Having revoked, it rejoins and reaches the new epoch.
            joined = _join(w, member, sorted(kept))
            assert joined["error_code"] == 0 and joined["generation_id"] == gen + 1
            synced = _sync(w, member, joined["generation_id"])
            owned[member] = _partitions(synced["assignment"])
            generations[member] = joined["generation_id"]
        c = _cg_heartbeat(w, "member-c", gen + 1)
        assert c["error_code"] == 0
        given = _assigned(c) or set()
        assert given and not given & (owned[a] | owned[b])
        assert owned[a] | owned[b] | given == {0, 1, 2, 3}
        assert _heartbeat(w, a, gen + 1) == 0
        # A classic member commits with its generation (its member epoch); a stale one is refused.
        assert _commit(w, a, gen + 1, 6) == 0
        assert _commit(w, a, gen, 7) == ErrorCode.ILLEGAL_GENERATION

        # The last consumer-protocol member leaves: only classic members remain, the group is classic again.
        assert _cg_heartbeat(w, "member-c", -1)["error_code"] == 0
        assert _group_type(w) == "classic"
        described = w.call(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [GROUP], "include_authorized_operations": False})
        group = described["groups"][0]
        assert (group["error_code"], group["group_state"], group["protocol_type"]) == (
            0, "PreparingRebalance", "consumer")
        assert sorted(m["member_id"] for m in group["members"]) == sorted([a, b])
        assert _heartbeat(w, a, gen + 1) == ErrorCode.REBALANCE_IN_PROGRESS
        assert _fetched(w) == 6
    finally:
        w.close()


@pytest.mark.parametrize("policy", [
    pytest.param(policy, marks=pytest.mark.rill_broker_config(**CONFIGS, **{"group.consumer.migration.policy": policy}))
    for policy in ("disabled", "downgrade")])  # fmt: skip
def test_the_policy_refuses_an_upgrade(rill_broker, policy: str) -> None:
    broker = rill_broker
    _create_topic(broker.bootstrap_servers, TOPIC, 4)
    generations, _ = _classic_group(broker.bootstrap_servers)
    w = Wire(broker.bootstrap_servers, timeout=30)
    try:
        refused = _cg_heartbeat(w, "member-c", 0)
        assert refused["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND, refused
        assert "online upgrade is disabled" in refused["error_message"]
        assert _group_type(w) == "classic"
        for member, generation in generations.items():  # nothing changed for the classic members
            assert _heartbeat(w, member, generation) == 0
    finally:
        w.close()


@pytest.mark.parametrize("max_size", [
    pytest.param(size, marks=pytest.mark.rill_broker_config(**CONFIGS, **{"group.consumer.max.size": str(size)}))
    for size in (1, 2)])  # fmt: skip
def test_a_classic_group_too_large_is_not_upgraded(rill_broker, max_size: int) -> None:
    broker = rill_broker
    _create_topic(broker.bootstrap_servers, TOPIC, 4)
    generations, _ = _classic_group(broker.bootstrap_servers)
    w = Wire(broker.bootstrap_servers, timeout=30)
    try:
        refused = _cg_heartbeat(w, "member-c", 0)
        # Larger than the limit: not upgraded; as large as the limit: upgraded, but the new member does not fit.
        expected = ErrorCode.GROUP_ID_NOT_FOUND if max_size < 2 else ErrorCode.GROUP_MAX_SIZE_REACHED
        assert refused["error_code"] == expected, refused
        assert _group_type(w) == "classic"  # a refused heartbeat changes nothing
        for member, generation in generations.items():
            assert _heartbeat(w, member, generation) == 0
    finally:
        w.close()


@pytest.mark.rill_broker_config(**CONFIGS)
def test_a_classic_join_with_another_protocol_type_is_refused(rill_broker) -> None:
    _create_topic(rill_broker.bootstrap_servers, TOPIC, 2)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        assert _cg_heartbeat(w, "member-c", 0)["error_code"] == 0
        assert _join(w, "", protocol_type="connect")["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        joined = _join(w, "")  # a classic consumer joins the consumer group
        assert joined["error_code"] == 0 and joined["generation_id"] == 2, joined
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [GROUP]})["groups"][0]
        assert len(d["members"]) == 2
    finally:
        w.close()


@pytest.mark.parametrize("kill", [False, True])
@pytest.mark.rill_broker_config(**CONFIGS)
def test_a_restarted_broker_keeps_the_mixed_group(rill_broker, kill: bool) -> None:
    _create_topic(rill_broker.bootstrap_servers, TOPIC, 4)
    generations, _ = _classic_group(rill_broker.bootstrap_servers)
    (a, gen), (b, _) = generations.items()
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    assert _commit(w, a, gen, 3) == 0
    c = _cg_heartbeat(w, "member-c", 0)
    assert c["error_code"] == 0
    w.close()
    rill_broker.restart(kill=kill)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        assert _group_type(w) == "consumer"
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [GROUP]})["groups"][0]
        held = {m["member_id"]: {p for tp in m["assignment"]["topic_partitions"] for p in tp["partitions"]}
                for m in d["members"]}  # fmt: skip
        assert held == {a: {0, 1}, b: {2, 3}, "member-c": set()}
        assert (d["group_epoch"], d["assignment_epoch"]) == (gen + 1, gen + 1)
        # The classic members carry on at their generation: told to rejoin, as before the restart.
        assert _heartbeat(w, a, gen) == ErrorCode.REBALANCE_IN_PROGRESS
        joined = _join(w, a, [0, 1])
        assert joined["error_code"] == 0
        assert _fetched(w) == 3
    finally:
        w.close()


@pytest.mark.rill_broker_config(**CONFIGS, **{"group.consumer.migration.policy": "upgrade"})
def test_without_downgrades_the_group_keeps_serving_its_classic_members(rill_broker) -> None:
    _create_topic(rill_broker.bootstrap_servers, TOPIC, 4)
    generations, _ = _classic_group(rill_broker.bootstrap_servers)
    (a, gen), (b, _) = generations.items()
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        assert _cg_heartbeat(w, "member-c", 0)["error_code"] == 0
        assert _cg_heartbeat(w, "member-c", -1)["error_code"] == 0  # the last consumer-protocol member leaves
        assert _group_type(w) == "consumer"
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [GROUP]})["groups"][0]
        assert {m["member_id"]: m["member_type"] for m in d["members"]} == {a: 0, b: 0}
        assert _heartbeat(w, a, gen) == ErrorCode.REBALANCE_IN_PROGRESS
        joined = _join(w, a, [0, 1])
        assert joined["error_code"] == 0 and joined["generation_id"] == d["group_epoch"]
        assert _partitions(_sync(w, a, joined["generation_id"])["assignment"]) == {0, 1}
        # A classic member leaving is removed like any member; the group stays what it is.
        left = w.call(ApiKey.LEAVE_GROUP, 3, {"group_id": GROUP, "members": [{"member_id": b,
                                                                             "group_instance_id": None}]})
        assert left["error_code"] == 0 and left["members"][0]["error_code"] == 0
        assert _group_type(w) == "consumer"
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [GROUP]})["groups"][0]
        assert [m["member_id"] for m in d["members"]] == [a]
    finally:
        w.close()


@pytest.mark.rill_broker_config(**CONFIGS)
def test_a_conversion_whose_write_fails_leaves_the_classic_group(rill_broker) -> None:
    _create_topic(rill_broker.bootstrap_servers, TOPIC, 4)
    generations, _ = _classic_group(rill_broker.bootstrap_servers)
    (a, gen), (b, _) = generations.items()
    consumer = rill_broker.broker.services.group_coordinator.consumer
    written = consumer._write

    async def fail_once(group_id: str, kvs: list[Any]) -> None:  # the seam: the conversion's write fails
        consumer._write = written
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the write failed")

    consumer._write = fail_once
    walls = [Wire(rill_broker.bootstrap_servers, timeout=30) for _ in range(2)]
    try:
        w = walls[0]
        assert _cg_heartbeat(w, "member-c", 0)["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert _group_type(w) == "classic"
        # The classic group goes on with a rebalance its members join again.
        assert _heartbeat(w, a, gen) == ErrorCode.REBALANCE_IN_PROGRESS
        with ThreadPoolExecutor(2) as pool:
            rejoined = [pool.submit(_join, walls[i], m, []) for i, m in enumerate((a, b))]
            answers = [f.result(30) for f in rejoined]
        assert [r["error_code"] for r in answers] == [0, 0] and answers[0]["generation_id"] == gen + 1
        # Nothing of it was written: the next consumer-protocol member converts the group.
        assert _cg_heartbeat(w, "member-c", 0)["error_code"] == 0
        assert _group_type(w) == "consumer"
    finally:
        for w in walls:
            w.close()


@pytest.mark.rill_broker_config(**CONFIGS)
def test_a_static_classic_member_of_a_consumer_group_restarts_into_its_place(rill_broker) -> None:
    _create_topic(rill_broker.bootstrap_servers, TOPIC, 2)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)

    def join_static(member_id: str) -> dict[str, Any]:
        return w.call(ApiKey.JOIN_GROUP, 5, {
            "group_id": GROUP, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000, "member_id": member_id,
            "group_instance_id": "static-1", "protocol_type": "consumer", "reason": None,
            "protocols": [{"name": "range", "metadata": _subscription()}]})  # fmt: skip

    def sync_static(member_id: str, generation: int) -> dict[str, Any]:
        return w.call(ApiKey.SYNC_GROUP, 5, {
            "group_id": GROUP, "generation_id": generation, "member_id": member_id, "group_instance_id": "static-1",
            "protocol_type": "consumer", "protocol_name": "range", "assignments": []})  # fmt: skip

    try:
        c = _cg_heartbeat(w, "member-c", 0)
        assert (c["error_code"], _assigned(c)) == (0, {0, 1})
        topic_id = c["assignment"]["topic_partitions"][0]["topic_id"]
        joined = join_static("")
        static, generation = joined["member_id"], joined["generation_id"]
        assert joined["error_code"] == 0 and generation == 2
        assert _partitions(sync_static(static, generation)["assignment"]) == set()  # C still holds its share
        c = _cg_heartbeat(w, "member-c", 1)
        kept = sorted(_assigned(c) or [])
        assert len(kept) == 1
        c = w.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {
            "group_id": GROUP, "member_id": "member-c", "member_epoch": 1, "rebalance_timeout_ms": -1,
            "topic_partitions": [{"topic_id": topic_id, "partitions": kept}]})  # fmt: skip
        assert c["member_epoch"] == 2
        hb = w.call(ApiKey.HEARTBEAT, 3, {"group_id": GROUP, "generation_id": generation, "member_id": static,
                                          "group_instance_id": "static-1"})  # fmt: skip
        assert hb["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS  # what it waited for is free now
        joined = join_static(static)
        given = _partitions(sync_static(static, joined["generation_id"])["assignment"])
        assert given == {0, 1} - set(kept)
        # The process restarts: a new member id takes the static member's place, epoch and partitions.
        again = join_static("")
        assert again["error_code"] == 0 and again["member_id"] != static
        assert again["generation_id"] == joined["generation_id"]
        assert _partitions(sync_static(again["member_id"], again["generation_id"])["assignment"]) == given
        stale = w.call(ApiKey.HEARTBEAT, 3, {"group_id": GROUP, "generation_id": generation, "member_id": static,
                                             "group_instance_id": "static-1"})  # fmt: skip
        assert stale["error_code"] == ErrorCode.FENCED_INSTANCE_ID
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [GROUP]})["groups"][0]
        assert sorted(m["member_id"] for m in d["members"]) == sorted(["member-c", again["member_id"]])
    finally:
        w.close()


@pytest.mark.rill_broker_config(**CONFIGS)
def test_a_static_member_restarting_with_the_classic_protocol_downgrades_the_group(rill_broker) -> None:
    _create_topic(rill_broker.bootstrap_servers, TOPIC, 4)
    generations, _ = _classic_group(rill_broker.bootstrap_servers)
    (a, _), (b, _) = generations.items()
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        joined = w.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {
            "group_id": GROUP, "member_id": "member-s", "member_epoch": 0, "instance_id": "static-s",
            "rebalance_timeout_ms": 10_000, "subscribed_topic_names": [TOPIC], "topic_partitions": []})  # fmt: skip
        assert joined["error_code"] == 0 and _group_type(w) == "consumer"
        left = w.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {
            "group_id": GROUP, "member_id": "member-s", "member_epoch": -2, "instance_id": "static-s"})  # fmt: skip
        assert left["error_code"] == 0 and _group_type(w) == "consumer"  # a static member leaving keeps its place
        # It comes back with the classic protocol: the last consumer-protocol member is gone, the group is classic.
        back = w.call(ApiKey.JOIN_GROUP, 5, {
            "group_id": GROUP, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000, "member_id": "",
            "group_instance_id": "static-s", "protocol_type": "consumer", "reason": None,
            "protocols": [{"name": "range", "metadata": _subscription()}]})  # fmt: skip
        assert back["error_code"] == 0, back
        assert _group_type(w) == "classic"
        group = w.call(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [GROUP], "include_authorized_operations": False})
        described = group["groups"][0]
        assert described["group_state"] == "PreparingRebalance"
        assert sorted(m["member_id"] for m in described["members"]) == sorted([a, b, back["member_id"]])
    finally:
        w.close()


def _listed(w: Wire) -> list[str]:
    listed = w.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})["groups"]
    return [g["group_type"] for g in listed if g["group_id"] == GROUP]


def _rejoin_classic(bootstrap: str, a: str, b: str) -> int:
    """Both classic members rejoin together and sync (the leader's plan {0,1} / {2,3}): the generation."""
    walls = [Wire(bootstrap, timeout=30) for _ in range(2)]
    try:
        with ThreadPoolExecutor(2) as pool:
            rejoined = [pool.submit(_join, walls[i], m, []) for i, m in enumerate((a, b))]
            answers = [f.result(30) for f in rejoined]
        assert [r["error_code"] for r in answers] == [0, 0]
        generation = answers[0]["generation_id"]
        leader = answers[0]["leader"]
        plan = {a: _assignment([0, 1]), b: _assignment([2, 3])}
        with ThreadPoolExecutor(2) as pool:
            synced = [pool.submit(_sync, walls[i], m, generation, plan if m == leader else None)
                      for i, m in enumerate((a, b))]  # fmt: skip
            assert [f.result(30)["error_code"] for f in synced] == [0, 0]
        return int(generation)
    finally:
        for w in walls:
            w.close()


@pytest.mark.parametrize("undo_fails", [False, True])
@pytest.mark.rill_broker_config(**CONFIGS)
def test_a_conversion_written_but_answered_as_failed_leaves_one_group_after_a_crash(
    rill_broker, undo_fails: bool
) -> None:
    """The conversion's batch reaches the log but its write is answered as failed (a replication timeout: the
    records may still be committed): the coordinator carries on with the classic group. A SIGKILLed coordinator
    must replay one group, the form the log says last (also when the write undoing the conversion failed too),
    and a later conversion must not bring back a member of the failed one."""
    _create_topic(rill_broker.bootstrap_servers, TOPIC, 4)
    generations, _ = _classic_group(rill_broker.bootstrap_servers)
    (a, gen), (b, _) = generations.items()
    consumer = rill_broker.broker.services.group_coordinator.consumer
    written = consumer._write

    async def applied_then_failed(group_id: str, kvs: list[Any]) -> None:  # the seam: applies, then fails
        consumer._write = undo_failed if undo_fails else written
        await written(group_id, kvs)
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the write timed out")

    async def undo_failed(group_id: str, kvs: list[Any]) -> None:  # then the undoing write fails, not applied
        consumer._write = written
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the write failed")

    consumer._write = applied_then_failed
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        assert _cg_heartbeat(w, "member-c", 0)["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert _listed(w) == ["classic"]
        assert _heartbeat(w, a, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    finally:
        w.close()
    regen = _rejoin_classic(rill_broker.bootstrap_servers, a, b)
    assert regen == gen + 1
    rill_broker.restart(kill=True)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        assert _listed(w) == ["classic"]  # one group, the classic one the log ends with
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [GROUP]})["groups"][0]
        assert d["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        assert _heartbeat(w, a, regen) == 0
        if undo_fails:
            return
        # Another consumer-protocol member converts the group: its members are the classic ones and itself.
        assert _cg_heartbeat(w, "member-d", 0)["error_code"] == 0
    finally:
        w.close()
    rill_broker.restart(kill=True)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        assert _listed(w) == ["consumer"]
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [GROUP]})["groups"][0]
        assert sorted(m["member_id"] for m in d["members"]) == sorted([a, b, "member-d"])
    finally:
        w.close()


@pytest.mark.rill_broker_config(**CONFIGS)
def test_a_downgrade_written_but_answered_as_failed_keeps_the_consumer_group_after_a_crash(rill_broker) -> None:
    """The downgrade's batch (the consumer group's tombstones, the classic group's metadata) reaches the log but
    its write is answered as failed: the coordinator keeps the consumer group, whose members go on. A SIGKILLed
    coordinator must replay that consumer group whole, never the classic group beside it nor a consumer group
    without the members the failed batch tombstoned."""
    _create_topic(rill_broker.bootstrap_servers, TOPIC, 4)
    generations, _ = _classic_group(rill_broker.bootstrap_servers)
    (a, gen), (b, _) = generations.items()
    consumer = rill_broker.broker.services.group_coordinator.consumer
    written = consumer._write

    async def applied_then_failed(group_id: str, kvs: list[Any]) -> None:  # the seam: applies, then fails
        consumer._write = written
        await written(group_id, kvs)
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the write timed out")

    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        assert _cg_heartbeat(w, "member-c", 0)["error_code"] == 0
        consumer._write = applied_then_failed
        assert _cg_heartbeat(w, "member-c", -1)["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert _listed(w) == ["consumer"]
        assert _cg_heartbeat(w, "member-d", 0)["error_code"] == 0  # the consumer group goes on
    finally:
        w.close()
    rill_broker.restart(kill=True)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        assert _listed(w) == ["consumer"]
        d = w.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [GROUP]})["groups"][0]
        assert sorted(m["member_id"] for m in d["members"]) == sorted([a, b, "member-c", "member-d"])
        assert _heartbeat(w, a, gen) in (0, ErrorCode.REBALANCE_IN_PROGRESS)
    finally:
        w.close()


def test_a_deleted_group_stays_deleted_after_a_crash_with_a_commit_in_flight(rill_broker) -> None:
    """DeleteGroups tombstones the offsets the group has; a commit appended before it but not yet replicated is
    not among them, and the group's tombstone, written after it, is what removes it (in memory, the commit is
    applied to the group the tombstone then drops). A replay must agree: the deleted group never comes back with
    that offset (a classic group's tombstone keeps the offsets only in a conversion's batch)."""
    _create_topic(rill_broker.bootstrap_servers, TOPIC, 2)
    rm = rill_broker.broker.services.replica_manager
    manager = rill_broker.broker.services.group_coordinator.manager
    committed = rm.committed
    held = [True]

    def holding(tp: Any, end_offset: int) -> Any:  # the seam: the high watermark of __consumer_offsets waits
        return None if held[0] and tp.topic == "__consumer_offsets" else committed(tp, end_offset)

    walls = [Wire(rill_broker.bootstrap_servers, timeout=30) for _ in range(3)]
    try:
        w = walls[0]
        assert _commit(w, "", -1, 1) == 0  # the group exists (a simple consumer's commit)
        partition = next(tp for tp in rm.partitions() if tp.topic == "__consumer_offsets"
                         and manager.partition_for(GROUP) == tp.partition)  # fmt: skip
        rm.committed = holding
        with ThreadPoolExecutor(2) as pool:
            commit = pool.submit(_commit, walls[1], "", -1, 5, 1)  # another partition, in flight
            deadline = time.monotonic() + 30
            while manager.writes.pending(partition) < 1:
                assert time.monotonic() < deadline, "the commit was not appended"
                time.sleep(0.01)
            deleted = pool.submit(lambda: walls[2].call(ApiKey.DELETE_GROUPS, 2, {"groups_names": [GROUP]}))
            while manager.writes.pending(partition) < 2:
                assert time.monotonic() < deadline, "the group's tombstones were not appended"
                time.sleep(0.01)
            held[0] = False
            assert commit.result(30) in (0, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            assert deleted.result(30)["results"][0]["error_code"] == 0
        assert _fetched(w, 1) == -1
    finally:
        rm.committed = committed
        for w in walls:
            w.close()
    rill_broker.restart(kill=True)
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        assert _fetched(w, 1) == -1
        assert _listed(w) == []
    finally:
        w.close()


@pytest.mark.rill_broker_config(**CONFIGS)
def test_a_classic_member_leaving_while_the_upgrade_is_written_is_not_kept(rill_broker) -> None:
    """A classic member's LeaveGroup that arrives while the upgrade's batch is being written waits for it and
    leaves the consumer group; before, it left the frozen classic group, and the consumer group kept it (holding
    its partitions) until its session expired."""
    import asyncio
    import threading

    _create_topic(rill_broker.bootstrap_servers, TOPIC, 4)
    generations, _ = _classic_group(rill_broker.bootstrap_servers)
    (a, _), (b, _) = generations.items()
    consumer = rill_broker.broker.services.group_coordinator.consumer
    written = consumer._write
    reached, gate = threading.Event(), threading.Event()

    async def held(group_id: str, kvs: list[Any]) -> None:  # the seam: the conversion's write waits for the test
        consumer._write = written
        reached.set()
        await asyncio.to_thread(gate.wait, 30)
        await written(group_id, kvs)

    consumer._write = held
    walls = [Wire(rill_broker.bootstrap_servers, timeout=30) for _ in range(2)]
    try:
        with ThreadPoolExecutor(2) as pool:
            upgrade = pool.submit(_cg_heartbeat, walls[0], "member-c", 0)
            assert reached.wait(30)
            left = pool.submit(walls[1].call, ApiKey.LEAVE_GROUP, 3, {
                "group_id": GROUP, "members": [{"member_id": b, "group_instance_id": None}]})  # fmt: skip
            deadline = time.monotonic() + 30  # the LeaveGroup is answered, or waits for the group's lock
            while not left.done() and consumer._locks.get(GROUP, [None, 0])[1] < 2:
                assert time.monotonic() < deadline, "the LeaveGroup did not reach the broker"
                time.sleep(0.01)
            gate.set()
            assert upgrade.result(30)["error_code"] == 0
            answer = left.result(30)
        assert answer["error_code"] == 0 and answer["members"][0]["error_code"] == 0
        d = walls[0].call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [GROUP]})["groups"][0]
        assert sorted(m["member_id"] for m in d["members"]) == sorted([a, "member-c"])
    finally:
        gate.set()
        for w in walls:
            w.close()


@pytest.mark.rill_broker_config(**CONFIGS)
def test_a_classic_group_whose_assignments_overlap_is_not_upgraded(rill_broker) -> None:
    """The classic leader chose the assignment (a client's bytes): one giving a partition to two members cannot
    become a consumer group, where a partition has one owner at an epoch (Kafka fails such an upgrade too). Before,
    both held it and the one revoking it freed it while the other still read it."""
    _create_topic(rill_broker.bootstrap_servers, TOPIC, 4)
    _, owned = _classic_group(rill_broker.bootstrap_servers, b_gets=[1, 2, 3])
    first, second = owned.values()
    assert first & second == {1}
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        refused = _cg_heartbeat(w, "member-c", 0)
        assert refused["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        assert "overlap" in (refused["error_message"] or "")
        assert _listed(w) == ["classic"]
    finally:
        w.close()
