"""The group coordinator: Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) on the
event loop, with session, rebalance and initial-delay timers as loop timers.

This broker coordinates every group. Membership follows Kafka's GroupCoordinator: a rebalance moves a group
to PreparingRebalance and waits until every known member has rejoined (or the rebalance timeout removes the
ones that did not); the generation then advances, the leader receives the members' metadata and computes the
assignment, and SyncGroup hands each member its share. Static members (``group.instance.id``) that come back
within their session timeout take over their old member id's place without a rebalance. Offsets, listing and
deletion are in :mod:`rill.coordinator.group.group_offsets`; SyncGroup, heartbeats and LeaveGroup in
:mod:`rill.coordinator.group.group_membership`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from rill.common import TopicPartition
from rill.coordinator.group.consumer_group_heartbeat import ConsumerGroupCoordinator
from rill.coordinator.group.deferred_writes import DeferredWrite
from rill.coordinator.group.group_membership import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    GroupMembershipMixin,
    now_ms,
    resolver,
)
from rill.coordinator.group.group_metadata import (
    GroupMetadata,
    GroupState,
    JoinCallback,
    JoinGroupResult,
    MemberMetadata,
    SyncGroupResult,
    generate_member_id,
)
from rill.coordinator.group.group_metadata_manager import GroupMetadataManager
from rill.coordinator.group.group_offsets import GroupOffsetsMixin
from rill.coordinator.group.group_txn_offsets import GroupTxnOffsetsMixin
from rill.errors import ErrorCode, KafkaError
from rill.metadata.store import OFFSETS_TOPIC

log = logging.getLogger(__name__)

# client id, client host, rebalance timeout, session timeout, protocol type, protocols
JoinArgs = tuple[
    str, str, int, int, str, list[tuple[str, bytes]]
]  # KIP-394: a new member's JoinGroup is held at most this long


class GroupCoordinator(GroupMembershipMixin, GroupOffsetsMixin, GroupTxnOffsetsMixin):
    @classmethod
    def create(cls, services: Any) -> GroupCoordinator:
        """The coordinator of a broker's services, with the groups kept in ``__consumer_offsets`` loaded."""
        manager = GroupMetadataManager(services.config, services.metadata, services.replica_manager)
        coordinator = cls(services.config, manager)
        coordinator.startup()
        services.metadata.add_listener(coordinator.on_metadata_delta)
        add_marker_listener = getattr(services.replica_manager, "add_txn_marker_listener", None)
        if add_marker_listener is not None:
            add_marker_listener(coordinator.on_txn_marker)
        return coordinator

    def __init__(self, config: Any, manager: GroupMetadataManager) -> None:
        self.config = config
        self.manager = manager
        self.initial_rebalance_delay_ms = int(config.get("group.initial.rebalance.delay.ms"))
        self.min_session_timeout_ms = int(config.get("group.min.session.timeout.ms"))
        self.max_session_timeout_ms = int(config.get("group.max.session.timeout.ms"))
        self.max_group_size = int(config.get("group.max.size"))
        self.offset_metadata_max_bytes = int(config.get("offset.metadata.max.bytes"))
        self.offsets_retention_ms = int(config.get("offsets.retention.minutes")) * 60 * 1000
        self.retention_check_interval_ms = int(config.get("offsets.retention.check.interval.ms"))
        self.groups: dict[str, GroupMetadata] = {}
        self.active = False
        self._heartbeats: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._join_timers: dict[str, tuple[asyncio.TimerHandle, bool]] = {}  # group -> (timer, initial delay)
        self._sync_timers: dict[str, asyncio.TimerHandle] = {}
        self._rebalance_started: dict[str, float] = {}
        self.last_rebalance_ms: dict[str, float] = {}
        self.rebalance_count = 0  # completed rebalances and the time they took, for the metrics
        self.rebalance_time_ms_total = 0.0
        self._expiry_timer: asyncio.TimerHandle | None = None
        # the partitions of __consumer_offsets whose groups are loaded here, with the leader epoch they were loaded at
        self._led: dict[int, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.consumer = ConsumerGroupCoordinator(self)  # the groups of KIP-848's protocol
        self._tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle ---------------------------------------------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def startup(self) -> None:
        self._led = self.manager.led_partitions()
        self.groups = self.manager.load_all(self._led)
        self.consumer.settle_loaded(self.groups, self.manager.metadata_loaded_at, self.consumer.load(self._led))
        for group in self.groups.values():
            for member in group.all_members():
                self._schedule_heartbeat(group, member)
        self.active = True
        # Offsets of a topic the metadata no longer has: it was deleted and the broker stopped before
        # they were tombstoned (on_metadata_delta does that while the broker runs). Kafka commits
        # offsets of existing topics only, and removes them when it replays the deletion.
        topics = self.manager.metadata.topics()
        self._remove_offsets(lambda g: [tp for tp in g.offsets if tp.topic not in topics], now_ms(), "Removed")
        self._schedule_expiry()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``coro`` (the end of a request that waits for its write) as a task the coordinator owns."""
        task = self.loop.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _when_written(self, write: DeferredWrite, then: Callable[[ErrorCode], None], name: str) -> None:
        """``then(code)`` once ``write`` is replicated or failed: now when it was replicated as appended."""
        if (code := self.manager.outcome(write, offsets=False)) is not None:
            then(code)
            return

        async def wait() -> None:
            then(await self.manager.complete(write, offsets=False))

        self._spawn(wait(), name)

    async def shutdown(self) -> None:
        self.active = False
        self.consumer.shutdown()
        for task in list(self._tasks):
            task.cancel()
        self.manager.writes.close()
        for handle in self._heartbeats.values():
            handle.cancel()
        for handle, _ in self._join_timers.values():
            handle.cancel()
        for handle in self._sync_timers.values():
            handle.cancel()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        self._heartbeats.clear()
        self._join_timers.clear()
        self._sync_timers.clear()
        for group in self.groups.values():
            for member in group.all_members():
                group.maybe_invoke_join_callback(member, JoinGroupResult(ErrorCode.NOT_COORDINATOR, member.member_id))
                group.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.NOT_COORDINATOR))

    def follow_leadership(self) -> None:
        """Load the groups of the ``__consumer_offsets`` partitions this broker has come to lead, and unload
        those of the partitions it no longer leads (their members are told NOT_COORDINATOR and find the new
        coordinator), as Kafka's coordinator follows its partitions' leadership."""
        led = self.manager.led_partitions()
        # a partition led at a new epoch is loaded again: what this broker wrote at the old one may be gone
        lost = {p for p, epoch in self._led.items() if led.get(p) != epoch}
        gained = {p for p, epoch in led.items() if self._led.get(p) != epoch}
        self._led = led
        for p in lost:
            self.manager.writes.drop(TopicPartition(OFFSETS_TOPIC, p))
        for group_id in [g for g in self.groups if self.partition_for(g) in lost]:
            group = self.groups.pop(group_id)
            for member in group.all_members():
                handle = self._heartbeats.pop((group_id, member.member_id), None)
                if handle is not None:
                    handle.cancel()
                group.maybe_invoke_join_callback(member, JoinGroupResult(ErrorCode.NOT_COORDINATOR, member.member_id))
                group.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.NOT_COORDINATOR))
            self._cancel_join_timer(group_id)
            sync = self._sync_timers.pop(group_id, None)
            if sync is not None:
                sync.cancel()
        self.consumer.unload(lost)
        if lost:
            log.info("Unloaded the groups of %s partitions %s: another broker leads them", OFFSETS_TOPIC, sorted(lost))
        if gained:
            loaded = self.manager.load_all(gained)
            self.consumer.settle_loaded(loaded, self.manager.metadata_loaded_at, self.consumer.load(gained))
            for group_id, group in loaded.items():
                self.groups[group_id] = group
                for member in group.all_members():
                    self._schedule_heartbeat(group, member)
            log.info("Loaded %d group(s) of %s partitions %s", len(loaded), OFFSETS_TOPIC, sorted(gained))

    def not_serving(self, group_id: str) -> ErrorCode | None:
        """COORDINATOR_NOT_AVAILABLE while the coordinator is not running, NOT_COORDINATOR for a group whose
        ``__consumer_offsets`` partition another broker leads (the client asks FindCoordinator again), else None."""
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if not self.manager.leads(self.partition_for(group_id)):
            return ErrorCode.NOT_COORDINATOR
        return None

    def partition_for(self, group_id: str) -> int:
        return self.manager.partition_for(group_id)

    # -- JoinGroup ---------------------------------------------------------------------------------------

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        reason: str | None = None,
    ) -> JoinGroupResult:
        future: asyncio.Future[JoinGroupResult] = self.loop.create_future()
        args = (group_id, member_id, group_instance_id, require_known_member_id, client_id, client_host,
                rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)  # fmt: skip
        async with self.consumer.lock(group_id):  # a consumer group with members serves classic members too
            if self.not_serving(group_id) is None and self.consumer.has_members(group_id):
                joined: JoinGroupResult = await self.consumer.classic_join(*args)
                return joined
            self._handle_join_group(*args, reason, resolver(future))
        return await future

    def _handle_join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        reason: str | None,
        callback: JoinCallback,
    ) -> None:
        def fail(code: ErrorCode, mid: str = member_id) -> None:
            callback(JoinGroupResult(code, mid))

        if not group_id:
            return fail(ErrorCode.INVALID_GROUP_ID)
        if (code := self.not_serving(group_id)) is not None:
            return fail(code)
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return fail(ErrorCode.INVALID_SESSION_TIMEOUT)
        is_unknown = member_id == ""
        group = self.groups.get(group_id)
        if group is None:
            if not is_unknown:
                return fail(ErrorCode.UNKNOWN_MEMBER_ID)
            group = self.groups[group_id] = GroupMetadata(group_id, current_state_timestamp=now_ms())
        if group.is_in(GroupState.DEAD):
            return fail(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not group.has(member_id) and len(group) >= self.max_group_size:
            return fail(ErrorCode.GROUP_MAX_SIZE_REACHED)
        args: JoinArgs = (
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            protocol_type,
            protocols,
        )
        why = f" ({reason})" if reason else ""
        if is_unknown:
            if not group.supports_protocols(protocol_type, [n for n, _ in protocols]):
                return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            new_id = generate_member_id(client_id, group_instance_id)
            if group_instance_id is not None:
                old_id = group.current_static_member_id(group_instance_id)
                if old_id is not None:
                    log.info(
                        "Static member with group.instance.id %s rejoins group %s in state %s: "
                        "replacing member %s with %s%s",
                        group_instance_id,
                        group_id,
                        group.state.value,
                        old_id,
                        new_id,
                        why,
                    )
                    self._update_static_member(
                        group,
                        old_id,
                        new_id,
                        group_instance_id,
                        protocols,
                        rebalance_timeout_ms,
                        session_timeout_ms,
                        callback,
                    )
                else:
                    self._add_member_and_rebalance(group, new_id, group_instance_id, *args, callback, why)
            elif require_known_member_id:
                group.add_pending_member(new_id)
                self._schedule_pending_expiry(group, new_id, session_timeout_ms)
                return fail(ErrorCode.MEMBER_ID_REQUIRED, new_id)
            else:
                self._add_member_and_rebalance(group, new_id, None, *args, callback, why)
        else:
            self._current_member_join(
                group,
                member_id,
                group_instance_id,
                protocol_type,
                protocols,
                rebalance_timeout_ms,
                session_timeout_ms,
                callback,
                args,
                why,
            )
        self._maybe_complete_join(group)

    def _current_member_join(
        self,
        group: GroupMetadata,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback,
        args: JoinArgs,
        why: str,
    ) -> None:
        if group.is_pending_member(member_id):
            if group_instance_id is not None:
                callback(JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
                return
            self._add_member_and_rebalance(group, member_id, None, *args, callback, why)
            return
        if group.is_static_member_fenced(group_instance_id, member_id):
            callback(JoinGroupResult(ErrorCode.FENCED_INSTANCE_ID, member_id))
            return
        if not group.has(member_id):
            callback(JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
            return
        if not group.supports_protocols(protocol_type, [n for n, _ in protocols]):
            callback(JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        member = group.get(member_id)
        update = (protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, *update, f"member {member_id} rejoined{why}")
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.matches(protocols):
                # A retried JoinGroup of this generation: answer it again.
                callback(self._join_result(group, member))
            else:
                reason = f"member {member_id} changed its protocols{why}"
                self._update_member_and_rebalance(group, member, *update, reason)
        elif group.is_in(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(protocols):
                # The leader rejoining means it wants a new assignment (e.g. its subscription changed).
                reason = (
                    f"leader {member_id} rejoined{why}"
                    if group.is_leader(member_id)
                    else (f"member {member_id} changed its protocols{why}")
                )
                self._update_member_and_rebalance(group, member, *update, reason)
            else:
                callback(self._join_result(group, member, with_members=False))
        else:
            callback(JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))

    def _join_result(self, group: GroupMetadata, member: MemberMetadata, with_members: bool = True) -> JoinGroupResult:
        leader = group.is_leader(member.member_id)
        return JoinGroupResult(
            ErrorCode.NO_ERROR,
            member.member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            group.current_member_metadata() if leader and with_members else (),
        )

    def _add_member_and_rebalance(
        self,
        group: GroupMetadata,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        callback: JoinCallback,
        why: str,
    ) -> None:
        member = MemberMetadata(
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            protocol_type,
            [(n, bytes(m)) for n, m in protocols],
        )
        member.is_new = True
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, callback)
        group.remove_pending_member(member_id)
        # A new member cannot heartbeat before its JoinGroup returns, so its join is bounded separately.
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(
            group, f"Adding new member {member_id} with group instance id {group_instance_id}{why}"
        )

    def _update_member_and_rebalance(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback,
        reason: str,
    ) -> None:
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        self._maybe_prepare_rebalance(group, reason)

    def _update_static_member(
        self,
        group: GroupMetadata,
        old_id: str,
        new_id: str,
        instance_id: str,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback,
    ) -> None:
        current_leader = group.leader_id or ""
        self._cancel_heartbeat(group.group_id, old_id)
        member = group.replace_static_member(instance_id, old_id, new_id)
        old_state = (member.supported_protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        self._schedule_heartbeat(group, member)
        if group.is_in(GroupState.STABLE):
            if group.protocol_name == group.select_protocol():
                # Same protocol: keep the assignment, persist the new member id, no rebalance.
                def stored(code: ErrorCode) -> None:
                    if group.members.get(new_id) is not member:  # the member left or was replaced meanwhile
                        return
                    if code != ErrorCode.NO_ERROR:
                        member.awaiting_join = None
                        self._cancel_heartbeat(group.group_id, new_id)
                        group.replace_static_member(instance_id, new_id, old_id)
                        group.update_member(member, old_state[0], old_state[1], old_state[2], None)
                        self._schedule_heartbeat(group, member)
                        callback(JoinGroupResult(code, ""))
                        return
                    # The old leader id is returned so that a restarted leader does not compute an assignment a
                    # Stable group would never hand out.
                    group.maybe_invoke_join_callback(
                        member,
                        JoinGroupResult(
                            ErrorCode.NO_ERROR,
                            new_id,
                            group.generation_id,
                            group.protocol_type,
                            group.protocol_name,
                            current_leader,
                        ),
                    )

                try:
                    write = self.manager.store_group(group, {m.member_id: m.assignment for m in group.all_members()})
                except KafkaError as e:
                    stored(e.code)
                    return
                self._when_written(write, stored, f"static-{group.group_id}")
            else:
                self._maybe_prepare_rebalance(
                    group,
                    f"static member {instance_id} rejoined with protocols that change the group's choice",
                )
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"updating metadata of static member {instance_id}")

    # -- rebalance ---------------------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._cancel_sync_timer(group.group_id)
        initial = group.is_in(GroupState.EMPTY) and self.initial_rebalance_delay_ms > 0
        old_generation = group.generation_id
        group.transition_to(GroupState.PREPARING_REBALANCE, now_ms())
        self._rebalance_started.setdefault(group.group_id, time.monotonic())
        log.info(
            "Preparing to rebalance group %s with old generation %d (%d member(s)): %s",
            group.group_id,
            old_generation,
            len(group),
            reason,
        )
        if initial:
            delay = self.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._schedule_initial_join(group, delay, remaining)
        else:
            self._schedule_join(group, group.rebalance_timeout_ms())
            self._maybe_complete_join(group)

    def _schedule_join(self, group: GroupMetadata, timeout_ms: int) -> None:
        self._cancel_join_timer(group.group_id)
        handle = self.loop.call_later(timeout_ms / 1000, self._on_join_timeout, group)
        self._join_timers[group.group_id] = (handle, False)

    def _schedule_initial_join(self, group: GroupMetadata, delay_ms: int, remaining_ms: int) -> None:
        self._cancel_join_timer(group.group_id)
        handle = self.loop.call_later(delay_ms / 1000, self._on_initial_join_delay, group, delay_ms, remaining_ms)
        self._join_timers[group.group_id] = (handle, True)

    def _cancel_join_timer(self, group_id: str) -> None:
        entry = self._join_timers.pop(group_id, None)
        if entry is not None:
            entry[0].cancel()

    def _on_initial_join_delay(self, group: GroupMetadata, delay_ms: int, remaining_ms: int) -> None:
        self._join_timers.pop(group.group_id, None)
        if group.new_member_added and remaining_ms > 0:
            group.new_member_added = False
            next_delay = min(self.initial_rebalance_delay_ms, remaining_ms)
            self._schedule_initial_join(group, next_delay, max(remaining_ms - delay_ms, 0))
        else:
            self._on_complete_join(group)

    def _on_join_timeout(self, group: GroupMetadata) -> None:
        self._join_timers.pop(group.group_id, None)
        self._on_complete_join(group)

    def _maybe_complete_join(self, group: GroupMetadata) -> None:
        """Complete a waiting rebalance once every member has rejoined (not during the initial delay)."""
        entry = self._join_timers.get(group.group_id)
        if not group.is_in(GroupState.PREPARING_REBALANCE) or entry is None or entry[1]:
            return
        if group.has_all_members_joined():
            self._cancel_join_timer(group.group_id)
            self._on_complete_join(group)

    def _on_complete_join(self, group: GroupMetadata) -> None:
        if self.groups.get(group.group_id) is not group or not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        for member in group.not_yet_rejoined_members():
            if not member.is_static:
                log.info(
                    "Member %s of group %s did not rejoin in time, removing it",
                    member.member_id,
                    group.group_id,
                )
                self._cancel_heartbeat(group.group_id, member.member_id)
                group.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
                group.remove(member.member_id)
        if not group.maybe_elect_new_joined_leader() and len(group) > 0:
            # Only static members that have not rejoined remain: wait for them (or their session timeout).
            log.info("Group %s waits for its static members to rejoin", group.group_id)
            self._schedule_join(group, group.rebalance_timeout_ms())
            return
        group.init_next_generation(now_ms())
        if group.is_in(GroupState.EMPTY):
            log.info("Group %s with generation %d is now empty", group.group_id, group.generation_id)
            self._rebalance_started.pop(group.group_id, None)
            def stored(code: ErrorCode) -> None:
                if code != ErrorCode.NO_ERROR:
                    log.warning("Failed to write the metadata of empty group %s: %s", group.group_id, code.name)

            try:
                self._when_written(self.manager.store_group(group, {}), stored, f"empty-{group.group_id}")
            except KafkaError as e:
                stored(e.code)
            return
        log.info(
            "Stabilized group %s generation %d (protocol %s) with %d member(s)",
            group.group_id,
            group.generation_id,
            group.protocol_name,
            len(group),
        )
        for member in group.iter_members():
            group.maybe_invoke_join_callback(member, self._join_result(group, member))
            member.is_new = False  # first: from now on its session timeout governs it, not the new-member one
            self._schedule_heartbeat(group, member)
        self._schedule_sync_timer(group)
