"""The server-side assignors of consumer groups (``group.consumer.assignors``; a member names one with
``group.remote.assignor``): ``uniform`` and ``range``, as Kafka's ``UniformAssignor`` and ``RangeAssignor``.

Both take the members' subscriptions and the subscribed topics' partition counts, and return each member's
share of the target assignment (topic id -> partitions).

* ``uniform`` spreads all subscribed partitions as evenly as the subscriptions allow and is sticky: a partition
  stays with the member that has it in the current target while that keeps the balance.
* ``range`` gives each member, per topic, a contiguous range of partitions in member order (the first
  ``partitions % members`` get one more), so members with the same subscriptions get the same partition
  numbers of co-partitioned topics.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rill.coordinator.group.consumer_group import Assignment, normalize

UNIFORM = "uniform"
RANGE = "range"


@dataclass(frozen=True, slots=True)
class AssignmentMember:
    member_id: str
    instance_id: str | None
    topics: frozenset[uuid.UUID]  # the subscribed topics that exist


# (members, partition count per topic id, topic id -> name, current target) -> target per member
Assignor = Callable[
    [list[AssignmentMember], Mapping[uuid.UUID, int], Mapping[uuid.UUID, str], Mapping[str, Assignment]],
    dict[str, Assignment],
]


def _order(member: AssignmentMember) -> tuple[str, str]:
    # Static members keep their place across restarts (a new member id, the same instance id).
    return (member.instance_id or "", member.member_id)


def range_assign(
    members: list[AssignmentMember],
    partitions: Mapping[uuid.UUID, int],
    names: Mapping[uuid.UUID, str],
    current: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    result: dict[str, dict[uuid.UUID, set[int]]] = {m.member_id: {} for m in members}
    for topic_id in sorted(partitions, key=lambda t: names.get(t, "")):
        subscribers = sorted((m for m in members if topic_id in m.topics), key=_order)
        if not subscribers:
            continue
        n = partitions[topic_id]
        quota, extra = divmod(n, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            size = quota + (1 if i < extra else 0)
            if size:
                result[m.member_id][topic_id] = set(range(start, start + size))
            start += size
    return {mid: normalize(a) for mid, a in result.items()}


def uniform_assign(
    members: list[AssignmentMember],
    partitions: Mapping[uuid.UUID, int],
    names: Mapping[uuid.UUID, str],
    current: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    by_id = {m.member_id: m for m in members}
    owner: dict[tuple[uuid.UUID, int], str] = {}
    load: dict[str, int] = dict.fromkeys(by_id, 0)
    subscribed = {t for m in members for t in m.topics}
    all_partitions = [
        (t, p) for t in sorted(partitions, key=lambda t: names.get(t, "")) if t in subscribed
        for p in range(partitions[t])
    ]  # fmt: skip
    total = len(all_partitions)
    # The most each member should hold when the subscriptions allow an even spread.
    ceiling = -(-total // len(members)) if members else 0
    # 1. Stickiness: keep what the current target gives a member that is still subscribed, up to the ceiling.
    for member_id in sorted(current):
        member = by_id.get(member_id)
        if member is None:
            continue
        for topic_id in sorted(current[member_id], key=lambda t: names.get(t, "")):
            if topic_id not in member.topics:
                continue
            for p in sorted(current[member_id][topic_id]):
                if p < partitions.get(topic_id, 0) and (topic_id, p) not in owner and load[member_id] < ceiling:
                    owner[(topic_id, p)] = member_id
                    load[member_id] += 1
    # 2. The rest, each to the least loaded member subscribed to its topic.
    for tp in all_partitions:
        if tp in owner:
            continue
        eligible = [m.member_id for m in members if tp[0] in m.topics]
        chosen = min(eligible, key=lambda mid: (load[mid], _order(by_id[mid])))
        owner[tp] = chosen
        load[chosen] += 1
    # 3. Balance: move partitions from the most to the least loaded eligible member while that narrows the gap
    #    (needed only when subscriptions differ).
    moved = True
    while moved:
        moved = False
        by_load = sorted(owner.items(), key=lambda item: (-load[item[1]], names.get(item[0][0], ""), item[0][1]))
        for tp, holder in by_load:
            eligible = [m.member_id for m in members if tp[0] in m.topics and m.member_id != holder]
            if not eligible:
                continue
            target = min(eligible, key=lambda mid: (load[mid], _order(by_id[mid])))
            if load[holder] - load[target] > 1:
                owner[tp] = target
                load[holder] -= 1
                load[target] += 1
                moved = True
                break
    result: dict[str, dict[uuid.UUID, set[int]]] = {m.member_id: {} for m in members}
    for (topic_id, p), member_id in owner.items():
        result[member_id].setdefault(topic_id, set()).add(p)
    return {mid: normalize(a) for mid, a in result.items()}


ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform_assign, RANGE: range_assign}
