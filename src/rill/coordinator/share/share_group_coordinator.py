"""Share-group membership (KIP-932): ShareGroupHeartbeat with the simple assignor.

A member joins with epoch 0 and its subscribed topics, heartbeats with the epoch it was given, and leaves with
epoch -1. Every member is assigned every partition of the topics it subscribes to (Kafka's simple assignor does
so for groups no larger than their partitions allow sharing; records, not partitions, are divided between
members by the share-partition leaders). The group epoch moves when membership, a subscription or a subscribed
topic's partition count changes; a member's epoch follows it on its next heartbeat, with the new assignment.

A member that misses ``group.share.session.timeout.ms`` of heartbeats is removed, and the records it held are
released (``on_member_gone``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rill.errors import ErrorCode

LEAVE_EPOCH = -1
JOIN_EPOCH = 0

# (topic name -> (topic id, partition count)) for the topics the cluster has
TopicsView = Callable[[], Mapping[str, tuple[uuid.UUID, int]]]


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    subscribed: tuple[str, ...]
    rack_id: str | None
    client_id: str
    client_host: str
    deadline_ms: int
    assignment: dict[uuid.UUID, list[int]] = field(default_factory=dict)
    sent_epoch: int = -1  # the epoch whose assignment the member was last sent


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    topics_seen: dict[str, int] = field(default_factory=dict)  # subscribed topic -> partition count assigned
    # the topics whose share-partition state the group may have (assigned, or start offsets altered): kept in
    # ``__consumer_offsets`` so that the group's state can be described and deleted after a failover
    state_topics: dict[str, int] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    assignment: dict[uuid.UUID, list[int]] | None = None


class ShareGroupCoordinator:
    def __init__(
        self,
        topics: TopicsView,
        *,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        max_size: int,
        on_member_gone: Callable[[str, str], None],
    ) -> None:
        self._topics = topics
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self._on_member_gone = on_member_gone
        self.groups: dict[str, ShareGroup] = {}

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        subscribed: list[str] | None,
        rack_id: str | None,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> HeartbeatResult:
        if not group_id:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if member_epoch < LEAVE_EPOCH:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, f"MemberEpoch {member_epoch} is invalid.")
        if member_epoch != JOIN_EPOCH and not member_id:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        if member_epoch == JOIN_EPOCH and not subscribed:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        group = self.groups.get(group_id)
        if group is not None:
            self.expire_members(group, now_ms)
        if member_epoch == LEAVE_EPOCH:
            if group is None or member_id not in group.members:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, None, member_id, LEAVE_EPOCH)
            self._remove(group, member_id)
            return HeartbeatResult(ErrorCode.NO_ERROR, None, member_id, LEAVE_EPOCH)
        if member_epoch == JOIN_EPOCH:
            group = self.groups.setdefault(group_id, ShareGroup(group_id))
            member_id = member_id or uuid.uuid4().hex
            member = group.members.get(member_id)
            if member is None:
                if len(group.members) >= self.max_size:
                    return HeartbeatResult(ErrorCode.GROUP_MAX_SIZE_REACHED, "The group is full.")
                member = ShareMember(member_id, 0, (), rack_id, client_id, client_host, 0)
                group.members[member_id] = member
                group.group_epoch += 1
            member.sent_epoch = -1  # a (re)join is always answered with its assignment
        else:
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not in the group.")
            if member_epoch != member.member_epoch:
                return HeartbeatResult(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"Epoch {member_epoch} is not the member's epoch {member.member_epoch}.",
                )
        member.deadline_ms = now_ms + self.session_timeout_ms
        if rack_id is not None and rack_id != member.rack_id:
            member.rack_id = rack_id
            group.group_epoch += 1  # (its record changes)
        if subscribed is not None and tuple(sorted(set(subscribed))) != member.subscribed:
            member.subscribed = tuple(sorted(set(subscribed)))
            group.group_epoch += 1
        self._refresh(group)
        member.member_epoch = group.group_epoch
        assignment = None
        if member.sent_epoch != member.member_epoch:
            assignment = member.assignment
            member.sent_epoch = member.member_epoch
        return HeartbeatResult(ErrorCode.NO_ERROR, None, member.member_id, member.member_epoch, assignment)

    def expire_members(self, group: ShareGroup, now_ms: int) -> None:
        for member_id in [m.member_id for m in group.members.values() if m.deadline_ms <= now_ms]:
            self._remove(group, member_id)

    def expire_all(self, now_ms: int) -> None:
        for group in list(self.groups.values()):
            self.expire_members(group, now_ms)

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    def _remove(self, group: ShareGroup, member_id: str) -> None:
        del group.members[member_id]
        group.group_epoch += 1
        self._on_member_gone(group.group_id, member_id)

    def refresh(self, group: ShareGroup) -> None:
        """Compute the members' assignments again (a group replayed from its records has none yet)."""
        self._refresh(group)

    def _refresh(self, group: ShareGroup) -> None:
        """Recompute every member's assignment when a subscribed topic's partitions changed (the simple assignor:
        each member gets all partitions of its subscribed topics)."""
        topics = self._topics()
        seen = {t: topics[t][1] for t in group.subscribed_topics() if t in topics}
        if seen != group.topics_seen:
            group.topics_seen = seen
            group.group_epoch += 1
        for name, count in seen.items():  # (new entries come with a change of ``seen``: the epoch moved)
            group.state_topics[name] = max(group.state_topics.get(name, 0), count)
        for member in group.members.values():
            assignment: dict[uuid.UUID, list[int]] = {}
            for name in member.subscribed:
                if name in topics:
                    topic_id, count = topics[name]
                    assignment[topic_id] = list(range(count))
            member.assignment = assignment
