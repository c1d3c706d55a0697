"""Members of the classic protocol in a consumer group (Kafka's ``classicGroupJoinToConsumerGroup``,
``classicGroupSyncToConsumerGroup``, ``classicGroupHeartbeatToConsumerGroup`` and the LeaveGroup of such a member).

A consumer using JoinGroup/SyncGroup/Heartbeat stays served when its group has become a consumer group (after an
upgrade, or joining one that exists). It is a member like the others: its subscription is read from its
ConsumerProtocol metadata, the server-side assignor computes its target, and it reconciles towards it with the
same rules (revoke before assign), one JoinGroup at a time:

* JoinGroup is answered at once (no waiting for other members) with the member's epoch as generation and no
  leader; the partitions it reports owned in its subscription let it move on from revoking;
* SyncGroup answers the member's current assignment (REBALANCE_IN_PROGRESS when the group moved on and the
  member has nothing to revoke);
* Heartbeat answers REBALANCE_IN_PROGRESS when the member must rejoin: the group epoch is ahead of it, it must
  revoke partitions, or partitions it waits for are free now. It must then rejoin within its rebalance timeout,
  and send its SyncGroup within it after a JoinGroup, or it is removed.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rill.coordinator.group import consumer_group_records as records
from rill.coordinator.group.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from rill.coordinator.group.consumer_group_migration import decode_subscription
from rill.coordinator.group.group_metadata import (
    CONSUMER_PROTOCOL_TYPE,
    JoinGroupResult,
    SyncGroupResult,
)
from rill.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from rill.coordinator.group.group_coordinator import GroupCoordinator

log = logging.getLogger(__name__)

KeyValue = tuple[bytes, bytes | None]


class ClassicMembersMixin:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup of classic members, for the ``ConsumerGroupCoordinator``."""

    # Provided by ConsumerGroupCoordinator.
    classic: GroupCoordinator
    groups: dict[str, ConsumerGroup]
    max_size: int
    _classic_timers: dict[tuple[str, str], asyncio.TimerHandle]

    _commit_member: Callable[..., Awaitable[ConsumerGroupMember]]

    async def remove_member(self, group: ConsumerGroup, member_id: str, why: str) -> None:
        raise NotImplementedError

    def _schedule_session(self, group_id: str, member_id: str) -> None:
        raise NotImplementedError

    def _by_ids(self, partitions: Any) -> Any:
        raise NotImplementedError

    def _expire(self, group_id: str, member_id: str, why: str) -> None:
        raise NotImplementedError

    def assignment_bytes(self, member: ConsumerGroupMember) -> bytes:
        raise NotImplementedError

    def downgrade_allowed(self, group: ConsumerGroup, leaving: set[str]) -> bool:
        raise NotImplementedError

    async def downgrade(self, group: ConsumerGroup, leaving: set[str], why: str) -> None:
        raise NotImplementedError

    # -- JoinGroup ---------------------------------------------------------------------------------------------

    async def classic_join(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> JoinGroupResult:
        """A JoinGroup to a consumer group with members (the caller holds the group's lock)."""
        group = self.groups[group_id]
        unknown = member_id == ""
        new_id = member_id or str(uuid.uuid4())
        known = group.members.get(member_id) if member_id else None
        if known is None and len(group.members) >= self.max_size:
            return JoinGroupResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id)
        if not group.supports_classic_protocols(protocol_type, [n for n, _ in protocols]):
            return JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if unknown and require_known_member_id and instance_id is None:
            log.info("Classic member of consumer group %s given member id %s", group_id, new_id)
            return JoinGroupResult(ErrorCode.MEMBER_ID_REQUIRED, new_id)
        replaced: ConsumerGroupMember | None = None
        if instance_id is not None and instance_id in group.static_members:
            previous = group.members[group.static_members[instance_id]]
            if previous.member_id != new_id:
                if not unknown:
                    return JoinGroupResult(ErrorCode.FENCED_INSTANCE_ID, member_id)
                replaced = previous  # a static member restarted: it takes over its place and assignment
        elif instance_id is not None and not unknown and known is None:
            return JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        if known is not None and known.classic is None:
            return JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        try:
            subscription = _subscription(protocols)
        except Exception as e:  # bytes a client sent
            log.info("Classic member %s of consumer group %s sent an unreadable subscription: %s", new_id, group_id, e)
            return JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        kvs: list[KeyValue] = []
        if replaced is not None:
            member = replaced.replace(member_id=new_id)
            kvs += records.member_tombstones(group_id, replaced.member_id)
        elif known is not None:
            member = known
        else:
            member = ConsumerGroupMember(member_id=new_id)
        updated = member.replace(
            instance_id=instance_id,
            rack_id=subscription.get("rack_id") or member.rack_id,
            client_id=client_id,
            client_host=client_host,
            subscribed_topic_names=tuple(sorted(set(subscription["topics"]))),
            subscribed_topic_regex=None,
            rebalance_timeout_ms=rebalance_timeout_ms if rebalance_timeout_ms > 0 else member.rebalance_timeout_ms,
            server_assignor=None,
            classic=ClassicMemberMetadata(session_timeout_ms, tuple((n, bytes(m)) for n, m in protocols)),
        )
        owned: dict[uuid.UUID, list[int]] = {}
        for entry in subscription.get("owned_partitions") or []:
            for topic_id, ps in self._by_ids({entry["topic"]: entry["partitions"]}).items():
                owned.setdefault(topic_id, []).extend(ps)
        try:
            reconciled = await self._commit_member(
                group, member, updated, is_new=known is None, replaced=replaced, owned=owned, kvs=kvs
            )
        except KafkaError as e:
            log.warning("Consumer group %s: JoinGroup of classic member %s failed: %s", group_id, new_id, e.message)
            return JoinGroupResult(e.code, member_id)
        self._cancel_classic_timer(group_id, new_id)
        self._schedule_classic_timer(group_id, new_id, reconciled.rebalance_timeout_ms, "sent no SyncGroup in time")
        if replaced is not None and self.downgrade_allowed(group, set()):
            # It replaced the last member of the consumer protocol (a static member restarted with the classic
            # one): the group is classic again, and the rebalance that starts tells its members to rejoin.
            try:
                await self.downgrade(group, set(), f"static member {instance_id} rejoined with the classic protocol")
            except KafkaError as e:
                log.warning("Consumer group %s could not become a classic group: %s", group_id, e.message)
        return JoinGroupResult(
            ErrorCode.NO_ERROR,
            new_id,
            reconciled.member_epoch,
            CONSUMER_PROTOCOL_TYPE,
            protocols[0][0],
            "",
        )

    # -- SyncGroup ---------------------------------------------------------------------------------------------

    def classic_sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncGroupResult:
        group = self.groups[group_id]
        member, error = self._classic_member(group, member_id, instance_id)
        if member is None or member.classic is None:
            return SyncGroupResult(error)
        if generation_id != member.member_epoch:
            return SyncGroupResult(ErrorCode.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            protocol_name is not None and protocol_name != member.classic.protocol_names()[0]
        ):
            return SyncGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.group_epoch > member.member_epoch and member.state != MemberState.UNREVOKED_PARTITIONS:
            return SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS)
        self._cancel_classic_timer(group_id, member_id)
        self._schedule_session(group_id, member_id)
        return SyncGroupResult(
            ErrorCode.NO_ERROR,
            protocol_type or CONSUMER_PROTOCOL_TYPE,
            protocol_name or member.classic.protocol_names()[0],
            self.assignment_bytes(member),
        )

    # -- Heartbeat ---------------------------------------------------------------------------------------------

    def classic_heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        group = self.groups[group_id]
        member, error = self._classic_member(group, member_id, instance_id)
        if member is None or member.classic is None:
            return error
        if generation_id != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        self._schedule_session(group_id, member_id)
        if (
            member.member_epoch < group.group_epoch
            or member.state == MemberState.UNREVOKED_PARTITIONS
            or (member.state == MemberState.UNRELEASED_PARTITIONS and not group.waiting_on_unreleased_partition(member))
        ):
            if (group_id, member_id) not in self._classic_timers:
                self._schedule_classic_timer(group_id, member_id, member.rebalance_timeout_ms, "did not rejoin in time")
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NO_ERROR

    # -- LeaveGroup --------------------------------------------------------------------------------------------

    async def classic_leave(
        self, group_id: str, leaving: list[tuple[str, str | None, str | None]]
    ) -> list[tuple[str, str | None, ErrorCode]]:
        """LeaveGroup of classic members (the caller holds the group's lock)."""
        results = []
        for member_id, instance_id, reason in leaving:
            group = self.groups.get(group_id)
            if group is None:  # it became a classic group: the rest leave it
                code_and = self.classic.leave_group(group_id, [(member_id, instance_id, reason)])[1]
                results += code_and
                continue
            if not member_id and instance_id is not None:
                member_id = group.static_members.get(instance_id, "")
            member, error = self._classic_member(group, member_id, instance_id)
            if member is None:
                results.append((member_id, instance_id, error))
                continue
            why = f"left the group ({reason})" if reason else "left the group"
            try:
                await self.remove_member(group, member.member_id, why)
            except KafkaError as e:
                results.append((member_id, instance_id, e.code))
                continue
            results.append((member_id, instance_id, ErrorCode.NO_ERROR))
        return results

    # -- helpers -----------------------------------------------------------------------------------------------

    @staticmethod
    def _classic_member(
        group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> tuple[ConsumerGroupMember | None, ErrorCode]:
        """Kafka's ``validateConsumerGroupMember`` and the check that the member uses the classic protocol."""
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return None, ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return None, ErrorCode.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            return None, ErrorCode.UNKNOWN_MEMBER_ID
        return member, ErrorCode.NO_ERROR

    def _schedule_classic_timer(self, group_id: str, member_id: str, timeout_ms: int, why: str) -> None:
        """The JoinGroup (after REBALANCE_IN_PROGRESS) or SyncGroup (after JoinGroup) the member owes, within its
        rebalance timeout."""
        self._cancel_classic_timer(group_id, member_id)
        self._classic_timers[(group_id, member_id)] = self.classic.loop.call_later(
            max(timeout_ms, 1) / 1000, self._expire, group_id, member_id, why
        )

    def _cancel_classic_timer(self, group_id: str, member_id: str) -> None:
        handle = self._classic_timers.pop((group_id, member_id), None)
        if handle is not None:
            handle.cancel()


def _subscription(protocols: list[tuple[str, bytes]]) -> dict[str, Any]:
    """The subscription of a classic member: the metadata of its first protocol (all carry the same topics)."""
    if not protocols:
        raise ValueError("no protocol")
    return decode_subscription(bytes(protocols[0][1]))
