"""One consumer group's state: its members, generation, chosen protocol, and committed offsets.

This module is the classic group protocol's state machine without any I/O: the coordinator drives it and
owns timers and persistence. The states and their allowed predecessors are Kafka's::

    Empty               <- PreparingRebalance
    PreparingRebalance  <- Empty, Stable, CompletingRebalance
    CompletingRebalance <- PreparingRebalance
    Stable              <- CompletingRebalance
    Dead                <- any state

A member waiting for its JoinGroup answer holds a join callback; one waiting for its SyncGroup answer holds
a sync callback. Static members (KIP-345) are also indexed by their ``group.instance.id``.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum

from rill.common import TopicPartition
from rill.errors import ErrorCode

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed position: the next offset the group will read, plus the committer's metadata string."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1  # only set by OffsetCommit v1 timestamps / v2-v4 retention times
    # Where its record lies in ``__consumer_offsets`` (-1: not written yet). A transaction's commit marker makes
    # its pending offsets the group's only where they are newer by this log order than the committed ones.
    record_offset: int = field(default=-1, compare=False)


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """What the leader learns about each member: its id, instance id and metadata for the chosen protocol."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinCallback = Callable[[JoinGroupResult], None]
SyncCallback = Callable[[SyncGroupResult], None]


@dataclass(slots=True, eq=False)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    supported_protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: JoinCallback | None = None
    awaiting_sync: SyncCallback | None = None
    is_new: bool = False
    is_leaving: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def protocols(self) -> list[str]:
        return [name for name, _ in self.supported_protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.supported_protocols:
            if name == protocol:
                return data
        raise ValueError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, same order, same metadata: a rejoin that changes nothing."""
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.supported_protocols]

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name in self.protocols():
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


def generate_member_id(client_id: str, group_instance_id: str | None) -> str:
    """Kafka's member ids: the instance id (static) or the client id, a dash, and a random UUID."""
    return f"{group_instance_id if group_instance_id is not None else client_id}-{uuid.uuid4()}"


@dataclass(slots=True, eq=False)
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    current_state_timestamp: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    pending_sync_members: set[str] = field(default_factory=set)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    # TxnOffsetCommit offsets by producer id, until the transaction's marker commits or aborts them
    pending_txn_offsets: dict[int, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)
    new_member_added: bool = False
    _protocol_counts: Counter[str] = field(default_factory=Counter)

    # -- state ---------------------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(
                f"Group {self.group_id} should be in {sorted(s.value for s in _VALID_PREVIOUS[state])} "
                f"to move to {state.value}, but it is {self.state.value}"
            )
        self.state = state
        self.current_state_timestamp = now_ms

    # -- members -------------------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    def all_members(self) -> list[MemberMetadata]:
        return list(self.members.values())

    def __len__(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata, callback: JoinCallback | None = None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._protocol_counts.update(member.protocols())
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        member.awaiting_join = callback

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._protocol_counts.subtract(member.protocols())
        self._protocol_counts += Counter()  # drop non-positive counts
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync_members.discard(member_id)
        if self.is_leader(member_id):
            joined = [m for m in self.members.values() if m.is_awaiting_join]
            pick = joined[0] if joined else next(iter(self.members.values()), None)
            self.leader_id = pick.member_id if pick is not None else None
        return member

    def update_member(
        self,
        member: MemberMetadata,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback | None,
    ) -> None:
        self._protocol_counts.subtract(member.protocols())
        self._protocol_counts += Counter()
        member.supported_protocols = [(n, bytes(m)) for n, m in protocols]
        self._protocol_counts.update(member.protocols())
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member.awaiting_join = callback

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined; otherwise pick any member that did. False when none did."""
        if self.leader_id is not None and self.leader_id in self.members:
            if self.members[self.leader_id].is_awaiting_join:
                return True
            for member in self.members.values():
                if member.is_awaiting_join:
                    self.leader_id = member.member_id
                    return True
            return False
        return False

    # -- pending (MEMBER_ID_REQUIRED) members ----------------------------------------------------------

    def add_pending_member(self, member_id: str) -> None:
        self.pending_members.add(member_id)

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def remove_pending_member(self, member_id: str) -> bool:
        if member_id in self.pending_members:
            self.pending_members.discard(member_id)
            return True
        return False

    # -- static members --------------------------------------------------------------------------------

    def current_static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def is_static_member_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        """A request from a static member whose instance id now belongs to another member id."""
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> MemberMetadata:
        member = self.members.pop(old_member_id)
        # A stale JoinGroup or SyncGroup of the old member id gets FENCED_INSTANCE_ID.
        if member.awaiting_join is not None:
            member.awaiting_join(JoinGroupResult(ErrorCode.FENCED_INSTANCE_ID, old_member_id))
            member.awaiting_join = None
        if member.awaiting_sync is not None:
            member.awaiting_sync(SyncGroupResult(ErrorCode.FENCED_INSTANCE_ID))
            member.awaiting_sync = None
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.pending_sync_members.discard(old_member_id)
        self.static_members[group_instance_id] = new_member_id
        return member

    # -- rebalance -------------------------------------------------------------------------------------

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.is_awaiting_join for m in self.members.values())

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self._protocol_counts.items() if count == n}

    def select_protocol(self) -> str:
        """The protocol most members prefer among those all support (ties: the leader's preference)."""
        if not self.members:
            raise ValueError("cannot select a protocol for an empty group")
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        for name in leader.protocols():
            if votes.get(name) == best:
                return name
        return next(name for name, count in votes.items() if count == best)

    def supports_protocols(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        names = set(protocols)
        if self.is_in(GroupState.EMPTY) or not self.members:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and bool(names & self.candidate_protocols())

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members = set(self.members)

    def current_member_metadata(self) -> tuple[JoinedMember, ...]:
        if self.protocol_name is None:
            raise ValueError("no protocol selected")
        protocol = self.protocol_name
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(protocol)) for m in self.members.values()
        )

    def maybe_invoke_join_callback(self, member: MemberMetadata, result: JoinGroupResult) -> bool:
        callback, member.awaiting_join = member.awaiting_join, None
        if callback is None:
            return False
        callback(result)
        return True

    def maybe_invoke_sync_callback(self, member: MemberMetadata, result: SyncGroupResult) -> bool:
        callback, member.awaiting_sync = member.awaiting_sync, None
        if callback is None:
            return False
        callback(result)
        return True

    def iter_members(self) -> Iterator[MemberMetadata]:
        return iter(list(self.members.values()))

    # -- offsets ---------------------------------------------------------------------------------------

    def has_offsets(self) -> bool:
        return bool(self.offsets)

    def add_pending_txn_offsets(self, producer_id: int, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """A TxnOffsetCommit of the producer's open transaction, pending until its marker."""
        if offsets:
            self.pending_txn_offsets.setdefault(producer_id, {}).update(offsets)

    def complete_txn(self, producer_id: int, commit: bool) -> int:
        """The producer's transaction ended: on a commit its pending offsets become the committed ones, except
        where a commit newer in the log's order (a plain OffsetCommit after the TxnOffsetCommit) is there, as
        Kafka keeps the most recent record; on an abort they go. Returns how many were pending."""
        pending = self.pending_txn_offsets.pop(producer_id, None)
        if not pending:
            return 0
        if commit:
            for tp, om in pending.items():
                current = self.offsets.get(tp)
                if current is None or om.record_offset > current.record_offset:
                    self.offsets[tp] = om
        return len(pending)

    def remove_offsets(self, tps: Iterable[TopicPartition]) -> None:
        """Tombstones of ``tps``: the committed offsets go, and so do the offsets of open transactions for them
        (Kafka's rule, so that a later commit marker does not bring back what was deleted)."""
        for tp in tps:
            self.offsets.pop(tp, None)
            for producer_id in list(self.pending_txn_offsets):
                pending = self.pending_txn_offsets[producer_id]
                pending.pop(tp, None)
                if not pending:
                    del self.pending_txn_offsets[producer_id]

    def pending_txn_partitions(self) -> set[TopicPartition]:
        return {tp for pending in self.pending_txn_offsets.values() for tp in pending}

    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[TopicPartition]:
        """Offsets past their retention. Only an Empty group's offsets expire: for a group that used group
        management the clock starts when it became empty; for commit-only groups at each commit."""
        if not self.is_in(GroupState.EMPTY):
            return []
        expired = []
        for tp, om in self.offsets.items():
            if om.expire_timestamp >= 0:
                if now_ms >= om.expire_timestamp:
                    expired.append(tp)
                continue
            base = om.commit_timestamp
            if self.protocol_type is not None and self.current_state_timestamp >= 0:
                base = max(base, self.current_state_timestamp)
            if now_ms - base >= retention_ms:
                expired.append(tp)
        return expired
