"""The segments of a partition log as files (a part of ``Log``, after Kafka's LocalLog): rolling a new active
segment, putting the cleaner's segments in place of the ones it cleaned, durability (fsync of the segments, then
of the names made in the directory, before the recovery point moves), closing, deleting and renaming the log's
directory.

``LocalLog`` holds no state of its own: it works on the ``Log``'s segments, offsets, directory and the counts of
names made in it (the names it declares). ``flush_segments`` (and ``flush``) may run in a worker thread while the
loop appends; everything else runs on the loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rill.common import TopicPartition
from rill.errors import KafkaError
from rill.fsutil import fsync_path
from rill.log.checkpoints import LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA
from rill.log.leader_epoch_cache import LeaderEpochFileCache
from rill.log.log_config import LogConfig
from rill.log.log_segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)
from rill.log.producer_state import ProducerStateManager

log = logging.getLogger("rill.log.log")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class LocalLog:
    """Rolling, segment replacement, durability and closing of ``Log`` (a base class of it)."""

    _tp: TopicPartition
    _dir: Path
    _config: LogConfig
    _segments: list[LogSegment]
    _leo: int
    _recovery_point: int
    _unflushed_messages: int
    _pending_deletes: list[tuple[int, LogSegment]]
    _dir_changes: int
    _dir_synced: int
    _parent_unsynced: bool
    last_flush_ms: int
    on_flush_needed: Callable[[Any], None] | None
    producer_state: ProducerStateManager
    leader_epoch_cache: LeaderEpochFileCache

    if TYPE_CHECKING:

        @property
        def _active(self) -> LogSegment: ...

        def _storage_error(self, e: OSError, what: str = "write failed") -> KafkaError: ...

        def _schedule_delete(self, doomed: list[LogSegment], now_ms: int) -> None: ...

    # ---- rolling ------------------------------------------------------------------------------

    def _should_roll(self, seg: LogSegment, size: int, max_ts: int, last_offset: int, now_ms: int) -> bool:
        config = self._config
        return seg.should_roll(size, max_ts, last_offset, now_ms, config.segment_bytes, config.max_segment_ms)

    def roll(self, new_base: int | None = None, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end (kept if the active segment is empty)."""
        now = _now_ms() if now_ms is None else now_ms
        base = self._leo if new_base is None else max(new_base, self._leo)
        old = self._active
        if old.size == 0 and old.base_offset == base:
            return old
        if old.size == 0:
            # an empty active segment at a lower base offset is replaced
            self._segments.pop()
            self._schedule_delete([old], now)
        else:
            old.on_become_inactive()
        try:
            segment = self._new_segment(base, now, active=True)
        except OSError as e:
            if old.size:
                old.on_become_active(self._config.segment_index_bytes)
            raise self._storage_error(e, "cannot roll a segment") from e
        self._segments.append(segment)
        try:
            self.producer_state.take_snapshot(base)
        except OSError as e:
            log.warning("%s: producer snapshot at %d failed: %s", self._tp, base, e)
        if self.on_flush_needed is not None and base > self._recovery_point:
            # As Kafka's roll schedules a flush of the segments before the new one: the recovery point
            # moves on, so a crash re-reads at most the last segment or two, not all since the last flush.
            self.on_flush_needed(self)
        return segment

    def _new_segment(self, base: int, now_ms: int, active: bool) -> LogSegment:
        self._dir_changes += 1
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            path = self._dir / segment_file_name(base, suffix)
            if path.exists():
                log.warning("Removing stale %s before creating a segment there", path)
                path.unlink()
        return LogSegment(
            self._dir,
            base,
            index_interval_bytes=self._config.index_interval_bytes,
            max_index_size=self._config.segment_index_bytes,
            now_ms=now_ms,
            roll_jitter_ms=self._config.random_segment_jitter(),
            active=active,
        )

    def replace_segments(self, old: list[LogSegment], new: list[LogSegment], now_ms: int | None = None) -> bool:
        """Put the cleaner's ``new`` segments (``.cleaned`` files) in place of ``old``, a run of inactive
        segments, as Kafka's swap does: the new ones renamed ``.swap`` (from then on a crash completes the
        swap at the next start), the old ones renamed ``.deleted`` and deleted later, then the new ones given
        their final names. False, with nothing changed, when ``old`` is no longer in the log as it was planned
        (or the new ones cannot be renamed)."""
        if not old:
            return False
        try:
            i = next(n for n, s in enumerate(self._segments) if s is old[0])
        except StopIteration:
            return False
        run = self._segments[i : i + len(old)]
        if i + len(old) >= len(self._segments) or any(a is not b for a, b in zip(run, old, strict=True)):
            return False
        renamed: list[LogSegment] = []
        try:
            for seg in new:
                seg.rename_suffix(SWAP_SUFFIX)
                renamed.append(seg)
        except OSError as e:
            log.warning("%s: cannot rename the cleaned segment %s: %s; the cleaning is dropped", self._tp,
                        new[len(renamed)].log_path, e)  # fmt: skip
            for seg in renamed:
                with contextlib.suppress(OSError):
                    seg.rename_suffix(CLEANED_SUFFIX)
            return False
        now = _now_ms() if now_ms is None else now_ms
        self._segments[i : i + len(old)] = new
        self._schedule_delete(old, now)
        for seg in new:
            try:
                seg.rename_suffix("")
            except OSError as e:  # the .swap file is completed when the log is opened again
                log.warning("%s: cannot rename %s: %s", self._tp, seg.log_path, e)
        self._dir_changes += 1
        return True

    # ---- durability ---------------------------------------------------------------------------

    def flush_segments(self, upto: int | None = None) -> int:
        """fsync every segment holding offsets below ``upto`` (default: the log end); blocking,
        safe in a worker thread. Returns the offset now durable; pass it to ``mark_flushed``."""
        target = self._leo if upto is None else upto
        if target > self._recovery_point:  # below the recovery point everything is durable already
            for seg in list(self._segments):
                if seg.base_offset < target or seg is self._segments[-1]:
                    seg.flush()
        # An empty log has nothing a lost name could lose: it is made again as it was.
        changes = self._dir_changes + self.leader_epoch_cache.writes
        if changes != self._dir_synced and self._leo > 0:
            self._sync_names()
            self._dir_synced = changes
        return target

    def _sync_names(self) -> None:
        """fsync the checkpoint files written without it, the directory (names of new segment
        files and renamed checkpoints) and, once after creating it, the log dir holding it."""
        dir = self._dir
        for path in (dir / PARTITION_METADATA, dir / LEADER_EPOCH_CHECKPOINT, dir):
            with contextlib.suppress(FileNotFoundError):  # a checkpoint not written yet; a deleted log
                fsync_path(path)
        if self._parent_unsynced:
            fsync_path(dir.parent)
            self._parent_unsynced = False

    def mark_flushed(self, upto: int, now_ms: int | None = None) -> None:
        """Advance the recovery point after ``flush_segments`` (on the loop)."""
        upto = min(upto, self._leo)
        if upto > self._recovery_point:
            self._recovery_point = upto
        if upto >= self._leo:
            self._unflushed_messages = 0
        self.last_flush_ms = _now_ms() if now_ms is None else now_ms

    def flush(self, upto: int | None = None) -> None:
        self.mark_flushed(self.flush_segments(upto))

    def close(self, clean: bool = True) -> None:
        """Close every file. A clean close records the active segment's max timestamp, trims its
        indexes and writes a producer snapshot at the log end."""
        if clean and self._segments:
            try:
                self._active.on_become_inactive()
                if self._leo != max(self.producer_state.last_snapshot_offset, 0):  # Kafka's rule: a new offset
                    self.producer_state.take_snapshot(self._leo, sync=True)
            except OSError as e:
                log.warning("%s: clean close incomplete: %s", self._tp, e)
        for seg in self._segments:
            seg.close()
        for _, seg in self._pending_deletes:
            seg.close()
        self._pending_deletes = []

    def delete(self) -> None:
        """Close and remove the whole directory (blocking)."""
        self.close(clean=False)
        shutil.rmtree(self._dir, ignore_errors=True)

    def rename_dir(self, new_dir: Path) -> None:
        """Rename the log's directory (Kafka's renameDir): the segments and their indexes follow (their open
        files stay open), and so do the checkpoints and snapshots written later."""
        os.rename(self._dir, new_dir)
        self._dir = new_dir
        for seg in [*self._segments, *(s for _, s in self._pending_deletes)]:
            seg.move_to(new_dir)
        self._moved_to(new_dir)

    def _moved_to(self, new_dir: Path) -> None:
        """What else of the log lives in its directory follows a rename (``Log``: its checkpoint and snapshots)."""
