"""Online migration between the two group protocols (KIP-848's upgrade and downgrade, Kafka's
``convertToConsumerGroup`` and ``convertToClassicGroup``), under ``group.consumer.migration.policy``
(``bidirectional``, ``upgrade``, ``downgrade`` or ``disabled``).

**Upgrade.** A member of the consumer protocol joining (ConsumerGroupHeartbeat at epoch 0) a classic group that
has members and whose protocol type is ``consumer`` turns it into a consumer group, when the policy allows and
the group is no larger than ``group.consumer.max.size``. Every classic member stays a member, at the group's
generation as its epoch, with the subscription and assignment its ConsumerProtocol bytes carry; the classic
generation becomes the group epoch and the members' assignments the target. The classic members go on through
JoinGroup/SyncGroup/Heartbeat (:mod:`rill.coordinator.group.consumer_group_classic`).

**Downgrade.** When the members that leave a consumer group (or are removed from it) leave only members of
the classic protocol behind, and the policy allows and they fit in ``group.max.size``, the group becomes a
classic group again at its group epoch as generation, and a rebalance begins.

Either way the conversion is written as one batch of ``__consumer_offsets``: the tombstone(s) of the old form
and the records of the new one, so a coordinator that replays the partition finds one group, never two or
none; a conversion whose write fails (which does not say its batch is not in the log) is undone by a second
batch before the old form carries on, and a load that still finds both forms keeps the later. The group's
committed offsets are kept: they live in the classic group's object, which holds them while
the group is a consumer group.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from rill.coordinator.group import consumer_group_records as records
from rill.coordinator.group.consumer_group import (
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from rill.coordinator.group.group_metadata import (
    CONSUMER_PROTOCOL_TYPE,
    GroupMetadata,
    GroupState,
    JoinGroupResult,
    MemberMetadata,
    SyncGroupResult,
)
from rill.coordinator.group.group_metadata_manager import group_metadata_key, group_metadata_value
from rill.errors import ErrorCode, KafkaError
from rill.protocol import decode_versioned, encode_versioned

if TYPE_CHECKING:
    from rill.coordinator.group.group_coordinator import GroupCoordinator

log = logging.getLogger(__name__)

KeyValue = tuple[bytes, bytes | None]
POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")
ASSIGNMENT_VERSION = 0


# -- the consumer protocol's bytes ---------------------------------------------------------------------------


def decode_subscription(data: bytes) -> dict[str, Any]:
    """A ConsumerProtocolSubscription: topics, owned partitions (empty before version 1), rack id."""
    _, body = decode_versioned("ConsumerProtocolSubscription", data)
    return body


# Assignors whose assignment user data is only their own memory of past assignments (librdkafka's sticky
# assignors keep it there): the server-side assignor is sticky by itself, and the subscription's owned partitions
# tell a client-side assignor the same after a downgrade, so losing it loses nothing.
STICKY_ASSIGNORS = frozenset({"sticky", "cooperative-sticky"})


def decode_assignment(data: bytes, protocol: str) -> dict[str, list[int]]:
    """A ConsumerProtocolAssignment's partitions by topic name; refused (KafkaError) when it carries user data a
    server-side assignor would lose (a custom assignor's), as Kafka refuses it."""
    if not data:
        return {}
    _, body = decode_versioned("ConsumerProtocolAssignment", data)
    if body.get("user_data") and protocol not in STICKY_ASSIGNORS:
        raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, "an unsupported custom assignor is in use")
    out: dict[str, list[int]] = {}
    for entry in body["assigned_partitions"]:
        out.setdefault(entry["topic"], []).extend(entry["partitions"])
    return out


def encode_assignment(partitions: Mapping[str, Iterable[int]]) -> bytes:
    return encode_versioned(
        "ConsumerProtocolAssignment",
        ASSIGNMENT_VERSION,
        {
            "assigned_partitions": [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(partitions.items())],
            "user_data": None,
        },
    )


def _group_records(group: ConsumerGroup) -> list[KeyValue]:
    """Every record of a consumer group: its members, epochs, target and current assignments."""
    group_id = group.group_id
    kvs = [records.member_metadata_record(group_id, m) for m in group.members.values()]
    kvs.append(records.group_epoch_record(group_id, group.group_epoch))
    kvs += [records.target_member_record(group_id, mid, t) for mid, t in group.target.items()]
    kvs.append(records.target_epoch_record(group_id, group.assignment_epoch))
    kvs += [records.current_assignment_record(group_id, m) for m in group.members.values()]
    return kvs


