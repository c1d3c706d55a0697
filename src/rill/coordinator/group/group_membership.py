"""The second half of the group coordinator's membership protocol: SyncGroup (the leader's assignment
handed to every member), Heartbeat and session expiry, and LeaveGroup.

A member's session is a loop timer re-armed by each heartbeat (and by JoinGroup/SyncGroup/OffsetCommit);
when it fires the member is removed and the group rebalances. Members waiting in a JoinGroup or SyncGroup are
not expired by it: the rebalance timeout governs them. A group in CompletingRebalance also arms a sync timer
(the rebalance timeout): members that never send their SyncGroup are removed when it fires.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from rill.coordinator.group.deferred_writes import DeferredWrite
from rill.coordinator.group.group_metadata import (
    GroupMetadata,
    GroupState,
    JoinGroupResult,
    MemberMetadata,
    SyncCallback,
    SyncGroupResult,
)
from rill.coordinator.group.group_metadata_manager import GroupMetadataManager
from rill.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000  # KIP-394: a new member's JoinGroup is held at most this long


def now_ms() -> int:
    return int(time.time() * 1000)


def resolver(future: asyncio.Future[Any]) -> Callable[[Any], None]:
    def resolve(result: Any) -> None:
        if not future.done():
            future.set_result(result)

    return resolve


class GroupMembershipMixin:
    # Provided by GroupCoordinator.
    groups: dict[str, GroupMetadata]
    manager: GroupMetadataManager
    active: bool
    not_serving: Callable[[str], ErrorCode | None]
    _heartbeats: dict[tuple[str, str], asyncio.TimerHandle]
    _join_timers: dict[str, tuple[asyncio.TimerHandle, bool]]
    _sync_timers: dict[str, asyncio.TimerHandle]
    _rebalance_started: dict[str, float]
    last_rebalance_ms: dict[str, float]
    rebalance_count: int
    rebalance_time_ms_total: float
    consumer: Any  # the consumer groups of KIP-848, which serve classic members too

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        raise NotImplementedError

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        raise NotImplementedError

    def _maybe_complete_join(self, group: GroupMetadata) -> None:
        raise NotImplementedError

    def _cancel_join_timer(self, group_id: str) -> None:
        raise NotImplementedError

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        raise NotImplementedError

    # -- SyncGroup ---------------------------------------------------------------------------------------

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncGroupResult:
        future: asyncio.Future[SyncGroupResult] = self.loop.create_future()
        async with self.consumer.lock(group_id):  # a classic member of a consumer group is served by it
            if self.not_serving(group_id) is None and self.consumer.is_consumer_group(group_id):
                if not self.consumer.has_members(group_id):
                    return SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID)
                synced: SyncGroupResult = self.consumer.classic_sync(
                    group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name
                )
                return synced
            self._handle_sync_group(group_id, generation_id, member_id, group_instance_id, protocol_type,
                                    protocol_name, assignments, resolver(future))  # fmt: skip
        return await future

    def _handle_sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        callback: SyncCallback,
    ) -> None:
        def fail(code: ErrorCode) -> None:
            callback(SyncGroupResult(code))

        if (code := self.not_serving(group_id)) is not None:
            return fail(code)
        group = self.groups.get(group_id)
        if group is None:
            return fail(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_in(GroupState.DEAD):
            return fail(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(group_instance_id, member_id):
            return fail(ErrorCode.FENCED_INSTANCE_ID)
        if not group.has(member_id):
            return fail(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            return fail(ErrorCode.ILLEGAL_GENERATION)
        if protocol_type is not None and protocol_type != group.protocol_type:
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if protocol_name is not None and protocol_name != group.protocol_name:
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_in(GroupState.EMPTY):
            return fail(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return fail(ErrorCode.REBALANCE_IN_PROGRESS)
        member = group.get(member_id)
        if group.is_in(GroupState.STABLE):
            self._remove_pending_sync_member(group, member_id)
            self._schedule_heartbeat(group, member)
            callback(SyncGroupResult(ErrorCode.NO_ERROR, group.protocol_type, group.protocol_name, member.assignment))
            return
        # CompletingRebalance: wait for the leader's assignment.
        group.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.awaiting_sync = callback
        self._remove_pending_sync_member(group, member_id)
        if not group.is_leader(member_id):
            return
        full = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
        try:
            write = self.manager.store_group(group, full)
        except KafkaError as e:
            self._assignment_not_stored(group, e.code)
            return
        if (code := self.manager.outcome(write, offsets=False)) is not None:  # replicated as it was appended
            self._assignment_stored(group, group.generation_id, full, code)
        else:
            self._spawn(self._await_assignment(group, group.generation_id, full, write), f"sync-{group.group_id}")

    async def _await_assignment(
        self, group: GroupMetadata, generation_id: int, full: dict[str, bytes], write: DeferredWrite
    ) -> None:
        self._assignment_stored(group, generation_id, full, await self.manager.complete(write, offsets=False))

    def _assignment_not_stored(self, group: GroupMetadata, code: ErrorCode) -> None:
        log.warning("Failed to store the assignment of group %s: %s", group.group_id, code.name)
        self._reset_and_propagate_assignment_error(group, code)
        self._maybe_prepare_rebalance(group, f"storing the group's assignment failed ({code.name})")

    def _assignment_stored(
        self, group: GroupMetadata, generation_id: int, full: dict[str, bytes], code: ErrorCode
    ) -> None:
        """The leader's assignment is written (or failed to be): the members get it and the group is Stable, as
        long as nothing changed the group meanwhile (another member joined: a rebalance is under way)."""
        current = self.groups.get(group.group_id) is group and group.generation_id == generation_id
        if not current or not group.is_in(GroupState.COMPLETING_REBALANCE):
            return
        if code != ErrorCode.NO_ERROR:
            self._assignment_not_stored(group, code)
            return
        for m in group.iter_members():
            m.assignment = full.get(m.member_id, b"")
            if group.maybe_invoke_sync_callback(
                m, SyncGroupResult(ErrorCode.NO_ERROR, group.protocol_type, group.protocol_name, m.assignment)
            ):
                self._schedule_heartbeat(group, m)
        group.transition_to(GroupState.STABLE, now_ms())
        started = self._rebalance_started.pop(group.group_id, None)
        took = (time.monotonic() - started) * 1000 if started is not None else 0.0
        self.last_rebalance_ms[group.group_id] = took
        self.rebalance_count += 1
        self.rebalance_time_ms_total += took
        log.info(
            "Group %s is stable: generation %d, %d member(s), leader %s, rebalance took %.1f ms",
            group.group_id,
            group.generation_id,
            len(group),
            group.leader_id,
            took,
        )

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.iter_members():
            member.assignment = b""
            group.maybe_invoke_sync_callback(member, SyncGroupResult(error))

    def _schedule_sync_timer(self, group: GroupMetadata) -> None:
        self._cancel_sync_timer(group.group_id)
        timeout = group.rebalance_timeout_ms() / 1000
        self._sync_timers[group.group_id] = self.loop.call_later(
            timeout, self._on_sync_timeout, group, group.generation_id
        )

    def _cancel_sync_timer(self, group_id: str) -> None:
        handle = self._sync_timers.pop(group_id, None)
        if handle is not None:
            handle.cancel()

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._cancel_sync_timer(group.group_id)

    def _on_sync_timeout(self, group: GroupMetadata, generation_id: int) -> None:
        self._sync_timers.pop(group.group_id, None)
        if generation_id != group.generation_id or not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        missing = sorted(group.pending_sync_members)
        if not missing:
            return
        log.info("Group %s removes member(s) %s that sent no SyncGroup in time", group.group_id, missing)
        for member_id in missing:
            member = group.members.get(member_id)
            if member is not None:
                self._cancel_heartbeat(group.group_id, member_id)
                group.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
                group.remove(member_id)
        group.pending_sync_members.clear()
        self._maybe_prepare_rebalance(group, f"members {missing} failed to sync")

    # -- Heartbeat ---------------------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        if (code := self.not_serving(group_id)) is not None:
            return code
        if self.consumer.is_consumer_group(group_id):  # a classic member of a consumer group
            answer: ErrorCode = self.consumer.classic_heartbeat(group_id, member_id, group_instance_id, generation_id)
            return answer
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(group_instance_id, member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if not group.has(member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_in(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._schedule_heartbeat(group, group.get(member_id))
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NO_ERROR

    def _schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None) -> None:
        key = (group.group_id, member.member_id)
        old = self._heartbeats.pop(key, None)
        if old is not None:
            old.cancel()
        if timeout_ms is None:
            timeout_ms = NEW_MEMBER_JOIN_TIMEOUT_MS if member.is_new else member.session_timeout_ms
        self._heartbeats[key] = self.loop.call_later(
            timeout_ms / 1000, self._on_heartbeat_expired, group, member.member_id
        )

    def _cancel_heartbeat(self, group_id: str, member_id: str) -> None:
        handle = self._heartbeats.pop((group_id, member_id), None)
        if handle is not None:
            handle.cancel()

    def _on_heartbeat_expired(self, group: GroupMetadata, member_id: str) -> None:
        self._heartbeats.pop((group.group_id, member_id), None)
        if group.is_in(GroupState.DEAD) or not group.has(member_id):
            return
        member = group.get(member_id)
        if not member.is_new and (member.is_awaiting_join or member.is_awaiting_sync):
            return  # waiting members are governed by the rebalance timeout
        reason = "its JoinGroup timed out" if member.is_new else "its session timed out"
        log.info("Member %s of group %s has failed (%s), removing it", member_id, group.group_id, reason)
        self._remove_member_and_update_group(group, member, f"removing member {member_id}: {reason}")

    def _schedule_pending_expiry(self, group: GroupMetadata, member_id: str, timeout_ms: int) -> None:
        key = (group.group_id, member_id)
        old = self._heartbeats.pop(key, None)
        if old is not None:
            old.cancel()
        self._heartbeats[key] = self.loop.call_later(timeout_ms / 1000, self._on_pending_expired, group, member_id)

    def _on_pending_expired(self, group: GroupMetadata, member_id: str) -> None:
        self._heartbeats.pop((group.group_id, member_id), None)
        if group.remove_pending_member(member_id):
            log.info("Pending member %s of group %s expired", member_id, group.group_id)
            self._maybe_complete_join(group)

    # -- LeaveGroup --------------------------------------------------------------------------------------

    def leave_group(
        self, group_id: str, leaving: list[tuple[str, str | None, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """Remove members given as (member id, group instance id, reason); returns the group-level error
        and each member's."""
        if (code := self.not_serving(group_id)) is not None:
            return code, []
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NO_ERROR, [(m, i, ErrorCode.UNKNOWN_MEMBER_ID) for m, i, _ in leaving]
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        results = []
        for member_id, instance_id, reason in leaving:
            results.append((member_id, instance_id, self._leave_one(group, member_id, instance_id, reason)))
        return ErrorCode.NO_ERROR, results

    def _leave_one(
        self, group: GroupMetadata, member_id: str, instance_id: str | None, reason: str | None
    ) -> ErrorCode:
        if not member_id and instance_id is not None:
            found = group.current_static_member_id(instance_id)
            if found is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            member_id = found
        elif group.is_static_member_fenced(instance_id, member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if group.is_pending_member(member_id):
            self._cancel_heartbeat(group.group_id, member_id)
            group.remove_pending_member(member_id)
            self._maybe_complete_join(group)
            return ErrorCode.NO_ERROR
        if not group.has(member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.get(member_id)
        member.is_leaving = True
        why = f" ({reason})" if reason else ""
        log.info("Member %s of group %s is leaving%s", member_id, group.group_id, why)
        self._remove_member_and_update_group(group, member, f"member {member_id} left the group{why}")
        return ErrorCode.NO_ERROR

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata, reason: str) -> None:
        group.maybe_invoke_join_callback(member, JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        group.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
        self._cancel_heartbeat(group.group_id, member.member_id)
        group.remove(member.member_id)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    def _cancel_group_timers(self, group_id: str) -> None:
        self._cancel_join_timer(group_id)
        self._cancel_sync_timer(group_id)
        for key in [k for k in self._heartbeats if k[0] == group_id]:
            self._heartbeats.pop(key).cancel()
