"""The state of a consumer group of KIP-848's protocol (Kafka's ``ConsumerGroup``): its epochs, members,
target assignment and the epoch at which each partition is owned.

A consumer group advances in epochs. Any change that calls for a new assignment (a member joins, leaves or
changes its subscription, a subscribed topic gains partitions) bumps the **group epoch**; the coordinator then
computes a **target assignment** with the group's server-side assignor, stamped with the group epoch as its
**assignment epoch**. Each member converges on its share of the target one heartbeat at a time (see
:mod:`rill.coordinator.group.consumer_group_reconciliation`): it first gives up what the target takes away,
and only then receives partitions, each once its previous owner has released it. A member's **member epoch**
is the assignment epoch it has reached. The group keeps, for every owned partition, the epoch of its owner, so
a partition is never handed out while another member still holds it.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import re2

# An assignment: topic id -> partitions.
Assignment = Mapping[uuid.UUID, frozenset[int]]

EMPTY_ASSIGNMENT: Assignment = {}


log = logging.getLogger(__name__)

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=1024)
def topic_regex(pattern: str) -> re2._Regexp:
    """A SubscribedTopicRegex compiled with RE2 (Kafka uses RE2/J): matched against every topic name on the event
    loop, in time linear in the name, where Python's backtracking ``re`` can take exponential time. Raises
    ``re2.error`` when it does not compile (back-references, look-arounds: RE2 has none)."""
    return re2.compile(pattern, _RE2_OPTIONS)


@functools.lru_cache(maxsize=1024)
def stored_topic_regex(pattern: str) -> re2._Regexp | None:
    """A stored member's regex, None (matching nothing) when RE2 refuses it: one written before regexes were
    checked with RE2 must not stop a load."""
    try:
        return topic_regex(pattern)
    except re2.error as e:
        log.warning("Skipped the subscribed topic regex %r, which RE2 refuses: %s", pattern, e)
        return None


class MemberState(enum.IntEnum):
    """Where a member is in its reconciliation (the values are those of the records)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1  # it must first give up partitions the target took from it
    UNRELEASED_PARTITIONS = 2  # it waits for partitions that other members still hold
    UNKNOWN = 127


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def normalize(assignment: Mapping[uuid.UUID, Iterable[int]]) -> dict[uuid.UUID, frozenset[int]]:
    """An assignment with frozen partition sets and no empty topics."""
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def count(assignment: Assignment) -> int:
    return sum(len(ps) for ps in assignment.values())


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member of the classic protocol (JoinGroup/SyncGroup) in a consumer group keeps of its JoinGroup:
    its session timeout and its protocols (name, ConsumerProtocolSubscription bytes) in preference order."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.supported_protocols]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """A member as the coordinator knows it. Immutable: a heartbeat builds the next version, which replaces
    this one once its records are written."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    classic: ClassicMemberMetadata | None = None  # set for a member of the classic protocol

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def replace(self, **changes: object) -> ConsumerGroupMember:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def same_metadata(self, other: ConsumerGroupMember) -> bool:
        """Whether the parts kept in the member metadata record are equal."""
        return (
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.subscribed_topic_names,
            self.subscribed_topic_regex,
            self.rebalance_timeout_ms,
            self.server_assignor,
            self.classic,
        ) == (
            other.instance_id,
            other.rack_id,
            other.client_id,
            other.client_host,
            other.subscribed_topic_names,
            other.subscribed_topic_regex,
            other.rebalance_timeout_ms,
            other.server_assignor,
            other.classic,
        )

    def same_assignment(self, other: ConsumerGroupMember) -> bool:
        """Whether the parts kept in the current assignment record are equal."""
        return (
            self.member_epoch,
            self.previous_member_epoch,
            self.state,
            normalize(self.assigned),
            normalize(self.pending_revocation),
        ) == (
            other.member_epoch,
            other.previous_member_epoch,
            other.state,
            normalize(other.assigned),
            normalize(other.pending_revocation),
        )


class ConsumerGroup:
    """One consumer group (see the module docstring)."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}  # member id -> its share of the target assignment
        # (topic id, partition) -> epoch of the member that holds it (assigned or pending revocation)
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}
        # The partition counts of the subscribed topics the target assignment was computed with.
        self.subscribed_partitions: dict[str, int] = {}
        self.assignor_name = ""
        self.deleted = False

    # -- state --------------------------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if self.deleted:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if member.state != MemberState.STABLE or member.member_epoch != self.assignment_epoch:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def subscribed_topic_names(self) -> set[str]:
        names: set[str] = set()
        for member in self.members.values():
            names.update(member.subscribed_topic_names)
        return names

    def classic_members(self) -> list[ConsumerGroupMember]:
        return [m for m in self.members.values() if m.classic is not None]

    def supports_classic_protocols(self, protocol_type: str, names: Iterable[str]) -> bool:
        """Whether a classic member with these protocols may join: the consumer protocol type, and one protocol
        every classic member already in the group supports (any protocol when there is none)."""
        wanted = list(names)
        if protocol_type != "consumer" or not wanted:
            return False
        classic = self.classic_members()
        if not classic:
            return True
        return any(all(name in m.classic.protocol_names() for m in classic if m.classic) for name in wanted)

    def waiting_on_unreleased_partition(self, member: ConsumerGroupMember) -> bool:
        """Whether a member in UNRELEASED_PARTITIONS still waits for a partition another member holds."""
        if member.state != MemberState.UNRELEASED_PARTITIONS:
            return False
        for topic_id, partitions in self.target.get(member.member_id, {}).items():
            held = member.assigned.get(topic_id, frozenset())
            if any(p not in held and self.owner_epoch(topic_id, p) != -1 for p in partitions):
                return True
        return False

    def owner_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The epoch of the member that holds a partition, or -1 when it is free."""
        return self.partition_epochs.get((topic_id, partition), -1)

    # -- changes (applied once their records are written) -------------------------------------------------

    def put_member(self, member: ConsumerGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
            if old.instance_id is not None and self.static_members.get(old.instance_id) == old.member_id:
                del self.static_members[old.instance_id]
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._hold(member)

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        self.target.pop(member_id, None)
        if old is None:
            return
        self._release(old)
        if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]

    def _hold(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    self.partition_epochs[(topic_id, p)] = member.member_epoch

    def _release(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    if self.partition_epochs.get((topic_id, p)) == member.member_epoch:
                        del self.partition_epochs[(topic_id, p)]

    def rebuild_partition_epochs(self) -> None:
        self.partition_epochs = {}
        for member in self.members.values():
            self._hold(member)
