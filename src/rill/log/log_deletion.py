"""Segment deletion and truncation of a partition log (a part of ``Log``): retention, DeleteRecords' move of
the log start offset, the delayed deletion of segment files (renamed ``.deleted`` first, deleted after
``file.delete.delay.ms``), and truncation as a follower rejoins.

``LogDeletion`` holds no state of its own: it works on the ``Log``'s segments, offsets, producer state and
leader epoch cache (the names it declares); the producer state is rebuilt after a truncation, and the
transaction indexes are truncated and deleted with their segments.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.log.leader_epoch_cache import LeaderEpochFileCache
from rill.log.log_config import LogConfig
from rill.log.log_loader import rebuild_producer_state
from rill.log.log_retention import SegmentPredicate, below_start_offset, deletable_prefix, retention_predicates
from rill.log.log_segment import LogSegment
from rill.log.producer_state import ProducerStateManager

log = logging.getLogger("rill.log.log")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class LogDeletion:
    """Retention, DeleteRecords and truncation of ``Log`` (a base class of it)."""

    _tp: TopicPartition
    _config: LogConfig
    _segments: list[LogSegment]
    _log_start_offset: int
    _leo: int
    _high_watermark: int
    _recovery_point: int
    _unflushed_messages: int
    _pending_deletes: list[tuple[int, LogSegment]]
    truncated_to: int | None
    producer_state: ProducerStateManager
    leader_epoch_cache: LeaderEpochFileCache

    if TYPE_CHECKING:

        @property
        def size_bytes(self) -> int: ...

        @property
        def _active(self) -> LogSegment: ...

        def roll(self, new_base: int | None = None, now_ms: int | None = None) -> LogSegment: ...

        def _new_segment(self, base: int, now_ms: int, active: bool) -> LogSegment: ...

    # ---- retention ----------------------------------------------------------------------------

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Apply retention.ms, retention.bytes and the log start offset; returns segments deleted."""
        now = _now_ms() if now_ms is None else now_ms
        deleted = 0
        for rule in retention_predicates(self._config, now, self.size_bytes):
            deleted += self._delete_while(rule, now)
        deleted += self._delete_while(below_start_offset(self._log_start_offset), now)
        return deleted

    def _delete_while(self, predicate: SegmentPredicate, now_ms: int) -> int:
        count = deletable_prefix(self._segments, predicate, self._high_watermark, self._leo)
        if not count:
            return 0
        doomed = self._segments[:count]
        if count == len(self._segments):
            self.roll(now_ms=now_ms)
        self._remove_segments(doomed, now_ms)
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        self.producer_state.on_log_start_offset_incremented(self._log_start_offset)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        self.producer_state.delete_snapshots_below(self._segments[0].base_offset)
        log.info("%s: deleted %d segment(s); log start offset %d", self._tp, count, self._log_start_offset)
        return count

    def _remove_segments(self, doomed: list[LogSegment], now_ms: int) -> None:
        ids = {id(s) for s in doomed}
        self._segments = [s for s in self._segments if id(s) not in ids]
        self._schedule_delete(doomed, now_ms)

    def _schedule_delete(self, doomed: list[LogSegment], now_ms: int) -> None:
        due = now_ms + self._config.file_delete_delay_ms
        for seg in doomed:
            try:
                seg.rename_to_deleted()
            except OSError as e:
                log.warning("%s: cannot rename %s for deletion: %s", self._tp, seg.log_path, e)
            self._pending_deletes.append((due, seg))

    def take_due_deletions(self, now_ms: int | None = None) -> list[LogSegment]:
        """Segments whose ``file.delete.delay.ms`` has passed; the caller runs ``delete_files``."""
        now = _now_ms() if now_ms is None else now_ms
        due = [s for t, s in self._pending_deletes if t <= now]
        self._pending_deletes = [(t, s) for t, s in self._pending_deletes if t > now]
        return due

    def maybe_increment_log_start_offset(self, offset: int, now_ms: int | None = None) -> bool:
        """DeleteRecords: move the log start offset up to ``offset`` (at most the high watermark).

        The caller has made the new offset durable (the log-start-offset checkpoint) first; what
        follows here is upkeep that a full disk may stop (the leader epoch checkpoint, the segments
        wholly below the new start): it is logged and left for later (the epoch checkpoint is cut
        back to the log start when the log is opened; retention deletes those segments), never
        an error that would undo the move."""
        if offset > self._high_watermark:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"{self._tp}: cannot delete records up to {offset}, above the high watermark {self._high_watermark}",
            )
        if offset <= self._log_start_offset:
            return False
        self._log_start_offset = offset
        self.producer_state.on_log_start_offset_incremented(offset)
        try:
            self.leader_epoch_cache.truncate_from_start(offset)
            self._delete_while(below_start_offset(offset), _now_ms() if now_ms is None else now_ms)
        except (OSError, KafkaError) as e:
            log.warning("%s: log start offset moved to %d; the upkeep after it waits: %s", self._tp, offset, e)
        return True

    # ---- truncation ---------------------------------------------------------------------------

    def truncate_to(self, offset: int, now_ms: int | None = None) -> bool:
        """Remove every record at or above ``offset`` (replication rejoining); True if anything went. With no
        record to remove, the leader epochs that start at or past the log end go all the same (Kafka's
        truncateTo): this replica may have begun an epoch as leader and written nothing in it before another
        leader was elected, and that entry must not outlive the truncation (it would claim the records of an
        earlier epoch fetched next)."""
        if offset < 0:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"cannot truncate {self._tp} to {offset}")
        if offset >= self._leo:
            self.leader_epoch_cache.truncate_from_end(self._leo)
            return False
        self.truncated_to = offset if self.truncated_to is None else min(self.truncated_to, offset)
        now = _now_ms() if now_ms is None else now_ms
        if offset < self._segments[0].base_offset or offset < self._log_start_offset:
            self.truncate_fully_and_start_at(offset, now)
            return True
        doomed = [s for s in self._segments if s.base_offset > offset]
        if doomed:
            self._remove_segments(doomed, now)
        active = self._active
        active.truncate_to(offset)
        if doomed:
            active.on_become_active(self._config.segment_index_bytes)
        self._leo = active.next_offset if active.size else active.base_offset
        if self._leo < self._log_start_offset:
            # the cut fell inside the batch holding the log start: nothing visible is left
            self.truncate_fully_and_start_at(self._log_start_offset, now)
            return True
        self._after_truncation()
        log.info("%s: truncated to %d (log end %d)", self._tp, offset, self._leo)
        return True

    def truncate_fully_and_start_at(self, offset: int, now_ms: int | None = None) -> None:
        now = _now_ms() if now_ms is None else now_ms
        self.truncated_to = offset if self.truncated_to is None else min(self.truncated_to, offset)
        doomed = list(self._segments)
        self._segments = []
        self._schedule_delete(doomed, now)
        self._segments = [self._new_segment(offset, now, active=True)]
        self._leo = offset
        self._log_start_offset = offset
        self._high_watermark = offset
        self.leader_epoch_cache.clear()
        self.producer_state.clear()
        self.producer_state.map_end_offset = offset
        self._recovery_point = min(self._recovery_point, offset)
        self._unflushed_messages = 0

    def _after_truncation(self) -> None:
        self._high_watermark = min(self._high_watermark, self._leo)
        self._recovery_point = min(self._recovery_point, self._leo)
        self.leader_epoch_cache.truncate_from_end(self._leo)
        self.producer_state.delete_snapshots_above(self._leo)
        self._rebuild_producer_state()

    def _rebuild_producer_state(self) -> None:
        rebuild_producer_state(self.producer_state, self.leader_epoch_cache, self._segments, self._leo)
        self.producer_state.on_high_watermark_updated(self._high_watermark)
