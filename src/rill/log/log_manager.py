"""All partition logs of a broker across its ``log.dirs``, and their periodic duties (Kafka's LogManager).

Each log dir holds ``<topic>-<partition>`` directories, the three offset checkpoints (format in
rill.log.checkpoints, kept by rill.log.log_dir_checkpoints) and, between a clean shutdown and the next
start, the marker file ``.kafka_cleanshutdown`` that lets the next start skip recovery. A deleted partition's
directory is renamed ``<topic>-<partition>.<uuid hex>-delete`` and removed in the background; the recovery-point,
log-start-offset and high-watermark checkpoints are written again at once, as Kafka's asyncDelete does, so a
topic created again under the same name never starts from the old log's offsets (they are also written
right after the logs are loaded, which drops entries of logs that are gone). A stray log (a partition
the metadata does not have, or of another incarnation of its topic: left behind by a crash during a
topic deletion) is renamed ``<topic>-<partition>.<uuid hex>-stray`` and kept, as Kafka keeps them, for
an operator to look at; it is never loaded again. A replica being moved to another log dir has a future log
``<topic>-<partition>.<uuid hex>-future`` there too (rill.log.future_logs). While a broker
runs it holds an exclusive ``flock`` on ``.lock`` in each log dir, as Kafka does: a second broker
pointed at the same directory refuses to start instead of recovering (truncating) segments the
first one is writing.

Threading: ``startup`` and ``shutdown`` run before and after the event loop serves (a worker
thread is fine); everything else runs on the loop, and ``run_background`` moves the blocking
parts (fsync, checkpoint writes, file deletion) to worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.fsutil import FileLock
from rill.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from rill.log.future_logs import FutureLogs
from rill.log.log import FUTURE_DIR_SUFFIX, Log, parse_topic_partition
from rill.log.log_cleaner_manager import CleanerConfig, LogCleaner
from rill.log.log_config import LONG_MAX, LogConfig
from rill.log.log_dir_checkpoints import CHECKPOINT_VALUES, LogDirCheckpoints
from rill.log.log_segment import LogSegment

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"
SHUTDOWN_THREADS = 8  # threads that flush and close the logs at a clean stop


class LogDirInUseError(RuntimeError):
    """Another process (or another LogManager of this one) holds a log dir's lock."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _broker_int(broker_config: Any, name: str, default: int) -> int:
    getter = getattr(broker_config, "get", None)
    if getter is None:
        return default
    try:
        value = getter(name)
    except (KeyError, ValueError):
        return default
    return default if value is None else int(value)


