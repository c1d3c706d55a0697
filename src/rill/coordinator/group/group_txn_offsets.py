"""The group coordinator's side of transactions: TxnOffsetCommit and the markers that end it.

Offsets a transactional producer commits (``send_offsets_to_transaction``) are written to ``__consumer_offsets``
as a transactional batch of that producer and kept pending per producer id in the group; OffsetFetch does not
show them (with ``require_stable`` it answers UNSTABLE_OFFSET_COMMIT for those partitions). When the
transaction's marker lands on the group's partition of ``__consumer_offsets`` (``on_txn_marker``, called by
the replica manager as leader), a commit makes them the group's committed offsets and an abort drops them.
The same happens on replay (``GroupMetadataManager`` keeps transactional records pending until their marker).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping

from rill.common import TopicPartition
from rill.coordinator.group.group_metadata import GroupMetadata, GroupState, OffsetAndMetadata
from rill.coordinator.group.group_metadata_manager import GroupMetadataManager
from rill.errors import ErrorCode, KafkaError
from rill.metadata.store import OFFSETS_TOPIC

log = logging.getLogger(__name__)


class GroupTxnOffsetsMixin:
    # Provided by GroupCoordinator.
    groups: dict[str, GroupMetadata]
    manager: GroupMetadataManager
    not_serving: Callable[[str], ErrorCode | None]
    offset_metadata_max_bytes: int

    def txn_commit_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        """Kafka's doTxnCommitOffsets: the member and generation are checked when given (a producer that does
        not use group management commits with generation -1 to an Empty group)."""

        def all_fail(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, code)

        if (code := self.not_serving(group_id)) is not None:
            return all_fail(code)
        group = self.groups.get(group_id)
        if group is None:
            group = GroupMetadata(group_id, current_state_timestamp=int(time.time() * 1000))
        if group.is_in(GroupState.DEAD):
            return all_fail(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not (generation_id < 0 and group.is_in(GroupState.EMPTY)):
            if group.is_static_member_fenced(group_instance_id, member_id):
                return all_fail(ErrorCode.FENCED_INSTANCE_ID)
            if member_id and not group.has(member_id):
                return all_fail(ErrorCode.UNKNOWN_MEMBER_ID)
            if generation_id >= 0 and generation_id != group.generation_id:
                return all_fail(ErrorCode.ILLEGAL_GENERATION)
        result: dict[TopicPartition, ErrorCode] = {}
        valid: dict[TopicPartition, OffsetAndMetadata] = {}
        now = int(time.time() * 1000)
        for tp, om in offsets.items():
            if len(om.metadata.encode()) > self.offset_metadata_max_bytes:
                result[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                valid[tp] = dataclasses.replace(om, commit_timestamp=now) if om.commit_timestamp < 0 else om
        try:
            self.manager.store_txn_offsets(group_id, valid, producer_id, producer_epoch)
        except KafkaError as e:
            log.info("Failed to store the transactional offsets of group %s: %s", group_id, e.message)
            result.update(dict.fromkeys(valid, e.code))
            return result
        self.groups.setdefault(group_id, group)
        if valid:
            group.pending_txn_offsets.setdefault(producer_id, {}).update(valid)
        result.update(dict.fromkeys(valid, ErrorCode.NO_ERROR))
        return result

    def has_pending_txn_offsets(self, group_id: str, tp: TopicPartition) -> bool:
        group = self.groups.get(group_id)
        return group is not None and any(tp in pending for pending in group.pending_txn_offsets.values())

    def on_txn_marker(self, tp: TopicPartition, producer_id: int, commit: bool, marker_offset: int) -> None:
        """A transaction's marker was appended to ``tp`` here as leader: the producer's pending offsets in the
        groups of that partition of ``__consumer_offsets`` are committed or dropped."""
        if tp.topic != OFFSETS_TOPIC:
            return
        for group in list(self.groups.values()):
            pending = group.pending_txn_offsets.get(producer_id)
            if pending is None or self.manager.partition_for(group.group_id) != tp.partition:
                continue
            del group.pending_txn_offsets[producer_id]
            if commit:
                group.offsets.update(pending)
            log.debug("Group %s: %d transactional offset(s) of producer %d %s at offset %d", group.group_id,
                      len(pending), producer_id, "committed" if commit else "aborted", marker_offset)  # fmt: skip