def _keep_offsets_only(classic: GroupMetadata) -> None:
    """A classic group's object left holding only its offsets (for the consumer group of its id)."""
    for member in list(classic.iter_members()):
        classic.remove(member.member_id)
    classic.pending_members.clear()
    classic.pending_sync_members.clear()
    classic.protocol_type = classic.protocol_name = classic.leader_id = None
    classic.state = GroupState.EMPTY


class MigrationMixin:
    """Upgrade and downgrade for the ``ConsumerGroupCoordinator``."""

    # Provided by ConsumerGroupCoordinator.
    classic: GroupCoordinator
    groups: dict[str, ConsumerGroup]
    max_size: int

    async def _write(self, group_id: str, kvs: list[KeyValue]) -> None:
        raise NotImplementedError

    def _schedule_session(self, group_id: str, member_id: str) -> None:
        raise NotImplementedError

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        raise NotImplementedError

    @property
    def migration_policy(self) -> str:
        value = str(self.classic.config.get("group.consumer.migration.policy") or "bidirectional").lower()
        return value if value in POLICIES else "bidirectional"

    # -- topic names and ids ---------------------------------------------------------------------------------

    def _by_ids(self, partitions: Mapping[str, Iterable[int]]) -> dict[uuid.UUID, frozenset[int]]:
        """Partitions by topic id, for the topics that exist (a deleted topic's partitions are dropped)."""
        out: dict[uuid.UUID, frozenset[int]] = {}
        for name, ps in partitions.items():
            topic = self.classic.manager.metadata.topic(name)
            if topic is not None:
                valid = frozenset(p for p in ps if 0 <= p < len(topic.partitions))
                if valid:
                    out[topic.topic_id] = out.get(topic.topic_id, frozenset()) | valid
        return out

    def _by_names(self, assignment: Assignment) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic_id, ps in assignment.items():
            topic = self.classic.manager.metadata.topic_by_id(topic_id)
            if topic is not None and ps:
                out[topic.name] = sorted(ps)
        return out

    def assignment_bytes(self, member: ConsumerGroupMember) -> bytes:
        """A member's current assignment as the ConsumerProtocolAssignment a classic member receives."""
        return encode_assignment(self._by_names(member.assigned))

    # -- upgrade -------------------------------------------------------------------------------------------

    def refuse_upgrade(self, classic: GroupMetadata) -> tuple[ErrorCode, str] | None:
        """Why a classic group with members cannot become a consumer group now (Kafka's
        ``validateOnlineUpgrade``: GROUP_ID_NOT_FOUND), or None."""
        group_id = classic.group_id
        if self.migration_policy not in ("bidirectional", "upgrade"):
            why = "online upgrade is disabled"
        elif classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            why = "the group does not use the consumer embedded protocol"
        elif len(classic) > self.max_size:
            why = "the group size exceeds the consumer group maximum size"
        elif classic.is_in(GroupState.DEAD):
            why = "the group is being deleted"
        else:
            return None
        log.info("Cannot upgrade classic group %s to a consumer group: %s", group_id, why)
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {group_id} to consumer group because {why}."

    def converted(self, classic: GroupMetadata) -> tuple[ConsumerGroup, list[KeyValue]]:
        """The consumer group a classic group becomes, and the records of the conversion (the classic group's
        tombstone, then the consumer group's records). Nothing is changed yet."""
        group = ConsumerGroup(classic.group_id)
        group.group_epoch = group.assignment_epoch = classic.generation_id
        try:
            for m in classic.all_members():
                protocol = classic.protocol_name or (m.protocols()[0] if m.supported_protocols else "")
                subscription = decode_subscription(m.metadata(protocol))
                assigned = self._by_ids(decode_assignment(m.assignment, protocol))
                member = ConsumerGroupMember(
                    member_id=m.member_id,
                    instance_id=m.group_instance_id,
                    rack_id=subscription.get("rack_id"),
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=tuple(sorted(set(subscription["topics"]))),
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    member_epoch=classic.generation_id,
                    previous_member_epoch=classic.generation_id,
                    state=MemberState.STABLE,
                    assigned=assigned,
                    classic=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.supported_protocols)),
                )
                if any(group.owner_epoch(t, p) != -1 for t, ps in assigned.items() for p in ps):
                    raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, "the classic members' assignments overlap")
                group.target[member.member_id] = assigned
                group.put_member(member)
        except KafkaError as e:
            raise KafkaError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"Cannot upgrade classic group {classic.group_id} to consumer group because {e.message}.",
            ) from e
        except Exception as e:  # bytes a client wrote: never trusted
            raise KafkaError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"Cannot upgrade classic group {classic.group_id} to consumer group because the embedded "
                f"consumer protocol is malformed: {e}.",
            ) from e
        return group, [(group_metadata_key(classic.group_id), None), *_group_records(group)]

    def freeze_classic(self, classic: GroupMetadata) -> None:
        """Before the conversion's write: the members waiting in JoinGroup or SyncGroup are told to rejoin (as
        Kafka does; a SyncGroup answer never hands out what the consumer group will not know), and the classic
        group's timers stop, so nothing changes it while the records are written."""
        for member in classic.iter_members():
            classic.maybe_invoke_join_callback(
                member, JoinGroupResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id)
            )
            classic.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        self.classic._cancel_group_timers(classic.group_id)

    async def undo_upgrade(self, classic: GroupMetadata, kvs: list[KeyValue]) -> None:
        """The conversion's write failed, which does not say its batch is not in the log (a replication timeout
        leaves it there, to be committed later): its consumer group records are tombstoned and the classic
        group's metadata written again, so that a replay finds the classic group the coordinator carries on
        with, and no member of the failed conversion comes back with a later one. Best effort: when this write
        fails too, a replay keeps the form the log ends with (``settle_loaded``)."""
        group_id = classic.group_id
        undo: list[KeyValue] = [(key, None) for key, value in kvs if value is not None]
        assignments = {m.member_id: m.assignment for m in classic.all_members()}
        undo.append((group_metadata_key(group_id), group_metadata_value(classic, assignments)))
        try:
            await self._write(group_id, undo)
        except KafkaError as e:
            log.warning("Cannot undo the failed upgrade of classic group %s: %s", group_id, e.message)

    def settle_loaded(self, classic_groups: dict[str, GroupMetadata], classic_at: Mapping[str, int],
                      loaded_at: Mapping[str, int]) -> None:  # fmt: skip
        """After a load: a group id with both a classic group that has members and a consumer group (a
        conversion whose write was answered as failed, yet reached the log) keeps the form whose last record is
        the later in the log; the other is dropped (the classic one keeps its offsets: it holds them for the
        consumer group). So a replay never serves two groups for one id."""
        for group_id, consumer_at in loaded_at.items():
            classic = classic_groups.get(group_id)
            group = self.groups.get(group_id)
            if classic is None or group is None or not classic.all_members():
                continue
            at = classic_at.get(group_id, -1)
            if at > consumer_at:
                for member_id in list(group.members):
                    self._cancel_timers(group_id, member_id)
                del self.groups[group_id]
                log.warning("Group %s: the classic group's record at offset %d is later than the consumer group's "
                            "(%d): the consumer group is dropped", group_id, at, consumer_at)  # fmt: skip
            else:
                self.classic._cancel_group_timers(group_id)
                _keep_offsets_only(classic)
                log.warning("Group %s: the consumer group's records (to offset %d) are later than the classic "
                            "group's (%d): the classic group's members are dropped",
                            group_id, consumer_at, at)  # fmt: skip

    def thaw_classic(self, classic: GroupMetadata) -> None:
        """The conversion's write failed: the classic group carries on, with a rebalance."""
        if self.classic.groups.get(classic.group_id) is not classic:
            return
        for member in classic.all_members():
            self.classic._schedule_heartbeat(classic, member)
        if classic.is_in(GroupState.PREPARING_REBALANCE):  # its join timer was stopped: the rebalance goes on
            self.classic._schedule_join(classic, classic.rebalance_timeout_ms())
        else:
            self.classic._maybe_prepare_rebalance(classic, "its upgrade to a consumer group failed")

    def finish_upgrade(self, classic: GroupMetadata, group: ConsumerGroup) -> None:
        """The conversion is written: the classic group's object keeps only the offsets (it holds them for the
        consumer group), and the consumer group's members get their sessions."""
        _keep_offsets_only(classic)
        self.groups[group.group_id] = group
        for member_id in group.members:
            self._schedule_session(group.group_id, member_id)
        log.info("Converted classic group %s (generation %d, %d member(s)) to a consumer group",
                 group.group_id, group.group_epoch, len(group.members))  # fmt: skip

    # -- downgrade -----------------------------------------------------------------------------------------

    def downgrade_allowed(self, group: ConsumerGroup, leaving: set[str]) -> bool:
        """Kafka's ``validateOnlineDowngradeWithFencedMembers``: only classic members stay, at least one, the
        policy allows a downgrade and they fit in a classic group."""
        staying = [m for mid, m in group.members.items() if mid not in leaving]
        if not staying or any(m.classic is None for m in staying):
            return False
        shared = set.intersection(*(set(m.classic.protocol_names()) for m in staying if m.classic is not None))
        if not shared:  # no protocol a classic group could choose (their joins keep one, but the records may not)
            return False
        if self.migration_policy not in ("bidirectional", "downgrade"):
            log.info("Cannot downgrade consumer group %s to a classic group: online downgrade is disabled",
                     group.group_id)  # fmt: skip
            return False
        if len(staying) > self.classic.max_group_size:
            log.info("Cannot downgrade consumer group %s to a classic group: its size exceeds group.max.size",
                     group.group_id)  # fmt: skip
            return False
        return True

    async def downgrade(self, group: ConsumerGroup, leaving: set[str], why: str) -> None:
        """Turn ``group`` into a classic group without the ``leaving`` members, written as one batch (the
        consumer group's tombstones, then the classic group's metadata), then start a rebalance."""
        group_id = group.group_id
        holder = self.classic.groups.get(group_id)
        draft = GroupMetadata(group_id, generation_id=group.group_epoch, protocol_type=CONSUMER_PROTOCOL_TYPE)
        assignments: dict[str, bytes] = {}
        for member in group.members.values():
            if member.member_id in leaving or member.classic is None:
                continue
            draft.add(MemberMetadata(
                member.member_id, member.instance_id, member.client_id, member.client_host,
                member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else member.classic.session_timeout_ms,
                member.classic.session_timeout_ms, CONSUMER_PROTOCOL_TYPE, list(member.classic.supported_protocols),
            ))  # fmt: skip
            assignments[member.member_id] = self.assignment_bytes(member)
        draft.protocol_name = draft.select_protocol()
        draft.current_state_timestamp = int(time.time() * 1000)
        kvs: list[KeyValue] = []
        for member_id in group.members:
            kvs += records.member_tombstones(group_id, member_id)
        kvs += records.group_tombstones(group_id)
        kvs.append((group_metadata_key(group_id), group_metadata_value(draft, assignments)))
        try:
            await self._write(group_id, kvs)
        except KafkaError:
            # The batch may be in the log all the same (a replication timeout): the consumer group, which carries
            # on, is written again whole after it, with the classic group's tombstone.
            if self.classic.not_serving(group_id) is None:
                try:
                    await self._write(group_id, [(group_metadata_key(group_id), None), *_group_records(group)])
                except KafkaError as e:
                    log.warning("Cannot undo the failed downgrade of consumer group %s: %s", group_id, e.message)
            raise
        # Written: the classic group takes the place of the consumer group. The object that held the offsets
        # becomes it, so that an offset commit being written meanwhile lands in it.
        for member_id in list(group.members):
            self._cancel_timers(group_id, member_id)
        group.deleted = True
        self.groups.pop(group_id, None)
        if holder is not None and not holder.members:
            holder.generation_id = draft.generation_id
            holder.protocol_type = CONSUMER_PROTOCOL_TYPE
            for m in draft.all_members():
                holder.add(m)
            classic = holder
        else:
            classic = draft
        classic.protocol_name, classic.leader_id = draft.protocol_name, draft.leader_id
        classic.state, classic.current_state_timestamp = GroupState.STABLE, draft.current_state_timestamp
        for m in classic.all_members():
            m.assignment = assignments.get(m.member_id, b"")
        self.classic.groups[group_id] = classic
        for m in classic.all_members():
            self.classic._schedule_heartbeat(classic, m)
        log.info("Converted consumer group %s to a classic group (generation %d, %d member(s)): %s",
                 group_id, classic.generation_id, len(classic), why)  # fmt: skip
        self.classic._prepare_rebalance(classic, f"Downgrade group {group_id} from consumer to classic ({why})")

