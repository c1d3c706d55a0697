"""The group coordinator's side of transactions: TxnOffsetCommit and the markers that end it.

Offsets a transactional producer commits (``send_offsets_to_transaction``) are written to ``__consumer_offsets``
as a transactional batch of that producer and kept pending per producer id in the group; OffsetFetch does not
show them (with ``require_stable`` it answers UNSTABLE_OFFSET_COMMIT for those partitions). When the
transaction's marker lands on the group's partition of ``__consumer_offsets`` (``on_txn_marker``, called by
the replica manager as leader), a commit makes them the group's committed offsets (where no newer commit, by
log order, is there) and an abort drops them. The same happens on replay (``GroupMetadataManager`` keeps
transactional records pending until their marker). Both the TxnOffsetCommit and the marker take effect once
replicated, in log order with the partition's other writes.

KIP-890: a TxnOffsetCommit that would open the producer's transaction on the partition is first verified with
the transaction coordinator (the partition must be in the producer's ongoing transaction: AddOffsetsToTxn
added it), as a Produce is; a late or retried one after the transaction ended, or one sent without
AddOffsetsToTxn, is refused (INVALID_TXN_STATE) instead of opening a transaction that no marker would close.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping

from rill.common import TopicPartition
from rill.coordinator.group.group_metadata import GroupMetadata, GroupState, OffsetAndMetadata
from rill.coordinator.group.group_metadata_manager import GroupMetadataManager, coordinator_error
from rill.errors import ErrorCode, KafkaError
from rill.log.producer_state import VerificationGuard
from rill.metadata.store import OFFSETS_TOPIC

log = logging.getLogger(__name__)


class GroupTxnOffsetsMixin:
    # Provided by GroupCoordinator.
    groups: dict[str, GroupMetadata]
    manager: GroupMetadataManager
    not_serving: Callable[[str], ErrorCode | None]
    offset_metadata_max_bytes: int

    async def txn_commit_offsets(
        self,
        group_id: str,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        """Kafka's handleTxnCommitOffsets: verified with the transaction coordinator first, then the member and
        generation are checked when given (a producer that does not use group management commits with generation
        -1 to an Empty group), then written."""

        def all_fail(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, code)

        if (code := self.not_serving(group_id)) is not None:
            return all_fail(code)
        code, guard = await self._verify_txn(group_id, transactional_id, producer_id, producer_epoch)
        if code != ErrorCode.NO_ERROR:
            return all_fail(code)
        if (code := self.not_serving(group_id)) is not None:  # checked again after the wait
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
        if not valid:
            return result

        def apply(written: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
            target = self.groups.get(group_id)
            if target is None:
                target = self.groups[group_id] = group
            target.add_pending_txn_offsets(producer_id, written)

        try:
            write = self.manager.store_txn_offsets(group_id, valid, producer_id, producer_epoch, apply, guard)
        except KafkaError as e:
            log.info("Failed to store the transactional offsets of group %s: %s", group_id, e.message)
            result.update(dict.fromkeys(valid, e.code))
            return result
        if (code := self.manager.outcome(write, offsets=True)) is None:
            code = await self.manager.complete(write, offsets=True)
        if code != ErrorCode.NO_ERROR:
            log.info("Transactional offsets of group %s not replicated in time (%s)", group_id, code.name)
        result.update(dict.fromkeys(valid, code))
        return result

    async def _verify_txn(
        self, group_id: str, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, VerificationGuard | None]:
        """KIP-890 for a TxnOffsetCommit: (NO_ERROR, the verification's guard or None when none was needed), or
        the error for the client (Kafka's conversion of the verification's errors for offset commits)."""
        replica_manager = self.manager.replica_manager
        tp = self.manager.topic_partition_for(group_id)
        guard = replica_manager.start_txn_verification(tp, producer_id, producer_epoch)
        verifier = replica_manager.txn_verifier
        if guard is None or verifier is None:
            return ErrorCode.NO_ERROR, None
        code = await verifier(transactional_id, producer_id, producer_epoch, tp)
        if code == ErrorCode.NO_ERROR:
            return code, guard
        if code == ErrorCode.NETWORK_EXCEPTION:  # retried by clients without a new coordinator lookup
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None
        log.debug("TxnOffsetCommit of producer %d for group %s refused by the transaction's coordinator: %s",
                  producer_id, group_id, code.name)  # fmt: skip
        return coordinator_error(code, offsets=True), None

    def has_pending_txn_offsets(self, group_id: str, tp: TopicPartition) -> bool:
        group = self.groups.get(group_id)
        return group is not None and any(tp in pending for pending in group.pending_txn_offsets.values())

    def on_txn_marker(self, tp: TopicPartition, producer_id: int, commit: bool, marker_offset: int) -> None:
        """A transaction's marker was appended to ``tp`` here as leader: once replicated (in log order with the
        partition's writes), the producer's pending offsets in the groups of that partition of
        ``__consumer_offsets`` are committed or dropped."""
        if tp.topic != OFFSETS_TOPIC:
            return

        def apply(_offset: int) -> None:
            for group in list(self.groups.values()):
                if producer_id not in group.pending_txn_offsets:
                    continue
                if self.manager.partition_for(group.group_id) != tp.partition:
                    continue
                count = group.complete_txn(producer_id, commit)
                log.debug("Group %s: %d transactional offset(s) of producer %d %s at offset %d", group.group_id,
                          count, producer_id, "committed" if commit else "aborted", marker_offset)  # fmt: skip

        self.manager.writes.appended(tp, marker_offset, marker_offset + 1, apply)
