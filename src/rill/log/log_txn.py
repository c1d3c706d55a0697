"""Transaction markers in a partition log (a part of ``Log``): the COMMIT or ABORT marker a leader appends, and
the end of the producer's transaction it brings (an aborted one recorded in the transaction index of the
segment the marker lands in). Followers apply the markers they replicate the same way.

An ABORT marker's index entry is written before the marker (``_index_then_write``): when it cannot be (a full or
failing disk) the append is refused with KAFKA_STORAGE_ERROR and nothing is written, as a failed write of the
marker itself would be. A marker in the log without its entry would let read_committed consumers read the
aborted records, and the cleaner keep them as committed (and remove the real latest values of their keys).

``LogTransactions`` holds no state of its own: the producer state (``rill.log.producer_state``) tracks the
open transactions, the segments' ``TransactionIndex`` the aborted ones.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from rill.common import TopicPartition
from rill.errors import KafkaError
from rill.log.leader_epoch_cache import LeaderEpochFileCache
from rill.log.log_append_info import LogAppendInfo
from rill.log.log_config import LogConfig
from rill.log.log_segment import LogSegment
from rill.log.log_validator import assign_offsets
from rill.log.producer_state import ProducerStateManager
from rill.log.transaction_index import AbortedTxn
from rill.records.batch import BatchHeader, Buffer, parse_header
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

        def _storage_error(self, e: OSError, what: str = "write failed") -> KafkaError: ...

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
        marker = EndTxnMarker(commit, coordinator_epoch)
        aborted = self._aborted_by([(header._replace(base_offset=first_offset), marker)])
        self._index_then_write(segment, aborted, first_offset, lambda: self._write(segment, bufs, infos))
        completed = self.producer_state.apply_marker(header, marker, first_offset)
        if completed is not None:
            self.producer_state.complete_txn(completed)
        if leader_epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(leader_epoch, first_offset)
        self._count_unflushed(1)
        return LogAppendInfo(
            first_offset, first_offset, append_time, self._log_start_offset, 1, len(view), False, now, first_offset
        )

    def _aborted_by(self, batches: Iterable[tuple[BatchHeader, EndTxnMarker | None]]) -> list[AbortedTxn]:
        """The transaction index entries of the transactions that the ABORT markers among ``batches`` (about to be
        appended, in order, with their offsets) end: the producer state's rules (``ProducerStateManager.replay``
        and ``last_stable_offset``) applied to a copy of its open transactions."""
        open_txns = dict(self.producer_state.ongoing_txns)
        aborted: list[AbortedTxn] = []
        for h, marker in batches:
            pid = h.producer_id
            if pid < 0:
                continue
            if not h.is_control:
                if h.is_transactional and pid not in open_txns:
                    open_txns[pid] = h.base_offset
                continue
            if marker is None:
                continue
            first = open_txns.pop(pid, None)
            if first is not None and not marker.commit:
                lso = min(open_txns.values()) if open_txns else h.base_offset + 1
                aborted.append(AbortedTxn(pid, first, h.base_offset, lso))
        return aborted

    def _index_then_write(
        self, segment: LogSegment, aborted: list[AbortedTxn], first_offset: int, write: Callable[[], None]
    ) -> None:
        """Index ``aborted`` in ``segment``, then ``write`` the batches holding their markers (from
        ``first_offset``). KAFKA_STORAGE_ERROR, with nothing indexed or written, when the index cannot take
        them; the entries are taken back when the write fails."""
        if not aborted:
            write()
            return
        txn_index = segment.txn_index
        try:
            for entry in aborted:
                txn_index.append(entry)
        except OSError as e:
            self._drop_index_entries(segment, first_offset)
            raise self._storage_error(e, "cannot index an aborted transaction") from e
        try:
            write()
        except BaseException:
            self._drop_index_entries(segment, first_offset)
            raise

    def _drop_index_entries(self, segment: LogSegment, first_offset: int) -> None:
        try:
            segment.txn_index.truncate_to(first_offset)
        except OSError as e:  # in memory they are gone; a recovery of the segment rebuilds its file
            log.warning("%s: cannot take back the index entries from %d: %s", self._tp, first_offset, e)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """``producer.id.expiration.ms`` (see ``ProducerStateManager.remove_expired_producers``); how many went."""
        expired = self.producer_state.remove_expired_producers(now_ms, expiration_ms)
        if expired:
            log.debug("%s: %d idle producer id(s) expired", self._tp, len(expired))
        return len(expired)

    def has_ongoing_txn(self, producer_id: int, producer_epoch: int | None = None) -> bool:
        return self.producer_state.has_ongoing_txn(producer_id, producer_epoch)