class LogManager(FutureLogs, LogDirCheckpoints):
    def __init__(
        self,
        log_dirs: list[Path],
        default_config: LogConfig,
        *,
        broker_config: Any = None,
        retention_check_interval_ms: int | None = None,
        flush_checkpoint_interval_ms: int | None = None,
        flush_start_offset_checkpoint_interval_ms: int | None = None,
        flush_scheduler_interval_ms: int | None = None,
        tick_ms: int = 1000,
    ) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config

        def pick(explicit: int | None, name: str, default: int) -> int:
            return explicit if explicit is not None else _broker_int(broker_config, name, default)

        self.retention_check_interval_ms = pick(retention_check_interval_ms, "log.retention.check.interval.ms", 300000)
        self.flush_checkpoint_interval_ms = pick(
            flush_checkpoint_interval_ms, "log.flush.offset.checkpoint.interval.ms", 60000
        )
        self.flush_start_offset_checkpoint_interval_ms = pick(
            flush_start_offset_checkpoint_interval_ms, "log.flush.start.offset.checkpoint.interval.ms", 60000
        )
        self.flush_scheduler_interval_ms = pick(
            flush_scheduler_interval_ms, "log.flush.scheduler.interval.ms", LONG_MAX
        )
        # Kafka's producer.id.expiration.ms (dynamic: the broker sets it again on a change) and its check interval
        self.producer_id_expiration_ms = pick(None, "producer.id.expiration.ms", 86400000)
        self.producer_id_expiration_check_interval_ms = pick(None, "producer.id.expiration.check.interval.ms", 600000)
        self.tick_ms = tick_ms
        self._logs: dict[TopicPartition, Log] = {}
        self._log_dir_of: dict[TopicPartition, Path] = {}
        self.offline_dirs: set[Path] = set()
        self._dir_locks: list[FileLock] = []
        self._dirs_to_delete: list[Path] = []
        self._segments_to_delete: list[LogSegment] = []
        self._wake: asyncio.Event | None = None
        self._flush_requested: set[TopicPartition] = set()
        self._init_checkpoints()
        self._init_future_logs()
        self.cleaner = LogCleaner(CleanerConfig.from_broker(broker_config))

    # ---- startup ------------------------------------------------------------------------------

    def startup(self) -> None:
        """Lock every log dir, then load every partition directory in them; recover those not shut
        down cleanly. Raises LogDirInUseError, having loaded nothing, when a dir is locked."""
        self._lock_dirs()
        for log_dir in self.log_dirs:
            if log_dir in self.offline_dirs:
                continue
            try:
                self._load_dir(log_dir)
            except OSError as e:
                hint = ""
                if e.errno == errno.EMFILE:
                    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
                    hint = (
                        f" (the hard limit on open files is {limit}; one is needed per segment, one more per index map)"
                    )
                log.error("Log dir %s is offline: %s%s", log_dir, e, hint)
                self.offline_dirs.add(log_dir)
        self._settle_future_logs()
        # Entries of logs that are gone (deleted before a crash let the checkpoints catch up) must not
        # reach a log created later under the same name.
        self._write_all_checkpoints(self.log_dirs)
        self.cleaner.load_checkpoints(self._online_dirs(), self._logs)

    def _lock_dirs(self) -> None:
        for log_dir in self.log_dirs:
            lock = FileLock(log_dir / LOCK_FILE)
            try:
                log_dir.mkdir(parents=True, exist_ok=True)
                locked = lock.try_lock()
            except OSError as e:
                log.error("Log dir %s is offline: %s", log_dir, e)
                self.offline_dirs.add(log_dir)
                continue
            if not locked:
                self.release_dir_locks()
                raise LogDirInUseError(
                    f"cannot lock {lock.path}: another broker process is using the log dir {log_dir}"
                )
            self._dir_locks.append(lock)

    def release_dir_locks(self) -> None:
        """Drop the log dirs' locks (``shutdown`` does; so does the kernel when the process dies)."""
        for lock in self._dir_locks:
            lock.release()
        self._dir_locks.clear()

    def _load_dir(self, log_dir: Path) -> None:
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_points = self._read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
        start_offsets = self._read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
        high_watermarks = self._read_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT)
        started = time.monotonic()
        for child in sorted(log_dir.iterdir()):
            if not child.is_dir():
                continue
            if child.name.endswith(DELETE_DIR_SUFFIX):
                self._dirs_to_delete.append(child)
                continue
            if child.name.endswith(STRAY_DIR_SUFFIX):
                log.warning("Not loading stray log %s (kept for inspection; remove it when done)", child)
                continue
            if child.name.endswith(FUTURE_DIR_SUFFIX):
                self._load_future_dir(child, log_dir, clean)
                continue
            tp = parse_topic_partition(child.name)
            if tp is None:
                log.warning("Skipping %s: not a <topic>-<partition> directory", child)
                continue
            if tp in self._logs:
                log.error("Skipping %s: %s is already loaded from %s", child, tp, self._log_dir_of[tp])
                continue
            try:
                plog = Log(
                    child,
                    self.default_config,
                    log_start_offset=start_offsets.get(tp, 0),
                    recovery_point=recovery_points.get(tp, 0),
                    high_watermark=high_watermarks.get(tp, 0),
                    had_clean_shutdown=clean,
                )
            except KafkaError as e:
                log.error("Skipping %s: %s", child, e)
                continue
            self._register(tp, plog, log_dir)
            if plog.truncated_bytes:
                log.warning("%s: recovery truncated %d bytes", tp, plog.truncated_bytes)
        if clean:
            marker.unlink()
        loaded = sum(1 for d in self._log_dir_of.values() if d == log_dir)
        # A log dir with no logs (a first start) has nothing to recover: no shutdown to speak of.
        how = "clean shutdown" if clean else "unclean shutdown" if loaded else "no logs yet"
        log.info("Loaded %d logs from %s in %.3f s (%s)", loaded, log_dir, time.monotonic() - started, how)

    def _register(self, tp: TopicPartition, plog: Log, log_dir: Path) -> None:
        self._logs[tp] = plog
        self._log_dir_of[tp] = log_dir
        plog.on_flush_needed = self._request_flush

    # ---- access -------------------------------------------------------------------------------

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tp)

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    def get_or_create_log(self, tp: TopicPartition, topic_id: uuid.UUID | None, config: LogConfig) -> Log:
        return self.get_or_create_logs([(tp, topic_id, config)])[0]

    def get_or_create_logs(
        self,
        wanted: Sequence[tuple[TopicPartition, uuid.UUID | None, LogConfig]],
    ) -> list[Log]:
        """The logs of ``wanted``, in order; missing ones are created (each in the online log dir
        holding the fewest logs; blocking: file creation, no fsync).
        Raises KafkaError (KAFKA_STORAGE_ERROR) after registering the logs that could be created."""
        placed = self._plan(wanted)
        self._register_made(self._make(placed))
        return [self._logs[tp] for tp, _, _ in wanted]

    async def get_or_create_logs_async(
        self, wanted: Sequence[tuple[TopicPartition, uuid.UUID | None, LogConfig]]
    ) -> list[Log]:
        """``get_or_create_logs`` with the files made in a worker thread: the loop keeps serving while the
        kernel makes directories and files (which can take tens of milliseconds each on a busy file system).
        The new logs are registered on the loop, so no other code sees a log half made."""
        placed = self._plan(wanted)
        made = await asyncio.to_thread(self._make, placed) if placed else []
        self._register_made(made)
        return [self._logs[tp] for tp, _, _ in wanted]

    def _plan(
        self, wanted: Sequence[tuple[TopicPartition, uuid.UUID | None, LogConfig]]
    ) -> dict[TopicPartition, tuple[Path, uuid.UUID | None, LogConfig]]:
        """Which of ``wanted`` need a new log, and in which log dir (the online one holding the fewest logs);
        existing logs take their new config, and one of another topic id is set aside as stray."""

        online = [d for d in self.log_dirs if d not in self.offline_dirs]
        counts = {d: 0 for d in online}
        for d in self._log_dir_of.values():
            if d in counts:
                counts[d] += 1
        placed: dict[TopicPartition, tuple[Path, uuid.UUID | None, LogConfig]] = {}
        stray: dict[TopicPartition, str] = {}
        for tp, topic_id, _ in wanted:
            existing = self._logs.get(tp)
            if existing is not None and topic_id is not None and existing.topic_id != topic_id:
                if existing.topic_id_known:  # left by an earlier topic of the same name
                    stray[tp] = f"its topic id {existing.topic_id} is not the topic's {topic_id}"
                else:
                    existing.adopt_topic_id(topic_id)
        if stray:
            self.set_aside_stray(stray)
        for tp, topic_id, config in wanted:
            existing = self._logs.get(tp)
            if existing is not None:
                existing.config = config
            elif tp not in placed:
                if not online:
                    raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "no log dir is online")
                log_dir = self.preferred_log_dir(tp) or min(online, key=lambda d: counts[d])
                counts[log_dir] += 1
                placed[tp] = (log_dir, topic_id, config)
        return placed

    def _make(
        self, placed: Mapping[TopicPartition, tuple[Path, uuid.UUID | None, LogConfig]]
    ) -> list[tuple[TopicPartition, Log | KafkaError, Path]]:
        """Make the logs ``placed`` (files only: no state of the manager is touched, so any thread may run
        it); a log that cannot be made comes back as its KafkaError, its half-made directory set aside."""
        out: list[tuple[TopicPartition, Log | KafkaError, Path]] = []
        # One after another: creating a log is a directory and five new files, no fsync (the log's
        # first flush syncs them); more worker threads only contend in the kernel (measured on this
        # 2-core machine: 1,000 logs in 0.6 s in one thread, 1.1-1.4 s with 2 or 8).
        for tp, (log_dir, topic_id, config) in placed.items():
            path = log_dir / str(tp)
            existed = path.exists()
            try:
                out.append((tp, Log(path, config, topic_id=topic_id, had_clean_shutdown=True), log_dir))
            except OSError as e:
                if not existed and path.exists():  # half made: set aside for removal (a rename needs no descriptor)
                    self._set_aside_dir(path, DELETE_DIR_SUFFIX)
                hint = ""
                if e.errno == errno.EMFILE:
                    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
                    hint = f" (this process may open {limit} files; raise `ulimit -n`)"
                why = f"cannot create the log of {tp} in {log_dir}: {e}{hint}"
                out.append((tp, KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, why), log_dir))
        return out

    def _register_made(self, made: list[tuple[TopicPartition, Log | KafkaError, Path]]) -> None:
        """Register the logs made; raise the first error after registering the others."""
        errors = [plog for _, plog, _ in made if isinstance(plog, KafkaError)]
        for tp, plog, log_dir in made:
            if isinstance(plog, Log):
                self._register(tp, plog, log_dir)
                log.info("Created log %s in %s", tp, log_dir)
        if errors:
            raise errors[0]

    def delete_log(self, tp: TopicPartition) -> bool:
        """``delete_logs`` of one log; False when there is none."""
        return bool(self.delete_logs([tp]))

    def delete_logs(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Forget the logs, rename their directories for background removal and write the checkpoints of
        their log dirs again at once (blocking: a few small files). Returns the partitions that had a log."""
        return self._set_aside(tps, DELETE_DIR_SUFFIX)

    async def delete_logs_async(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """``delete_logs`` with the checkpoints written in a worker thread (their values are taken at once,
        numbered, so no later write brings the deleted logs' entries back)."""
        wanted = list(tps)
        done: list[TopicPartition] = []
        dirs: set[Path] = set()
        for start in range(0, len(wanted), 64):  # the loop serves others between chunks
            if start:
                await asyncio.sleep(0)
            chunk_done, chunk_dirs = self._set_aside_dirs(wanted[start : start + 64], DELETE_DIR_SUFFIX)
            done += chunk_done
            dirs.update(chunk_dirs)
        if dirs:
            for snap in [self._snapshot(name, dirs) for name in CHECKPOINT_VALUES]:
                await asyncio.to_thread(self._write_snapshot, snap)
        return done

    def set_aside_stray(self, why: Mapping[TopicPartition, str]) -> list[TopicPartition]:
        """Set these logs aside as stray (renamed, kept, never loaded again), each for its reason."""
        for tp, reason in why.items():
            plog = self._logs.get(tp)
            if plog is not None:
                log.warning("%s is stray (%s): renaming %s with the suffix %s", tp, reason, plog.dir, STRAY_DIR_SUFFIX)
        return self._set_aside(why, STRAY_DIR_SUFFIX)

    def _set_aside(self, tps: Iterable[TopicPartition], suffix: str) -> list[TopicPartition]:
        done, dirs = self._set_aside_dirs(tps, suffix)
        if dirs:
            self._write_all_checkpoints(dirs)
        return done

    def _set_aside_dirs(self, tps: Iterable[TopicPartition], suffix: str) -> tuple[list[TopicPartition], list[Path]]:
        """Forget the logs and rename their directories; returns them and their log dirs (whose checkpoints
        the caller writes again)."""
        done: list[TopicPartition] = []
        dirs: set[Path] = set()
        for tp in tps:
            plog = self._logs.pop(tp, None)
            self._flush_requested.discard(tp)
            self.cleaner.first_dirty.pop(tp, None)  # a log made again under this name starts dirty
            self.abandon_future_log(tp)
            if plog is None:
                continue
            done.append(tp)
            dirs.add(self._log_dir_of.pop(tp))
            plog.close(clean=False)
            self._set_aside_dir(plog.dir, suffix, plog.rename_dir)
        if dirs:
            self._maybe_wake()
        return done, sorted(dirs)

    def _set_aside_dir(self, path: Path, suffix: str, rename: Callable[[Path], None] | None = None) -> None:
        """Rename a partition directory ``<name>.<uuid hex><suffix>`` (with ``rename``, a log's own, when it
        is open); a ``-delete`` one is removed in the background. A failed rename is logged."""
        target = path.with_name(f"{path.name}.{uuid.uuid4().hex}{suffix}")
        try:
            if rename is not None:
                rename(target)
            else:
                os.rename(path, target)
        except OSError as e:
            log.error("Cannot rename %s to %s: %s", path, target.name, e)
            return
        if suffix == DELETE_DIR_SUFFIX:
            self._dirs_to_delete.append(target)

    # ---- background duties --------------------------------------------------------------------

    def _online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def _cleaner_logs(self) -> dict[TopicPartition, tuple[Log, Path]]:
        # A log being moved is not cleaned (Kafka pauses its cleaning): the copy is of the log as it was written.
        moving = self._future_logs
        return {tp: (plog, self._log_dir_of[tp]) for tp, plog in self._logs.items() if tp not in moving}

    def _request_flush(self, plog: Log) -> None:
        self._flush_requested.add(plog.topic_partition)
        self._maybe_wake()

    def _maybe_wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def run_background(self) -> None:
        """Flush by flush.messages / flush.ms, retention, delayed deletes and checkpoints, until cancelled."""
        self._wake = asyncio.Event()
        now = _now_ms()
        next_retention = now + min(self.retention_check_interval_ms, 30000)
        next_checkpoint = now + self.flush_checkpoint_interval_ms
        next_start_checkpoint = now + self.flush_start_offset_checkpoint_interval_ms
        next_producer_expiration = now  # once after the start: the logs' states hold every producer of their past
        cleaning = None
        if self.cleaner.config.enable:
            cleaning = asyncio.create_task(self.cleaner.run(self._cleaner_logs, self._online_dirs), name="log-cleaner")
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.tick_ms / 1000)
                self._wake.clear()
                now = _now_ms()
                await self.flush_dirty_logs(now)
                if now >= next_retention:
                    next_retention = now + self.retention_check_interval_ms
                    self.cleanup_logs(now)
                await self.delete_due_files(now)
                if now >= next_checkpoint:
                    next_checkpoint = now + self.flush_checkpoint_interval_ms
                    await self.write_checkpoints(RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT)
                if now >= next_start_checkpoint:
                    next_start_checkpoint = now + self.flush_start_offset_checkpoint_interval_ms
                    await self.write_checkpoints(LOG_START_OFFSET_CHECKPOINT)
                if now >= next_producer_expiration:
                    next_producer_expiration = now + self.producer_id_expiration_check_interval_ms
                    self.remove_expired_producers(now)
        finally:
            self._wake = None
            if cleaning is not None:
                cleaning.cancel()

    async def flush_dirty_logs(self, now_ms: int) -> None:
        """fsync (in a thread) every log past flush.messages or flush.ms; advance recovery points."""
        for tp, plog in list(self._logs.items()):
            config = plog.config
            due = tp in self._flush_requested or plog.unflushed_messages >= config.flush_messages
            if not due and plog.unflushed_messages > 0:
                elapsed = now_ms - plog.last_flush_ms
                due = elapsed >= config.flush_ms or elapsed >= self.flush_scheduler_interval_ms
            if not due:
                continue
            self._flush_requested.discard(tp)
            upto = plog.log_end_offset
            try:
                await asyncio.to_thread(plog.flush_segments, upto)
            except OSError as e:
                log.error("%s: flush failed: %s", tp, e)
                continue
            if self._logs.get(tp) is plog:
                plog.mark_flushed(upto, now_ms)

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget, in every log, the producers idle for ``producer.id.expiration.ms``; returns how many."""
        now = _now_ms() if now_ms is None else now_ms
        total = sum(plog.remove_expired_producers(now, self.producer_id_expiration_ms) for plog in self._logs.values())
        if total:
            log.info("Removed %d producer id(s) idle for %d ms", total, self.producer_id_expiration_ms)
        return total

    def cleanup_logs(self, now_ms: int | None = None) -> int:
        """Apply retention to every log; returns segments deleted."""
        total = 0
        for plog in list(self._logs.values()):
            try:
                total += plog.delete_old_segments(now_ms)
            except (OSError, KafkaError) as e:
                log.error("%s: retention failed: %s", plog.topic_partition, e)
        return total

    async def delete_due_files(self, now_ms: int | None = None) -> None:
        segments: list[LogSegment] = []
        for plog in list(self._logs.values()):
            segments += plog.take_due_deletions(now_ms)
        dirs, self._dirs_to_delete = self._dirs_to_delete, []
        for plog in self.retired_logs(_now_ms() if now_ms is None else now_ms):  # swapped out by a move
            plog.close(clean=False)
            dirs.append(plog.dir)
        if segments or dirs:
            await asyncio.to_thread(self._delete_files, segments, dirs)

    @staticmethod
    def _delete_files(segments: list[LogSegment], dirs: list[Path]) -> None:
        for seg in segments:
            try:
                seg.delete_files()
            except OSError as e:
                log.error("Cannot delete %s: %s", seg.log_path, e)
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)

    # ---- shutdown -----------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Flush and close every log, write checkpoints and the clean-shutdown markers (blocking)."""
        self.cleaner.stop()
        dirty_dirs: set[Path] = set()

        def close(item: tuple[TopicPartition, Log]) -> TopicPartition | None:
            tp, plog = item
            try:
                plog.flush()
                plog.close(clean=True)
            except OSError as e:
                log.error("%s: shutdown flush failed: %s", tp, e)
                plog.close(clean=False)
                return tp
            return None

        # Logs are closed by several threads at once: their fsyncs then share the file system's journal
        # commits (one after another, a stop of 1,000 written partitions took 19 s here, under load).
        with ThreadPoolExecutor(SHUTDOWN_THREADS, thread_name_prefix="log-close") as pool:
            for failed in pool.map(close, list(self._logs.items())):
                if failed is not None:
                    dirty_dirs.add(self._log_dir_of[failed])
        for tp, (plog, d) in self.future_logs().items():
            try:
                plog.flush()
                plog.close(clean=True)
            except OSError as e:
                log.error("%s: shutdown flush of the future log failed: %s", tp, e)
                plog.close(clean=False)
                dirty_dirs.add(d)
        self._future_logs.clear()
        self._future_dir_of.clear()
        for plog in self.retired_logs():
            plog.close(clean=False)
            self._dirs_to_delete.append(plog.dir)
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()
        self.cleaner.write_checkpoints(self.cleaner.checkpoint_snapshot(self._cleaner_logs()), self._online_dirs())
        self._delete_files([], self._dirs_to_delete)
        self._dirs_to_delete = []
        for d in self.log_dirs:
            if d in self.offline_dirs or d in dirty_dirs:
                continue
            try:
                (d / CLEAN_SHUTDOWN_FILE).touch()
            except OSError as e:
                log.error("Cannot write the clean shutdown marker in %s: %s", d, e)
        self._logs.clear()
        self._log_dir_of.clear()
        self.release_dir_locks()
