"""Future logs: a replica being moved to another log dir of the same broker (a part of ``LogManager``).

AlterReplicaLogDirs names a log dir for a replica. When the broker holds the replica in another one, a future
log ``<topic>-<partition>.<uuid hex>-future`` is made in the destination and filled from the current log by
the replica manager's copier (rill.replica.replica_alter_log_dirs); once it holds every offset of the current
log, ``replace_current_with_future`` swaps them on the loop, with no append in between (the log start offset
first written to the destination's ``log-start-offset-checkpoint``, where a crash at any later point finds it):

1. the current log's directory is renamed ``<topic>-<partition>.<uuid hex>-delete``; the log stays open, for
   whoever was reading it (a coordinator loading its partition), until ``file.delete.delay.ms`` has passed, when
   it is closed and its directory removed (``retired_logs``);
2. the future log's directory is renamed ``<topic>-<partition>`` in its log dir, and the log takes the current
   one's place.

A crash leaves one of three states, each of which the next start settles (``_settle_future_logs``): before
step 1, a current log and a future one (the future log is loaded and the copy goes on where it stopped);
between the steps, a future log and no current one (the future log held every offset when step 1 ran: it is
made the current log, finishing the swap); after step 2, a moved log and a ``-delete`` directory. A directory
never holds two current logs of one partition, so no start has to choose between them.

When the broker does not hold the replica yet, the log dir is remembered as the preferred one and the log is
made there when the partition comes (``preferred_log_dir``), as Kafka's ``maybeUpdatePreferredLogDir`` does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.log.checkpoints import LOG_START_OFFSET_CHECKPOINT
from rill.log.log import FUTURE_DIR_SUFFIX, Log, parse_topic_partition
from rill.log.log_config import LogConfig

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rill.log.log_dir_checkpoints import CheckpointSnapshot, StartOffsetMove

log = logging.getLogger(__name__)

DELETE_SUFFIX = "-delete"


def future_dir_name(tp: TopicPartition) -> str:
    return f"{tp}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


class FutureLogs:
    """The future logs and preferred log dirs of ``LogManager`` (a base class of it): their state is its own
    (``_init_future_logs``); the current logs and log dirs are the manager's (the names it declares)."""

    log_dirs: list[Path]
    offline_dirs: set[Path]
    default_config: LogConfig
    _logs: dict[TopicPartition, Log]
    _log_dir_of: dict[TopicPartition, Path]
    _dirs_to_delete: list[Path]

    if TYPE_CHECKING:

        def _register(self, tp: TopicPartition, plog: Log, log_dir: Path) -> None: ...

        def _read_checkpoint(self, path: Path) -> dict[TopicPartition, int]: ...

        def _snapshot(self, name: str, dirs: Iterable[Path] | None = None) -> CheckpointSnapshot: ...

        def _write_snapshot(
            self, snap: CheckpointSnapshot, move: StartOffsetMove | None = None, *, sync: bool = True
        ) -> None: ...

        def _maybe_wake(self) -> None: ...

    def _init_future_logs(self) -> None:
        self._future_logs: dict[TopicPartition, Log] = {}
        self._future_dir_of: dict[TopicPartition, Path] = {}
        self._preferred_dirs: dict[TopicPartition, Path] = {}
        self._retired: list[tuple[int, Log]] = []  # (when to close and remove, log) of logs swapped out

    def retired_logs(self, now_ms: int | None = None) -> list[Log]:
        """The logs swapped out by moves whose time has come (every one without ``now_ms``), taken: the caller
        closes them and removes their directories."""
        due = [plog for at, plog in self._retired if now_ms is None or at <= now_ms]
        self._retired = [(at, plog) for at, plog in self._retired if now_ms is not None and at > now_ms]
        return due

    # ---- access -------------------------------------------------------------------------------

    def future_log(self, tp: TopicPartition) -> Log | None:
        return self._future_logs.get(tp)

    def future_logs(self) -> dict[TopicPartition, tuple[Log, Path]]:
        """tp -> (future log, its log dir)."""
        return {tp: (plog, self._future_dir_of[tp]) for tp, plog in self._future_logs.items()}

    def log_dir_of(self, tp: TopicPartition) -> Path | None:
        """The log dir of ``tp``'s current log (None when there is none)."""
        return self._log_dir_of.get(tp)

    def configured_log_dir(self, path: str) -> Path | None:
        """The configured log dir an absolute ``path`` names (as Kafka compares them: absolute paths), or None."""
        if not os.path.isabs(path):
            return None
        wanted = os.path.normpath(path)
        return next((d for d in self.log_dirs if os.path.normpath(d.absolute()) == wanted), None)

    # ---- preferred log dirs -------------------------------------------------------------------

    def maybe_update_preferred_log_dir(self, tp: TopicPartition, log_dir: Path) -> None:
        """Make ``tp``'s log in ``log_dir`` when it is created (a log that exists is moved instead)."""
        self._preferred_dirs[tp] = log_dir

    def preferred_log_dir(self, tp: TopicPartition) -> Path | None:
        """The preferred log dir of a log about to be made (taken: it applies once), when it is online."""
        d = self._preferred_dirs.pop(tp, None)
        return d if d is not None and d not in self.offline_dirs else None

    # ---- loading --------------------------------------------------------------------------------

    def _load_future_dir(self, child: Path, log_dir: Path, clean: bool) -> None:
        """Load the future log in ``child`` (at start); one that cannot be read stays on disk, unloaded."""
        tp = parse_topic_partition(child.name)
        if tp is None:
            log.warning("Skipping %s: not a <topic>-<partition>.<uuid>-future directory", child)
            return
        if tp in self._future_logs:
            log.warning("Removing %s: %s already has a future log in %s", child, tp, self._future_dir_of[tp])
            self._rename_aside(child)
            return
        try:
            plog = Log(child, self.default_config, had_clean_shutdown=clean)
        except (KafkaError, ValueError) as e:
            log.error("Skipping the future log %s: %s", child, e)
            return
        self._future_logs[tp] = plog
        self._future_dir_of[tp] = log_dir

    def _settle_future_logs(self) -> None:
        """After every log dir is loaded: finish a swap a crash stopped after the current log was set aside,
        drop a future log in its current log's own dir; the others are copied on by the replica manager."""
        for tp, plog in list(self._future_logs.items()):
            fdir = self._future_dir_of[tp]
            current_dir = self._log_dir_of.get(tp)
            if current_dir == fdir:
                log.warning("%s: dropping the future log %s, in the current log's dir", tp, plog.dir)
                self.abandon_future_log(tp)
            elif current_dir is None:
                unloaded = [d / str(tp) for d in self.log_dirs if (d / str(tp)).exists()]
                if unloaded:  # a current log that could not be loaded: nothing is decided for it
                    log.error("%s: keeping the future log %s unloaded beside %s", tp, plog.dir, unloaded[0])
                    self._forget_future(tp).close(clean=False)
                    continue
                try:
                    plog.rename_dir(fdir / str(tp))
                except OSError as e:
                    log.error("%s: cannot finish the move of its log to %s: %s", tp, fdir, e)
                    self._forget_future(tp).close(clean=False)
                    continue
                self._forget_future(tp)
                self._register(tp, plog, fdir)
                self._take_checkpointed_start(tp, plog)
                log.info("%s: finished the move of its log to %s (the swap a stop interrupted)", tp, fdir)

    def _take_checkpointed_start(self, tp: TopicPartition, plog: Log) -> None:
        """A log whose swap a start finished starts where the log it replaced did (DeleteRecords may have moved
        that start, checkpointed in the other log dir's ``log-start-offset-checkpoint``)."""
        starts = [self._read_checkpoint(d / LOG_START_OFFSET_CHECKPOINT).get(tp, -1)
                  for d in self.log_dirs if d not in self.offline_dirs]  # fmt: skip
        start = min(max(starts, default=-1), plog.log_end_offset)
        if start > plog.log_start_offset:
            plog.high_watermark = max(plog.high_watermark, start)
            plog.maybe_increment_log_start_offset(start)

    # ---- moving -------------------------------------------------------------------------------

    def create_future_log(self, tp: TopicPartition, dest: Path) -> Log:
        """A new, empty future log of ``tp`` in ``dest``, starting at the current log's start offset (blocking:
        a directory and a few files). KAFKA_STORAGE_ERROR when it cannot be made."""
        current = self._logs[tp]
        path = dest / future_dir_name(tp)
        try:
            plog = Log(path, current.config, topic_id=current.topic_id, log_start_offset=current.log_start_offset,
                       had_clean_shutdown=True)  # fmt: skip
        except OSError as e:
            if path.exists():
                self._rename_aside(path)
            why = f"cannot create the future log of {tp} in {dest}: {e}"
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, why) from e
        self._future_logs[tp] = plog
        self._future_dir_of[tp] = dest
        log.info("%s: moving its log from %s to %s", tp, self._log_dir_of.get(tp), dest)
        return plog

    def abandon_future_log(self, tp: TopicPartition) -> bool:
        """Drop ``tp``'s future log (closed, its directory renamed ``-delete``); False when there is none."""
        plog = self._future_logs.get(tp)
        if plog is None:
            return False
        self._forget_future(tp)
        plog.close(clean=False)
        self._rename_aside(plog.dir, plog)
        return True

    def replace_current_with_future(self, tp: TopicPartition) -> list[Path]:
        """Swap ``tp``'s current log for its future log, which must end where the current one does (on the loop:
        no append comes between the check and the swap). Returns the two log dirs, whose checkpoints the caller
        writes again (``write_dir_checkpoints``). KAFKA_STORAGE_ERROR, with nothing swapped, when the current
        log's directory cannot be renamed."""
        current, future = self._logs[tp], self._future_logs[tp]
        if future.log_end_offset != current.log_end_offset:
            raise RuntimeError(f"{tp}: the future log ends at {future.log_end_offset}, the current one at "
                               f"{current.log_end_offset}")  # fmt: skip
        source, dest = self._log_dir_of[tp], self._future_dir_of[tp]
        # The log start (DeleteRecords may have moved it) in the destination's checkpoint first: a crash from here
        # on finds it there, whatever rename it cut. Not fsync'ed (a process killed leaves the page cache, and the
        # renames are not synced either): the checkpoints are written durably right after the swap.
        self._log_dir_of[tp] = dest
        try:
            snap = self._snapshot(LOG_START_OFFSET_CHECKPOINT, [dest])
        finally:
            self._log_dir_of[tp] = source
        self._write_snapshot(snap, sync=False)
        aside = current.dir.with_name(f"{current.dir.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        try:
            current.rename_dir(aside)  # step 1: from here on the future log is the one the next start keeps
        except OSError as e:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{tp}: cannot rename {current.dir}: {e}") from e
        try:
            future.rename_dir(dest / str(tp))  # step 2
        except OSError as e:  # the next start would finish it; this run keeps the future log where it is
            log.error("%s: cannot rename %s (the next start finishes the move): %s", tp, future.dir, e)
        future.config = current.config  # a config changed during the copy
        future.high_watermark = current.high_watermark
        for epoch, start in current.leader_epoch_cache.entries:  # an epoch begun at the end, with no batch yet
            if epoch > future.leader_epoch_cache.latest_epoch:
                future.leader_epoch_cache.assign(epoch, start)
        self._forget_future(tp)
        on_flush = current.on_flush_needed
        self._logs[tp] = future
        self._log_dir_of[tp] = dest
        future.on_flush_needed = on_flush
        self._retired.append((time.time_ns() // 1_000_000 + current.config.file_delete_delay_ms, current))
        self._maybe_wake()
        log.info("%s: its log moved from %s to %s (log end %d)", tp, source, dest, future.log_end_offset)
        return [source, dest]

    async def write_dir_checkpoints(self, dirs: Iterable[Path]) -> None:
        """Write the offset checkpoints of ``dirs`` again (values taken now, files written in a worker thread)."""
        from rill.log.log_dir_checkpoints import CHECKPOINT_VALUES

        wanted = set(dirs)
        for snap in [self._snapshot(name, wanted) for name in CHECKPOINT_VALUES]:
            await asyncio.to_thread(self._write_snapshot, snap)

    def _forget_future(self, tp: TopicPartition) -> Log:
        self._future_dir_of.pop(tp, None)
        return self._future_logs.pop(tp)

    def _rename_aside(self, path: Path, plog: Log | None = None) -> None:
        target = path.with_name(f"{path.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        try:
            if plog is not None:
                plog.rename_dir(target)
            else:
                os.rename(path, target)
        except OSError as e:
            log.error("Cannot rename %s to %s: %s", path, target.name, e)
            return
        self._dirs_to_delete.append(target)
