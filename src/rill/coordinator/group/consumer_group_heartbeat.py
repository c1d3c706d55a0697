"""The consumer group coordinator of KIP-848 (Kafka's ``GroupMetadataManager.consumerGroupHeartbeat``):
ConsumerGroupHeartbeat, the session and rebalance timeouts of members, and the member-epoch checks of
OffsetCommit and OffsetFetch.

Each heartbeat of a member: (1) checks its epoch (FENCED_MEMBER_EPOCH when it is ahead of or behind what the
coordinator knows, except the previous epoch with owned partitions the member may still have; UNKNOWN_MEMBER_ID
when the member is gone); (2) takes its subscription, bumping the group epoch when a member joins or its
subscription, or a subscribed topic's partitions, changed; (3) computes a new target assignment when the group
epoch is ahead of the assignment epoch; (4) moves the member towards its target
(:mod:`rill.coordinator.group.consumer_group_reconciliation`). The records of every change are written to the
group's ``__consumer_offsets`` partition before the change is applied, so a refused or failed heartbeat changes
nothing and a new coordinator replays the same state.

A member that does not heartbeat within ``group.consumer.session.timeout.ms`` is removed; one that keeps
partitions it must revoke longer than its rebalance timeout is removed too, which frees them for the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import re2

from rill.common import TopicPartition
from rill.coordinator.group import consumer_group_records as records
from rill.coordinator.group.consumer_group import (
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    MemberState,
    normalize,
    stored_topic_regex,
    topic_regex,
)
from rill.coordinator.group.consumer_group_assignors import ASSIGNORS, AssignmentMember
from rill.coordinator.group.consumer_group_classic import ClassicMembersMixin
from rill.coordinator.group.consumer_group_migration import MigrationMixin
from rill.coordinator.group.consumer_group_offsets import ConsumerGroupOffsetsMixin
from rill.coordinator.group.consumer_group_reconciliation import reconcile
from rill.errors import ErrorCode, KafkaError
from rill.metadata.store import INTERNAL_TOPICS, OFFSETS_TOPIC
from rill.records.record import Record

if TYPE_CHECKING:
    from rill.coordinator.group.group_coordinator import GroupCoordinator
    from rill.coordinator.group.group_metadata import GroupMetadata

log = logging.getLogger(__name__)

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
KeyValue = tuple[bytes, bytes | None]


@dataclass(slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: dict[uuid.UUID, list[int]] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class HeartbeatResult:
    error: ErrorCode = ErrorCode.NO_ERROR
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


def _fail(error: ErrorCode, message: str | None = None) -> HeartbeatResult:
    return HeartbeatResult(error=error, message=message)


class ConsumerGroupCoordinator(ConsumerGroupOffsetsMixin, MigrationMixin, ClassicMembersMixin):
    """The consumer groups of the ``__consumer_offsets`` partitions this broker leads."""

    def __init__(self, classic: GroupCoordinator) -> None:
        self.classic = classic
        get = classic.config.get
        self.session_timeout_ms = int(get("group.consumer.session.timeout.ms"))
        self.heartbeat_interval_ms = int(get("group.consumer.heartbeat.interval.ms"))
        self.max_size = int(get("group.consumer.max.size"))
        assignors = get("group.consumer.assignors")
        names = assignors if isinstance(assignors, list) else str(assignors).split(",")
        self.assignors = [n.strip() for n in names if n.strip() in ASSIGNORS] or ["uniform"]
        self.groups: dict[str, ConsumerGroup] = {}
        self._locks: dict[str, list[Any]] = {}  # group id -> [lock, users]
        self._sessions: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._rebalances: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._classic_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}  # a classic member's join or sync
        # Rebalances for the metrics: from a group epoch bump until every member reached the new target.
        self.rebalance_count = 0
        self.rebalance_time_ms_total = 0.0
        self._rebalance_started: dict[str, float] = {}

    # -- lifecycle -----------------------------------------------------------------------------------------

    def load(self, partitions: set[int]) -> dict[str, int]:
        """Replay the consumer groups of ``__consumer_offsets`` partitions this broker now leads; every member
        gets a fresh session. Returns the offset of each loaded group's last record."""
        topic = self.classic.manager.metadata.topic(OFFSETS_TOPIC)
        if topic is None or not partitions:
            return {}
        replay = records.ConsumerGroupReplay()
        count = 0
        for p in sorted(partitions):
            partition = self.classic.manager.replica_manager.partitions().get(TopicPartition(OFFSETS_TOPIC, p))
            if partition is not None:
                count += records.load_partition_log(partition.log, replay)
        loaded = replay.finish()
        for group_id, group in loaded.items():
            group.subscribed_partitions = self._subscription(group.members.values())
            self.groups[group_id] = group
            for member in group.members.values():
                self._schedule_session(group_id, member.member_id)
        if loaded:
            log.info("Loaded %d consumer group(s) from %d record(s)", len(loaded), count)
        return {group_id: replay.last_offset.get(group_id, -1) for group_id in loaded}

    def unload(self, partitions: set[int]) -> None:
        for group_id in [g for g in self.groups if self.classic.partition_for(g) in partitions]:
            group = self.groups.pop(group_id)
            for member_id in group.members:
                self._cancel_timers(group_id, member_id)

    def shutdown(self) -> None:
        for handle in [*self._sessions.values(), *self._rebalances.values(), *self._classic_timers.values()]:
            handle.cancel()
        self._sessions.clear()
        self._rebalances.clear()
        self._classic_timers.clear()

    def is_consumer_group(self, group_id: str) -> bool:
        return group_id in self.groups

    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    # -- writes ----------------------------------------------------------------------------------------------

    async def _write(self, group_id: str, kvs: list[KeyValue]) -> None:
        """Append a group's records to its ``__consumer_offsets`` partition (the one path all of them take)."""
        if not kvs:
            return
        now = int(time.time() * 1000)
        manager = self.classic.manager
        write = manager._append(group_id, [Record(0, now, key, value) for key, value in kvs], offsets=False)
        code = await manager.complete(write, offsets=False)  # acks=all: answered once the ISR has it
        if code != ErrorCode.NO_ERROR:
            raise KafkaError(code, f"the records of group {group_id} were not replicated: {code.name}")
        if (moved := self.classic.not_serving(group_id)) is not None:  # unloaded meanwhile: apply nothing
            raise KafkaError(moved, f"the coordinator of group {group_id} moved during the write")

    def lock(self, group_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """The group's lock: the classic APIs take it too, so a group changing protocol is seen by each request
        either before or after the change."""
        return self._lock(group_id)

    @contextlib.asynccontextmanager
    async def _lock(self, group_id: str) -> AsyncIterator[None]:
        """One change of a group at a time (its records are written before the change is applied). The lock
        is dropped once nobody uses it and the group does not exist, so unknown group ids leave nothing."""
        entry = self._locks.get(group_id)
        if entry is None:
            entry = self._locks[group_id] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0 and group_id not in self.groups:
                del self._locks[group_id]

    # -- ConsumerGroupHeartbeat --------------------------------------------------------------------------

    def _validate(self, req: HeartbeatRequest) -> HeartbeatResult | None:
        if not req.group_id:
            return _fail(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms <= 0:
                return _fail(ErrorCode.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or any(req.owned.values()):
                return _fail(ErrorCode.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                return _fail(ErrorCode.INVALID_REQUEST,
                             "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")  # fmt: skip
        elif req.member_epoch > 0 or req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            if not req.member_id:
                return _fail(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        else:
            return _fail(ErrorCode.INVALID_REQUEST, f"MemberEpoch {req.member_epoch} is invalid.")
        if req.member_epoch == STATIC_LEAVE_EPOCH and req.instance_id is None:
            return _fail(ErrorCode.INVALID_REQUEST, "InstanceId can't be null when leaving as a static member.")
        if req.server_assignor is not None and req.server_assignor not in self.assignors:
            return _fail(ErrorCode.UNSUPPORTED_ASSIGNOR,
                         f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                         f"{', '.join(self.assignors)}.")  # fmt: skip
        if req.subscribed_topic_regex is not None:
            try:
                topic_regex(req.subscribed_topic_regex)
            except re2.error as e:
                return _fail(ErrorCode.INVALID_REGULAR_EXPRESSION,
                             f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid regular "
                             f"expression: {e}.")  # fmt: skip
        return None

    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        if (code := self.classic.not_serving(req.group_id)) is not None:
            return _fail(code)
        invalid = self._validate(req)
        if invalid is not None:
            return invalid
        async with self._lock(req.group_id):
            if (code := self.classic.not_serving(req.group_id)) is not None:
                return _fail(code)
            classic = self.classic.groups.get(req.group_id)
            upgrading = None
            if req.group_id not in self.groups and classic is not None and classic.all_members():
                refused = self.refuse_upgrade(classic) if req.member_epoch == 0 else None
                if req.member_epoch != 0 or refused is not None:
                    code, message = refused or (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a "
                                                "consumer group.")  # fmt: skip
                    return _fail(code, message)
                upgrading = classic
            try:
                if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                    return await self._leave(req)
                return await self._heartbeat(req, upgrading)
            except KafkaError as e:
                log.warning("Consumer group %s: heartbeat of %s failed: %s", req.group_id, req.member_id, e.message)
                return _fail(e.code, e.message)

    async def _heartbeat(self, req: HeartbeatRequest, upgrading: GroupMetadata | None = None) -> HeartbeatResult:
        group = self.groups.get(req.group_id)
        kvs: list[KeyValue] = []
        if group is None:
            if req.member_epoch != 0:
                return _fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {req.group_id} has no member {req.member_id}.")
            group = ConsumerGroup(req.group_id)
            if upgrading is not None:  # a classic group becomes this consumer group (written with the heartbeat)
                group, kvs = self.converted(upgrading)
        member = group.members.get(req.member_id) if req.member_id else None
        replaced: ConsumerGroupMember | None = None  # a static member's previous incarnation
        if req.member_epoch == 0:
            if req.instance_id is not None and req.instance_id in group.static_members:
                previous = group.members[group.static_members[req.instance_id]]
                if previous.member_id != req.member_id and previous.member_epoch != STATIC_LEAVE_EPOCH:
                    message = f"Static member {req.instance_id} of group {req.group_id} has not left yet."
                    return _fail(ErrorCode.UNRELEASED_INSTANCE_ID, message)
                if previous.member_id != req.member_id:
                    replaced = previous
            if member is None and replaced is None and len(group.members) >= self.max_size:
                message = f"The consumer group has reached its maximum capacity of {self.max_size} members."
                return _fail(ErrorCode.GROUP_MAX_SIZE_REACHED, message)
            member_id = req.member_id or str(uuid.uuid4())
            if replaced is not None:  # the static member comes back: it keeps its assignment and epoch
                member = replaced.replace(member_id=member_id, member_epoch=replaced.previous_member_epoch)
                kvs += records.member_tombstones(group.group_id, replaced.member_id)
            else:
                member = ConsumerGroupMember(member_id=member_id)
            is_new = True
        else:
            if member is None:
                return _fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {req.group_id} has no member {req.member_id}.")
            is_new = False
            error = _check_epoch(member, req)
            if error is not None:
                return error
        updated = member.replace(
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            client_id=req.client_id,
            client_host=req.client_host,
            subscribed_topic_names=tuple(sorted(set(req.subscribed_topic_names)))
            if req.subscribed_topic_names is not None
            else member.subscribed_topic_names,
            subscribed_topic_regex=req.subscribed_topic_regex
            if req.subscribed_topic_regex is not None
            else member.subscribed_topic_regex,
            rebalance_timeout_ms=req.rebalance_timeout_ms
            if req.rebalance_timeout_ms > 0
            else member.rebalance_timeout_ms,
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
        )
        owned = {t: list(ps) for t, ps in req.owned.items()} if req.owned is not None else None
        reconciled = await self._commit_member(
            group, member, updated, is_new=is_new, replaced=replaced, owned=owned, kvs=kvs, upgrading=upgrading
        )
        full = req.member_epoch == 0 or (
            req.rebalance_timeout_ms != -1 and req.subscribed_topic_names is not None and req.owned is not None
        )
        changed = normalize(reconciled.assigned) != normalize(member.assigned)
        return HeartbeatResult(
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self._group_config(group.group_id, "consumer.heartbeat.interval.ms"),
            assignment=normalize(reconciled.assigned) if full or changed or is_new else None,
        )

    async def _commit_member(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        updated: ConsumerGroupMember,
        *,
        is_new: bool,
        replaced: ConsumerGroupMember | None,
        owned: Mapping[uuid.UUID, list[int]] | None,
        kvs: list[KeyValue],
        upgrading: GroupMetadata | None = None,
    ) -> ConsumerGroupMember:
        """Steps (2)-(4) of a heartbeat (or a classic member's JoinGroup) once the member's new version is known:
        bump the group epoch if its subscription changed, compute the target when due, reconcile the member,
        write every record, then apply. Returns the reconciled member."""
        subscription_changed = (is_new and replaced is None) or (
            updated.subscribed_topic_names,
            updated.subscribed_topic_regex,
            updated.server_assignor,
        ) != (member.subscribed_topic_names, member.subscribed_topic_regex, member.server_assignor)
        if is_new or not updated.same_metadata(member):
            kvs.append(records.member_metadata_record(group.group_id, updated))
        members = {**group.members, updated.member_id: updated}
        if replaced is not None:
            del members[replaced.member_id]
        subscribed = self._subscription(members.values())
        group_epoch = group.group_epoch
        if subscription_changed or subscribed != group.subscribed_partitions:
            group_epoch += 1
            kvs.append(records.group_epoch_record(group.group_id, group_epoch))
        target = dict(group.target)
        if replaced is not None and replaced.member_id in target:
            target[updated.member_id] = target.pop(replaced.member_id)
            kvs.append(records.target_member_record(group.group_id, updated.member_id, target[updated.member_id]))
        assignment_epoch = group.assignment_epoch
        assignor = group.assignor_name
        if group_epoch > assignment_epoch:
            assignor = _preferred(members.values(), self.assignors[0])
            new_target = self._assign(assignor, members, target)
            for member_id, share in new_target.items():
                if normalize(target.get(member_id, {})) != share or member_id not in target:
                    kvs.append(records.target_member_record(group.group_id, member_id, share))
            target = dict(new_target)
            assignment_epoch = group_epoch
            kvs.append(records.target_epoch_record(group.group_id, assignment_epoch))
        reconciled = reconcile(updated, target.get(updated.member_id, {}), assignment_epoch, group.owner_epoch, owned)
        if is_new or not reconciled.same_assignment(member):
            kvs.append(records.current_assignment_record(group.group_id, reconciled))
        started, before_epoch = time.monotonic(), group.group_epoch
        if upgrading is not None:
            self.freeze_classic(upgrading)
            try:
                await self._write(group.group_id, kvs)
            except KafkaError:
                if self.classic.not_serving(group.group_id) is None:
                    await self.undo_upgrade(upgrading, kvs)
                self.thaw_classic(upgrading)
                raise
            self.finish_upgrade(upgrading, group)
        else:
            await self._write(group.group_id, kvs)
        # Written: apply.
        if replaced is not None:
            group.remove_member(replaced.member_id)
            self._cancel_timers(group.group_id, replaced.member_id)
        group.group_epoch, group.assignment_epoch, group.target = group_epoch, assignment_epoch, target
        group.subscribed_partitions = subscribed
        group.assignor_name = assignor
        group.put_member(reconciled)
        self.groups[group.group_id] = group
        self._schedule_session(group.group_id, reconciled.member_id)
        self._maybe_schedule_rebalance_timeout(group.group_id, member, reconciled)
        if group_epoch > before_epoch:
            self._rebalance_started.setdefault(group.group_id, started)
        self._track_rebalance(group, started)
        return reconciled

    async def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        group = self.groups.get(req.group_id)
        member = group.members.get(req.member_id) if group is not None else None
        if group is None or member is None:
            return _fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {req.group_id} has no member {req.member_id}.")
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # It will come back: keep its assignment (and place) until its session ends.
            left = member.replace(member_epoch=STATIC_LEAVE_EPOCH, previous_member_epoch=member.member_epoch)
            await self._write(group.group_id, [records.current_assignment_record(group.group_id, left)])
            group.put_member(left)
            self._cancel_rebalance(group.group_id, member.member_id)
            return HeartbeatResult(member_id=member.member_id, member_epoch=STATIC_LEAVE_EPOCH,
                                   heartbeat_interval_ms=self.heartbeat_interval_ms)  # fmt: skip
        await self.remove_member(group, member.member_id, "left the group")
        return HeartbeatResult(member_id=member.member_id, member_epoch=LEAVE_EPOCH,
                               heartbeat_interval_ms=self.heartbeat_interval_ms)  # fmt: skip

    async def remove_member(self, group: ConsumerGroup, member_id: str, why: str) -> None:
        """Remove a member and bump the group epoch, so the others share its partitions; or, when only members
        of the classic protocol stay and the policy allows, make the group a classic group again."""
        if self.downgrade_allowed(group, {member_id}):
            await self.downgrade(group, {member_id}, f"member {member_id} {why}")
            return
        epoch = group.group_epoch + 1
        kvs = records.member_tombstones(group.group_id, member_id)
        kvs.append(records.group_epoch_record(group.group_id, epoch))
        await self._write(group.group_id, kvs)
        group.remove_member(member_id)
        group.group_epoch = epoch
        self._cancel_timers(group.group_id, member_id)
        self._track_rebalance(group, time.monotonic())
        log.info("Member %s of consumer group %s %s; group epoch %d", member_id, group.group_id, why, epoch)

    def _track_rebalance(self, group: ConsumerGroup, started: float) -> None:
        """Count a rebalance once the group is Stable again (``started``: when this change began)."""
        state = group.state
        if state in (ConsumerGroupState.ASSIGNING, ConsumerGroupState.RECONCILING):
            self._rebalance_started.setdefault(group.group_id, started)
            return
        began = self._rebalance_started.pop(group.group_id, None)
        if began is not None and state == ConsumerGroupState.STABLE:
            self.rebalance_count += 1
            self.rebalance_time_ms_total += (time.monotonic() - began) * 1000

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a consumer group: only when it has no members; its records are tombstoned."""
        if (code := self.classic.not_serving(group_id)) is not None:
            return code
        async with self._lock(group_id):
            return await self.delete_group_locked(group_id)

    async def delete_group_locked(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        kvs: list[KeyValue] = []
        for member_id in group.target:
            kvs += records.member_tombstones(group_id, member_id)
        try:
            await self._write(group_id, [*kvs, *records.group_tombstones(group_id)])
        except KafkaError as e:
            return e.code
        group.deleted = True
        del self.groups[group_id]
        return ErrorCode.NO_ERROR

    # -- assignment ------------------------------------------------------------------------------------------

    def _topic_names(self, member: ConsumerGroupMember) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex and (pattern := stored_topic_regex(member.subscribed_topic_regex)):
            names.update(t for t in self.classic.manager.metadata.topics()
                         if t not in INTERNAL_TOPICS and pattern.fullmatch(t))  # fmt: skip
        return names

    def _subscription(self, members: Any) -> dict[str, int]:
        """The partition counts of the existing topics the members subscribe to."""
        names: set[str] = set()
        for member in members:
            names |= self._topic_names(member)
        result: dict[str, int] = {}
        for name in names:
            topic = self.classic.manager.metadata.topic(name)
            if topic is not None:
                result[name] = len(topic.partitions)
        return result

    def _assign(
        self, assignor: str, members: Mapping[str, ConsumerGroupMember], current: Mapping[str, Assignment]
    ) -> dict[str, Assignment]:
        metadata = self.classic.manager.metadata
        partitions: dict[uuid.UUID, int] = {}
        names: dict[uuid.UUID, str] = {}
        inputs = []
        for member in sorted(members.values(), key=lambda m: m.member_id):
            ids = set()
            for name in self._topic_names(member):
                topic = metadata.topic(name)
                if topic is not None and topic.partitions:
                    ids.add(topic.topic_id)
                    partitions[topic.topic_id] = len(topic.partitions)
                    names[topic.topic_id] = name
            inputs.append(AssignmentMember(member.member_id, member.instance_id, frozenset(ids)))
        return ASSIGNORS[assignor](inputs, partitions, names, current)

    # -- timers ----------------------------------------------------------------------------------------------

    def _schedule_session(self, group_id: str, member_id: str) -> None:
        key = (group_id, member_id)
        old = self._sessions.pop(key, None)
        if old is not None:
            old.cancel()
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is not None and member.classic is not None:  # a classic member keeps its own session timeout
            timeout_ms = member.classic.session_timeout_ms
        else:
            timeout_ms = self._group_config(group_id, "consumer.session.timeout.ms")
        self._sessions[key] = self.classic.loop.call_later(
            timeout_ms / 1000, self._expire, group_id, member_id, "session timed out"
        )

    def _group_config(self, group_id: str, name: str) -> int:
        """A group's own ``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms`` (set through
        IncrementalAlterConfigs on its GROUP resource), else the broker's."""
        own = self.classic.manager.metadata.group_configs(group_id).get(name)
        if own is not None:
            return int(own)
        return self.session_timeout_ms if name == "consumer.session.timeout.ms" else self.heartbeat_interval_ms

    def _maybe_schedule_rebalance_timeout(
        self, group_id: str, before: ConsumerGroupMember, after: ConsumerGroupMember
    ) -> None:
        if after.state != MemberState.UNREVOKED_PARTITIONS:
            self._cancel_rebalance(group_id, after.member_id)
            return
        if before.state == MemberState.UNREVOKED_PARTITIONS and (group_id, after.member_id) in self._rebalances:
            return
        timeout = after.rebalance_timeout_ms if after.rebalance_timeout_ms > 0 else self.session_timeout_ms
        self._rebalances[(group_id, after.member_id)] = self.classic.loop.call_later(
            timeout / 1000, self._expire, group_id, after.member_id, "did not revoke its partitions in time"
        )

    def _cancel_rebalance(self, group_id: str, member_id: str) -> None:
        handle = self._rebalances.pop((group_id, member_id), None)
        if handle is not None:
            handle.cancel()

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        handle = self._sessions.pop((group_id, member_id), None)
        if handle is not None:
            handle.cancel()
        self._cancel_rebalance(group_id, member_id)
        self._cancel_classic_timer(group_id, member_id)

    def _expire(self, group_id: str, member_id: str, why: str) -> None:
        for timers in (self._sessions, self._rebalances, self._classic_timers):
            handle = timers.pop((group_id, member_id), None)
            if handle is not None:
                handle.cancel()
        self.classic.loop.create_task(self._expire_member(group_id, member_id, why))

    async def _expire_member(self, group_id: str, member_id: str, why: str) -> None:
        async with self._lock(group_id):
            group = self.groups.get(group_id)
            if group is None or member_id not in group.members or self.classic.not_serving(group_id) is not None:
                return
            try:
                await self.remove_member(group, member_id, why)
            except KafkaError as e:  # the write failed: try again after another session
                log.warning("Cannot remove member %s of consumer group %s: %s", member_id, group_id, e.message)
                self._schedule_session(group_id, member_id)

    def state_of(self, group_id: str) -> ConsumerGroupState | None:
        group = self.groups.get(group_id)
        return group.state if group is not None else None


def _check_epoch(member: ConsumerGroupMember, req: HeartbeatRequest) -> HeartbeatResult | None:
    """FENCED_MEMBER_EPOCH unless the member is at its epoch, or at the previous one while owning nothing it
    was not assigned (its last response may have been lost)."""
    if req.member_epoch == member.member_epoch:
        return None
    previous = req.member_epoch == member.previous_member_epoch and req.member_epoch < member.member_epoch
    if (
        previous
        and req.owned is not None
        and all(set(ps) <= member.assigned.get(t, frozenset()) for t, ps in req.owned.items())
    ):
        return None
    return _fail(ErrorCode.FENCED_MEMBER_EPOCH,
                 f"The consumer group member has a member epoch ({req.member_epoch}) different from the one the "
                 f"coordinator has ({member.member_epoch}).")  # fmt: skip


def _preferred(members: Any, default: str) -> str:
    votes: dict[str, int] = {}
    for member in members:
        if member.server_assignor:
            votes[member.server_assignor] = votes.get(member.server_assignor, 0) + 1
    return max(sorted(votes), key=lambda n: votes[n]) if votes else default
