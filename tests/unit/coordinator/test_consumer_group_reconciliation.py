"""The consumer group protocol's pure parts: the assignors, and reconciliation under any order of joins, leaves
and heartbeats (a partition is never held by two members at once, and every member reaches its target)."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from rill.coordinator.group import consumer_group_records as records
from rill.coordinator.group.consumer_group import ConsumerGroup, ConsumerGroupMember, MemberState, count
from rill.coordinator.group.consumer_group_assignors import ASSIGNORS, AssignmentMember, range_assign, uniform_assign
from rill.coordinator.group.consumer_group_reconciliation import reconcile

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
NAMES = {T1: "a", T2: "b"}


def _members(n: int, topics: frozenset[uuid.UUID] = frozenset({T1, T2})) -> list[AssignmentMember]:
    return [AssignmentMember(f"m{i}", None, topics) for i in range(n)]


@given(st.integers(1, 7), st.integers(1, 12), st.integers(1, 12))
def test_uniform_is_balanced_and_complete(n: int, p1: int, p2: int) -> None:
    out = uniform_assign(_members(n), {T1: p1, T2: p2}, NAMES, {})
    counts = sorted(count(a) for a in out.values())
    assert counts[-1] - counts[0] <= 1
    held = [(t, p) for a in out.values() for t, ps in a.items() for p in ps]
    assert len(held) == len(set(held)) == p1 + p2


def test_uniform_is_sticky() -> None:
    first = uniform_assign(_members(2), {T1: 6}, NAMES, {})
    second = uniform_assign(_members(3), {T1: 6}, NAMES, first)
    for member in ("m0", "m1"):  # the old members keep two of their three partitions
        assert len(second[member][T1] & first[member][T1]) == 2


def test_range_gives_contiguous_ranges_of_co_partitioned_topics() -> None:
    out = range_assign(_members(2), {T1: 5, T2: 5}, NAMES, {})
    assert out["m0"] == {T1: frozenset({0, 1, 2}), T2: frozenset({0, 1, 2})}
    assert out["m1"] == {T1: frozenset({3, 4}), T2: frozenset({3, 4})}


def test_only_subscribers_get_a_topic() -> None:
    members = [AssignmentMember("m0", None, frozenset({T1})), AssignmentMember("m1", None, frozenset({T1, T2}))]
    for assign in ASSIGNORS.values():
        out = assign(members, {T1: 2, T2: 4}, NAMES, {})
        assert T2 not in out["m0"] and len(out["m1"][T2]) == 4


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["join", "leave", "beat"]), st.integers(0, 4)), min_size=1, max_size=60),
       st.sampled_from(sorted(ASSIGNORS)))  # fmt: skip
def test_no_partition_is_ever_held_twice(steps: list[tuple[str, int]], assignor: str) -> None:
    group = ConsumerGroup("g")
    partitions = {T1: 5, T2: 3}
    owned: dict[str, dict[uuid.UUID, frozenset[int]]] = {}  # what each client holds (what it was last told)

    def assign() -> None:
        group.group_epoch += 1
        inputs = [AssignmentMember(m, None, frozenset(partitions)) for m in sorted(group.members)]
        group.target = dict(ASSIGNORS[assignor](inputs, partitions, NAMES, group.target))
        group.assignment_epoch = group.group_epoch

    def beat(member_id: str) -> None:
        member = group.members[member_id]
        target = group.target.get(member_id, {})
        new = reconcile(member, target, group.assignment_epoch, group.owner_epoch, owned[member_id])
        group.put_member(new)
        owned[member_id] = dict(new.assigned)  # the client takes its assignment (and revokes the rest)

    for action, i in steps + [("beat", j) for _ in range(4) for j in range(5)]:  # then rounds of heartbeats
        member_id = f"m{i}"
        if action == "join" and member_id not in group.members:
            group.put_member(ConsumerGroupMember(member_id=member_id))
            owned[member_id] = {}
            assign()
        elif action == "leave" and member_id in group.members:
            group.remove_member(member_id)
            del owned[member_id]
            assign()
        elif action == "beat" and member_id in group.members:
            beat(member_id)
        held = [(t, p) for a in owned.values() for t, ps in a.items() for p in ps]
        assert len(held) == len(set(held)), (held, owned)
    # Heartbeats alone converge every member on its target.
    for member_id, member in group.members.items():
        assert member.state == MemberState.STABLE and member.member_epoch == group.assignment_epoch
        assert {t: ps for t, ps in owned[member_id].items() if ps} == {
            t: ps for t, ps in group.target.get(member_id, {}).items() if ps
        }


def test_records_replay_into_the_same_group() -> None:
    member = ConsumerGroupMember(member_id="m", client_id="c", subscribed_topic_names=("a",), rebalance_timeout_ms=5,
                                 member_epoch=3, previous_member_epoch=2, state=MemberState.UNREVOKED_PARTITIONS,
                                 assigned={T1: frozenset({0})}, pending_revocation={T1: frozenset({1})})  # fmt: skip
    written = [
        records.group_epoch_record("g", 3),
        records.member_metadata_record("g", member),
        records.target_member_record("g", "m", {T1: frozenset({0})}),
        records.target_epoch_record("g", 3),
        records.current_assignment_record("g", member),
        (b"\x00\x05garbage", b"\x00\x00junk"),  # unreadable: skipped
    ]
    replay = records.ConsumerGroupReplay()
    for key, value in written:
        replay.replay(key, value)
    group = replay.finish()["g"]
    assert (group.group_epoch, group.assignment_epoch) == (3, 3)
    assert group.members["m"] == member and group.target["m"] == {T1: frozenset({0})}
    assert group.owner_epoch(T1, 1) == 3
    replay = records.ConsumerGroupReplay()
    for key, value in [*written, *records.member_tombstones("g", "m")]:
        replay.replay(key, value)
    assert replay.finish()["g"].members == {}
