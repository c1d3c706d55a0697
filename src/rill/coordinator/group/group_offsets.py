"""The group coordinator's offset and administration side: OffsetCommit, OffsetFetch, ListGroups,
DescribeGroups, DeleteGroups, OffsetDelete, the expiry of offsets kept by empty groups, and the removal of
the offsets of deleted topics.

A commit is checked against the group's generation and members the way Kafka checks it: members commit with
their member id and current generation (any state but CompletingRebalance); a consumer that uses no group
management commits with generation -1 and an empty member id, which is allowed only while the group is Empty.

Writes (commits, tombstones) are answered once replicated to the ISR and change the groups only then, in the
log's order (``rill.coordinator.group.deferred_writes``). A group being deleted is Dead from the moment its
tombstones are appended (no member joins it, nothing is committed to it) until they are replicated, when it goes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rill.common import TopicPartition
from rill.coordinator.group.deferred_writes import DeferredWrite
from rill.coordinator.group.group_metadata import (
    CONSUMER_PROTOCOL_TYPE,
    GroupMetadata,
    GroupState,
    MemberMetadata,
    OffsetAndMetadata,
)
from rill.coordinator.group.group_metadata_manager import GroupMetadataManager
from rill.errors import ErrorCode, KafkaError
from rill.metadata.store import OFFSETS_TOPIC, MetadataDelta
from rill.protocol import decode_versioned

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...]
    error: ErrorCode = ErrorCode.NO_ERROR


def _now_ms() -> int:
    return int(time.time() * 1000)


def subscribed_topics(group: GroupMetadata) -> set[str] | None:
    """Topics the members of a consumer-protocol group subscribe to (None when they cannot be known)."""
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None
    topics: set[str] = set()
    for member in group.all_members():
        data = _member_subscription(group, member)
        if data is None:
            return None
        try:
            _, body = decode_versioned("ConsumerProtocolSubscription", data)
        except Exception:
            return None
        topics.update(body["topics"])
    return topics


def _member_subscription(group: GroupMetadata, member: MemberMetadata) -> bytes | None:
    if group.protocol_name is not None:
        try:
            return member.metadata(group.protocol_name)
        except ValueError:
            return None
    return member.supported_protocols[0][1] if member.supported_protocols else None


class GroupOffsetsMixin:
    # Provided by GroupCoordinator.
    groups: dict[str, GroupMetadata]
    manager: GroupMetadataManager
    active: bool
    not_serving: Callable[[str], ErrorCode | None]
    follow_leadership: Callable[[], None]
    offset_metadata_max_bytes: int
    offsets_retention_ms: int
    retention_check_interval_ms: int
    consumer: Any  # the consumer groups of KIP-848
    _expiry_timer: asyncio.TimerHandle | None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        raise NotImplementedError

    def _schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None) -> None:
        raise NotImplementedError

    def _cancel_group_timers(self, group_id: str) -> None:
        raise NotImplementedError

    # -- OffsetCommit ------------------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        def all_fail(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {tp: code for tp in offsets}

        if (code := self.not_serving(group_id)) is not None:
            return all_fail(code)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A member of a generation this coordinator does not know (e.g. of a deleted group).
                return all_fail(ErrorCode.ILLEGAL_GENERATION)
            group = GroupMetadata(group_id, current_state_timestamp=_now_ms())
            self.groups[group_id] = group
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not ErrorCode.NO_ERROR:
            return all_fail(error)
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            # The member knows the new generation but has no assignment yet.
            return all_fail(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.has(member_id):
            self._schedule_heartbeat(group, group.get(member_id))
        return await self._store_offsets(group, offsets)

    def _validate_offset_commit(
        self, group: GroupMetadata, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id >= 0 or member_id or group_instance_id is not None:
            if group.is_static_member_fenced(group_instance_id, member_id):
                return ErrorCode.FENCED_INSTANCE_ID
            if not group.has(member_id):
                return ErrorCode.UNKNOWN_MEMBER_ID
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif not group.is_in(GroupState.EMPTY):
            # While the group has members, only members may commit.
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NO_ERROR

    async def _store_offsets(
        self, group: GroupMetadata, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> dict[TopicPartition, ErrorCode]:
        result: dict[TopicPartition, ErrorCode] = {}
        valid: dict[TopicPartition, OffsetAndMetadata] = {}
        now = _now_ms()
        for tp, om in offsets.items():
            if om.commit_timestamp < 0:
                om = dataclasses.replace(om, commit_timestamp=now)
            if len(om.metadata.encode()) > self.offset_metadata_max_bytes:
                result[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                valid[tp] = om
        if not valid:
            return result
        group_id = group.group_id

        def apply(written: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
            target = self.groups.get(group_id)
            if target is None:
                target = self.groups[group_id] = GroupMetadata(group_id, current_state_timestamp=_now_ms())
            target.offsets.update(written)

        try:
            write = self.manager.store_offsets(group_id, valid, apply)
        except KafkaError as e:
            log.warning("Failed to store offsets of group %s: %s", group_id, e.message)
            result.update({tp: e.code for tp in valid})
            return result
        if (code := self.manager.outcome(write, offsets=True)) is None:
            code = await self.manager.complete(write, offsets=True)
        if code != ErrorCode.NO_ERROR:
            log.info("Offsets of group %s not replicated in time (%s)", group_id, code.name)
        result.update({tp: code for tp in valid})
        return result

    # -- OffsetFetch -------------------------------------------------------------------------------------

    def fetch_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata | None]]:
        """Committed offsets of a group (all of them when ``partitions`` is None); None = no commit."""
        if (code := self.not_serving(group_id)) is not None:
            return code, {}
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.NO_ERROR, {} if partitions is None else dict.fromkeys(partitions)
        if partitions is None:
            return ErrorCode.NO_ERROR, dict(group.offsets)
        return ErrorCode.NO_ERROR, {tp: group.offsets.get(tp) for tp in partitions}

    # -- ListGroups / DescribeGroups ---------------------------------------------------------------------

    def list_groups(self, states: set[str] | None = None) -> tuple[ErrorCode, list[tuple[str, str, str]]]:
        """(group id, protocol type, state) of every live group, optionally only those in ``states``
        (matched case-insensitively, as Kafka does)."""
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        wanted = {s.lower() for s in states} if states else None
        out = []
        for group in self.groups.values():
            if group.is_in(GroupState.DEAD):
                continue
            if wanted is not None and group.state.value.lower() not in wanted:
                continue
            out.append((group.group_id, group.protocol_type or "", group.state.value))
        return ErrorCode.NO_ERROR, out

    def describe_group(self, group_id: str) -> GroupSummary:
        if (code := self.not_serving(group_id)) is not None:
            return GroupSummary(group_id, "", "", "", (), code)
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return GroupSummary(group_id, GroupState.DEAD.value, "", "", ())
        stable = group.is_in(GroupState.STABLE)
        members = tuple(
            MemberSummary(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(group.protocol_name) if stable and group.protocol_name is not None else b"",
                m.assignment if stable else b"",
            )
            for m in group.all_members()
        )
        protocol = group.protocol_name or "" if stable else ""
        return GroupSummary(group_id, group.state.value, group.protocol_type or "", protocol, members)

    # -- DeleteGroups / OffsetDelete ---------------------------------------------------------------------

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        out: dict[str, ErrorCode] = {}
        writes: list[tuple[str, DeferredWrite]] = []
        for group_id in group_ids:
            if (code := self.not_serving(group_id)) is not None:
                out[group_id] = code
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_in(GroupState.DEAD):
                out[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
                continue
            if not group.is_in(GroupState.EMPTY) or group.pending_members:
                out[group_id] = ErrorCode.NON_EMPTY_GROUP
                continue
            # the committed offsets and those of open transactions (their commit must not bring them back)
            tps = list(group.offsets) + [tp for tp in group.pending_txn_partitions() if tp not in group.offsets]
            try:
                write = self.manager.write_tombstones(group_id, tps, group=True, apply=self._dropper(group, "Deleted"))
            except KafkaError as e:
                out[group_id] = e.code
                continue
            assert write is not None
            self._kill(group)
            writes.append((group_id, write))
        codes = await asyncio.gather(*(self.manager.complete(w, offsets=False) for _, w in writes))
        out.update({group_id: code for (group_id, _), code in zip(writes, codes, strict=True)})
        return out

    def _kill(self, group: GroupMetadata) -> None:
        """A group whose tombstone is written: Dead (refusing members and commits) until it is replicated."""
        if not group.is_in(GroupState.DEAD):
            group.transition_to(GroupState.DEAD, _now_ms())
        self._cancel_group_timers(group.group_id)

    def _dropper(self, group: GroupMetadata, verb: str) -> Callable[[int], None]:
        """The effect of a group's tombstone: the group goes (with its offsets and open transactions' offsets)."""

        def drop(_offset: int) -> None:
            self._kill(group)
            if self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]
            log.info("%s group %s and its %d committed offset(s)", verb, group.group_id, len(group.offsets))

        return drop

    @staticmethod
    def _offsets_remover(
        group: GroupMetadata, tps: list[TopicPartition], then: Callable[[int], None] | None = None
    ) -> Callable[[int], None]:
        """The effect of tombstones of ``tps``: the offsets go (with those of open transactions), then ``then``."""

        def remove(offset: int) -> None:
            group.remove_offsets(tps)
            if then is not None:
                then(offset)

        return remove

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        if (code := self.not_serving(group_id)) is not None:
            return code, {}
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        result: dict[TopicPartition, ErrorCode] = {}
        if group.is_in(GroupState.EMPTY):
            deletable = list(partitions)
        else:
            topics = subscribed_topics(group)
            if topics is None:
                return ErrorCode.NON_EMPTY_GROUP, {}
            deletable = []
            for tp in partitions:
                if tp.topic in topics:
                    result[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    deletable.append(tp)
        pending = group.pending_txn_partitions()
        present = [tp for tp in deletable if tp in group.offsets or tp in pending]
        try:
            write = self.manager.write_tombstones(group_id, present, group=False,
                                                  apply=self._offsets_remover(group, present))  # fmt: skip
        except KafkaError as e:
            return e.code, {}
        code = ErrorCode.NO_ERROR if write is None else await self.manager.complete(write, offsets=False)
        if code != ErrorCode.NO_ERROR:
            return code, {}
        result.update({tp: ErrorCode.NO_ERROR for tp in deletable})
        return ErrorCode.NO_ERROR, result

    # -- expiry ------------------------------------------------------------------------------------------

    def _schedule_expiry(self) -> None:
        self._expiry_timer = self.loop.call_later(self.retention_check_interval_ms / 1000, self._run_expiry)

    def _run_expiry(self) -> None:
        try:
            self.cleanup_group_metadata(_now_ms())
        except Exception:  # a failed pass must not stop the next one
            log.exception("Offset expiry failed")
        if self.active:
            self._schedule_expiry()

    def cleanup_group_metadata(self, now_ms: int) -> int:
        """Expire the offsets of empty groups past ``offsets.retention.minutes``; drop groups left with
        nothing. Returns how many offsets expired."""
        retention = self.offsets_retention_ms

        def expired(group: GroupMetadata) -> list[TopicPartition]:
            if self.consumer.has_members(group.group_id):  # a live consumer group (KIP-848) keeps its offsets
                return []
            return group.expired_offsets(now_ms, retention)

        return self._remove_offsets(expired, now_ms, "Expired")

    # -- deleted topics ----------------------------------------------------------------------------------

    async def on_metadata_delta(self, delta: MetadataDelta) -> None:
        """Kafka's onPartitionsDeleted: once a topic is deleted (or deleted and created again, under a new
        topic id), the offsets every group committed for it are removed and tombstoned, so that a consumer
        of a topic created later under the same name does not start from them."""
        if not self.active:
            return
        if any(t.name == OFFSETS_TOPIC for t in delta.changed):
            self.follow_leadership()
        if not delta.deleted:
            return
        deleted = {t.name for t in delta.deleted}
        self._remove_offsets(lambda g: [tp for tp in g.offsets if tp.topic in deleted], _now_ms(), "Removed")

    def _remove_offsets(
        self, select: Callable[[GroupMetadata], list[TopicPartition]], now_ms: int, verb: str
    ) -> int:
        """Remove the offsets ``select`` picks in each group (their tombstones written; they go once
        replicated), and a group left empty with none; returns how many were removed."""
        total = 0
        for group_id, group in list(self.groups.items()):
            if group.is_in(GroupState.DEAD):
                continue
            removed = select(group)
            dead = (
                group.is_in(GroupState.EMPTY)
                and not group.pending_members
                and not group.pending_txn_offsets  # a transaction still to commit or abort offsets of it
                and len(removed) == len(group.offsets)
            )
            if not removed and not dead:
                continue
            apply = self._offsets_remover(group, removed, self._dropper(group, "Dropped") if dead else None)
            try:
                write = self.manager.write_tombstones(group_id, removed, group=dead and group.generation_id > 0,
                                                      apply=apply)  # fmt: skip
            except KafkaError as e:
                log.warning("Failed to remove offsets of group %s: %s", group_id, e.message)
                continue
            if write is None:  # nothing to write: a group that never used group management, without offsets
                apply(-1)
            elif dead:
                self._kill(group)
            total += len(removed)
            if removed:
                log.info("%s %d offset(s) of group %s", verb, len(removed), group_id)
        return total
