"""Transaction markers in a partition log (a part of ``Log``): the COMMIT or ABORT marker a leader appends, and
the end of the producer's transaction it brings (an aborted one recorded in the transaction index of the
segment the marker lands in). Followers apply the markers they replicate through the same ``_complete_txn``.

``LogTransactions`` holds no state of its own: the producer state (``rill.log.producer_state``) tracks the
open transactions, the segments' ``TransactionIndex`` the aborted ones.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from rill.common import TopicPartition
from rill.log.leader_epoch_cache import LeaderEpochFileCache
from rill.log.log_append_info import LogAppendInfo
from rill.log.log_config import LogConfig
from rill.log.log_segment import LogSegment
from rill.log.log_validator import assign_offsets
from rill.log.producer_state import CompletedTxn, ProducerStateManager
from rill.log.transaction_index import AbortedTxn
from rill.records.batch import Buffer, parse_header
from rill.records.control import EndTxnMarker, build_end_txn_marker_batch

log = logging.getLogger("rill.log.log")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class LogTransactions:
    """Markers of ``Log`` (a base class of it)."""

    _tp: TopicPartition
    _config: LogConfig
    _segments: list[LogSegment]
    _log_start_offset: int
    _leo: int
    producer_state: ProducerStateManager
    leader_epoch_cache: LeaderEpochFileCache

    if TYPE_CHECKING:

        def roll(self, new_base: int | None = None, now_ms: int | None = None) -> LogSegment: ...

        def _should_roll(self, seg: LogSegment, size: int, max_ts: int, last_offset: int, now_ms: int) -> bool: ...

        def _write(self, segment: LogSegment, bufs: list[Buffer], infos: list[tuple[int, int, int, int]]) -> None: ...

        def _count_unflushed(self, count: int) -> None: ...

    def append_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        *,
        leader_epoch: int,
        now_ms: int | None = None,
    ) -> LogAppendInfo:
        """Append a COMMIT or ABORT marker for the producer as leader (a control batch, see
        ``rill.records.control``), ending its ongoing transaction; an aborted one goes into the transaction
        index. INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED refuse it (nothing written)."""
        self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        now = _now_ms() if now_ms is None else now_ms
        view = memoryview(
            bytearray(build_end_txn_marker_batch(producer_id, producer_epoch, coordinator_epoch, commit, now))
        )
        header = parse_header(view)
        append_time = now if self._config.log_append_time else -1
        first_offset = self._leo
        segment = self._segments[-1]
        if segment.size and self._should_roll(segment, len(view), now, first_offset, now):
            segment = self.roll(first_offset, now)
        bufs, infos = assign_offsets(view, [(0, header)], first_offset, leader_epoch, append_time)
        self._write(segment, bufs, infos)
        completed = self.producer_state.apply_marker(header, EndTxnMarker(commit, coordinator_epoch), first_offset)
        if completed is not None:
            self._complete_txn(segment, completed)
        if leader_epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(leader_epoch, first_offset)
        self._count_unflushed(1)
        return LogAppendInfo(
            first_offset, first_offset, append_time, self._log_start_offset, 1, len(view), False, now, first_offset
        )

    def _complete_txn(self, segment: LogSegment, completed: CompletedTxn) -> None:
        """A marker written into ``segment`` ended ``completed``: an aborted one is indexed there."""
        if completed.is_aborted:
            lso = self.producer_state.last_stable_offset(completed)
            try:
                segment.txn_index.append(AbortedTxn(*completed[:3], lso))
            except OSError as e:  # the marker is in the log; a recovery of the segment indexes it again
                log.warning("%s: cannot index the aborted transaction %s: %s", self._tp, completed, e)
        self.producer_state.complete_txn(completed)

    def has_ongoing_txn(self, producer_id: int, producer_epoch: int | None = None) -> bool:
        return self.producer_state.has_ongoing_txn(producer_id, producer_epoch)
