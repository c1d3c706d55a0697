"""The member-epoch checks of a consumer group's offsets (Kafka's ``ConsumerGroup.validateOffsetCommit`` and
``validateOffsetFetch``): OffsetCommit, TxnOffsetCommit, OffsetFetch and OffsetDelete of consumer groups. The
offsets themselves are kept with the classic groups' (``GroupCoordinator.groups``)."""

from __future__ import annotations

import inspect
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rill.coordinator.group.consumer_group import ConsumerGroup, ConsumerGroupMember
from rill.coordinator.group.group_metadata import GroupMetadata
from rill.errors import ErrorCode

if TYPE_CHECKING:
    from rill.coordinator.group.group_coordinator import GroupCoordinator


def _now_ms() -> int:
    return int(time.time() * 1000)


class ConsumerGroupOffsetsMixin:
    # Provided by ConsumerGroupCoordinator.
    classic: GroupCoordinator
    groups: dict[str, ConsumerGroup]

    def _topic_names(self, member: ConsumerGroupMember) -> set[str]:
        raise NotImplementedError


    def validate_offset_commit(
        self, group_id: str, member_id: str, member_epoch: int, api_version: int, *, transactional: bool = False
    ) -> ErrorCode:
        """Kafka's check of an OffsetCommit (or TxnOffsetCommit) to a consumer group: a client outside the group
        (epoch < 0) may commit only while the group has no members; a member commits at its current epoch, with
        OffsetCommit v9+."""
        group = self.groups[group_id]
        if member_epoch < 0 and not group.members:
            return ErrorCode.NO_ERROR
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member.classic is not None:  # a classic member commits with its generation, in any version
            return ErrorCode.NO_ERROR if member_epoch == member.member_epoch else ErrorCode.ILLEGAL_GENERATION
        if api_version < 9 and not transactional:
            return ErrorCode.UNSUPPORTED_VERSION
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NO_ERROR

    async def commit_offsets(
        self, request: Mapping[str, Any], offsets: Mapping[Any, Any], api_version: int
    ) -> dict[Any, ErrorCode]:
        """OffsetCommit to a consumer group: checked against the member's epoch, then stored as the classic
        groups' offsets are (the group's offsets live with them)."""
        group_id = request["group_id"]
        if (code := self.classic.not_serving(group_id)) is not None:
            return dict.fromkeys(offsets, code)
        error = self.validate_offset_commit(
            group_id, request.get("member_id", ""), request.get("generation_id_or_member_epoch", -1), api_version
        )
        if error != ErrorCode.NO_ERROR:
            return dict.fromkeys(offsets, error)
        holder = self.classic.groups.get(group_id)
        if holder is None:
            holder = self.classic.groups[group_id] = GroupMetadata(group_id, current_state_timestamp=_now_ms())
        stored: Any = self.classic._store_offsets(holder, offsets)
        if inspect.isawaitable(stored):  # the store may wait for replication
            stored = await stored
        return dict(stored)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return ErrorCode.NO_ERROR
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION if member.classic is not None else ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NO_ERROR

    def subscribed_topics(self, group_id: str) -> set[str]:
        """The topics the members of a consumer group subscribe to (by name or regular expression)."""
        group = self.groups.get(group_id)
        if group is None:
            return set()
        names: set[str] = set()
        for member in group.members.values():
            names |= self._topic_names(member)
        return names
