"""Moving one member of a consumer group towards its target assignment (Kafka's ``CurrentAssignmentBuilder``).

The rules keep a partition from ever being owned by two members at once:

* a member whose target takes partitions away keeps its epoch and is told its reduced assignment; it stays in
  UNREVOKED_PARTITIONS until a heartbeat reports that it no longer owns any of them;
* a partition the target gives a member is handed over only once no member holds it any more (its owner
  epoch is -1); until then the member is in UNRELEASED_PARTITIONS at the new epoch, and gets the partition on
  a later heartbeat;
* otherwise the member is STABLE at the assignment epoch.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping

from rill.coordinator.group.consumer_group import (
    Assignment,
    ConsumerGroupMember,
    MemberState,
    normalize,
)

OwnerEpoch = Callable[[uuid.UUID, int], int]


def owns_any(owned: Mapping[uuid.UUID, Iterable[int]] | None, revoking: Assignment) -> bool:
    """Whether a member that reported ``owned`` (None: not reported in this heartbeat) may still own one of
    the partitions in ``revoking``. Not reported counts as still owned."""
    if owned is None:
        return True
    for topic_id, partitions in owned.items():
        pending = revoking.get(topic_id)
        if pending and any(p in pending for p in partitions):
            return True
    return False


def reconcile(
    member: ConsumerGroupMember,
    target: Assignment,
    assignment_epoch: int,
    owner_epoch: OwnerEpoch,
    owned: Mapping[uuid.UUID, Iterable[int]] | None,
) -> ConsumerGroupMember:
    """The next version of ``member`` given its ``target`` at ``assignment_epoch`` and the partitions it
    reports it ``owned`` (None when the heartbeat did not say)."""
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return member
        # Everything pending is revoked: the member may move on towards the target.
        return _next(member, member.member_epoch, target, assignment_epoch, owner_epoch, owned)
    if member.state == MemberState.STABLE and member.member_epoch == assignment_epoch:
        return member
    # STABLE behind the target, or UNRELEASED_PARTITIONS (possibly some of them released since).
    return _next(member, member.member_epoch, target, assignment_epoch, owner_epoch, owned)


def _next(
    member: ConsumerGroupMember,
    member_epoch: int,
    target: Assignment,
    assignment_epoch: int,
    owner_epoch: OwnerEpoch,
    owned: Mapping[uuid.UUID, Iterable[int]] | None,
) -> ConsumerGroupMember:
    assigned: dict[uuid.UUID, set[int]] = {}
    revoking: dict[uuid.UUID, set[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        keep = set(current & wanted)
        for p in wanted - current:
            if owner_epoch(topic_id, p) == -1:
                keep.add(p)
            else:
                unreleased = True
        assigned[topic_id] = keep
        revoking[topic_id] = set(current - wanted)
    new_assigned = normalize(assigned)
    new_revoking = normalize(revoking)
    if new_revoking and owns_any(owned, new_revoking):
        return member.replace(
            state=MemberState.UNREVOKED_PARTITIONS,
            member_epoch=member_epoch,
            previous_member_epoch=member.member_epoch,
            assigned=new_assigned,
            pending_revocation=new_revoking,
        )
    return member.replace(
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        member_epoch=assignment_epoch,
        previous_member_epoch=member.member_epoch,
        assigned=new_assigned,
        pending_revocation={},
    )
