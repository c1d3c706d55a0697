"""The offset checkpoints of a broker's log dirs (a part of ``LogManager``): ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint`` and ``replication-offset-checkpoint`` (format in rill.log.checkpoints), read at
load, written periodically, at shutdown, and again at once when logs are deleted or set aside.

A checkpoint's values are taken on the loop (``_snapshot``) and written in any thread; snapshots are numbered
as they are taken, and a write never replaces the file with an older snapshot than the one it holds: a periodic
write whose values were read before a deletion does not bring the deleted log's entry back after the deletion's
own write. One lock keeps writers of a file apart (they share its temp file). DeleteRecords' new log start
offsets are written before they move (``write_log_start_offsets``), and every snapshot taken meanwhile carries
them (``StartOffsetMove``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rill.common import TopicPartition
from rill.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from rill.log.log import Log

log = logging.getLogger("rill.log.log_manager")

CHECKPOINT_VALUES: dict[str, Callable[[Log], int]] = {
    RECOVERY_POINT_CHECKPOINT: lambda x: x.recovery_point,
    LOG_START_OFFSET_CHECKPOINT: lambda x: x.log_start_offset,
    REPLICATION_OFFSET_CHECKPOINT: lambda x: x.high_watermark,
}


@dataclass(eq=False, slots=True)
class StartOffsetMove:
    """New log start offsets (DeleteRecords) on their way to ``log-start-offset-checkpoint``: every
    snapshot of that checkpoint taken meanwhile carries them. Once ``decided`` they go on only into
    the log dirs ``written`` with them (the caller moves those offsets; the others stay refused)."""

    offsets: dict[TopicPartition, int]
    written: set[Path] = field(default_factory=set)
    decided: bool = False


@dataclass(frozen=True, slots=True)
class CheckpointSnapshot:
    """One checkpoint's entries per log dir, as read on the loop, numbered in the order they were read."""

    name: str
    seq: int
    offsets: dict[Path, dict[TopicPartition, int]]
    moves: tuple[StartOffsetMove, ...] = ()


class LogDirCheckpoints:
    """The offset checkpoints of ``LogManager``'s log dirs (a base class of it): their state is its own
    (``_init_checkpoints``); the logs and log dirs are the manager's (the names it declares)."""

    log_dirs: list[Path]
    offline_dirs: set[Path]
    _logs: dict[TopicPartition, Log]
    _log_dir_of: dict[TopicPartition, Path]

    def _init_checkpoints(self) -> None:
        self._checkpoint_lock = threading.Lock()
        self._start_offset_moves: list[StartOffsetMove] = []  # DeleteRecords offsets being made durable
        self._checkpoint_seq = 0
        self._written_seq: dict[tuple[str, Path], int] = {}

    def _read_checkpoint(self, path: Path) -> dict[TopicPartition, int]:
        try:
            return read_offset_checkpoint(path)
        except ValueError as e:
            log.warning("Ignoring malformed checkpoint %s: %s", path, e)
            return {}

    def _snapshot(self, name: str, dirs: Iterable[Path] | None = None) -> CheckpointSnapshot:
        value = CHECKPOINT_VALUES[name]
        wanted = None if dirs is None else set(dirs)
        out: dict[Path, dict[TopicPartition, int]] = {
            d: {} for d in self.log_dirs if d not in self.offline_dirs and (wanted is None or d in wanted)
        }
        for tp, plog in self._logs.items():
            d = self._log_dir_of[tp]
            if d in out:
                out[d][tp] = value(plog)
        self._checkpoint_seq += 1
        moves = tuple(self._start_offset_moves) if name == LOG_START_OFFSET_CHECKPOINT else ()
        return CheckpointSnapshot(name, self._checkpoint_seq, out, moves)

    def _write_snapshot(
        self, snap: CheckpointSnapshot, move: StartOffsetMove | None = None, *, sync: bool = True
    ) -> None:
        """Write ``snap``'s files (a file that cannot be written is logged; ``sync=False``: not fsync'ed).
        Given ``move``, decides it under the same lock: no other write comes between."""
        with self._checkpoint_lock:
            for d, entries in snap.offsets.items():
                key = (snap.name, d)
                if self._written_seq.get(key, 0) > snap.seq:
                    continue  # a newer snapshot of this file is on disk already
                moves = [m for m in snap.moves if not m.decided or d in m.written]
                moves = [m for m in moves if m.offsets.keys() & entries.keys()]
                if moves:
                    entries = dict(entries)
                    for m in moves:
                        for tp in m.offsets.keys() & entries.keys():
                            entries[tp] = max(entries[tp], m.offsets[tp])
                try:
                    write_offset_checkpoint(d / snap.name, entries, sync)
                except OSError as e:
                    log.error("Cannot write %s in %s: %s", snap.name, d, e)
                    continue
                self._written_seq[key] = snap.seq
                for m in moves:
                    m.written.add(d)
            if move is not None:
                move.decided = True

    def _write_all_checkpoints(self, dirs: Iterable[Path]) -> None:
        """The three offset checkpoints of ``dirs`` (online ones), from the logs they hold now (blocking)."""
        wanted = list(dirs)
        for name in CHECKPOINT_VALUES:
            self._write_snapshot(self._snapshot(name, wanted))

    async def write_checkpoints(self, *names: str) -> None:
        """Write these checkpoints of every log dir in a worker thread, with the values they have now."""
        for snap in [self._snapshot(name) for name in names]:
            await asyncio.to_thread(self._write_snapshot, snap)

    async def write_log_start_offsets(self, moved: Mapping[TopicPartition, int]) -> set[TopicPartition]:
        """DeleteRecords' durable step, taken before any log start offset moves: the
        log-start-offset checkpoint of each log dir holding a partition of ``moved``, written (in a
        worker thread, fsynced) with those offsets and every other entry as it is. Returns the
        partitions whose checkpoint could not be written (or whose log dir is offline): those must
        not move. The caller moves the others before it next awaits; until then every snapshot of
        that checkpoint carries them, so none writes the old offsets over the new ones."""
        move = StartOffsetMove(dict(moved))
        self._start_offset_moves.append(move)
        try:
            dirs = {self._log_dir_of[tp] for tp in moved if tp in self._log_dir_of}
            snap = self._snapshot(LOG_START_OFFSET_CHECKPOINT, dirs)
            await asyncio.to_thread(self._write_snapshot, snap, move)
        finally:
            move.decided = True
            self._start_offset_moves.remove(move)
        return {tp for tp in moved if self._log_dir_of.get(tp) not in move.written}

    def checkpoint_recovery_points(self) -> None:
        self._write_snapshot(self._snapshot(RECOVERY_POINT_CHECKPOINT))

    def checkpoint_log_start_offsets(self) -> None:
        self._write_snapshot(self._snapshot(LOG_START_OFFSET_CHECKPOINT))

    def checkpoint_high_watermarks(self) -> None:
        self._write_snapshot(self._snapshot(REPLICATION_OFFSET_CHECKPOINT))
