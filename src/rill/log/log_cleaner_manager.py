"""The log cleaner of a broker (Kafka's LogCleaner and LogCleanerManager): which compacted log to clean
next, the ``cleaner-offset-checkpoint`` of each log dir, and the cleaner threads.

A log is cleanable when its ``cleanup.policy`` holds ``compact`` and it has dirty records below its
first uncleanable offset (see rill.log.log_cleaner). Its dirty ratio is the bytes of its segments from
the first dirty offset to the first uncleanable one over the bytes of all its segments below that;
the log with the largest ratio at or above ``min.cleanable.dirty.ratio`` is cleaned first, and a log
whose oldest dirty record is older than ``max.compaction.lag.ms`` is cleaned whatever its ratio.

Each log dir's ``cleaner-offset-checkpoint`` (the offset checkpoint format: version 0, count,
``topic partition offset`` lines) holds each compacted log's first dirty offset: everything below it
has been cleaned. An entry below the log start offset, or above the log end, counts as the log start.

``log.cleaner.threads`` cleanings run at once, each on the event loop for its choice and swap and in a
cleaning process for the reading and writing (rill.log.cleaner_process: its CPU work outside the broker's
GIL), a worker thread waiting for it; ``clean_now`` cleans in the calling thread. A cleaning that fails
on the log's content (a corrupt batch, a batch with more keys than the map holds) marks its log uncleanable
until the broker restarts, with the reason logged; the others go on. One that fails for the disk (full,
failing) is logged and tried again after ``log.cleaner.backoff.ms``; its files are removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rill.common import TopicPartition
from rill.log.checkpoints import read_offset_checkpoint, write_offset_checkpoint
from rill.log.cleaner_offset_map import OffsetMap, slots_for
from rill.log.cleaner_process import CleanerPool, SourceChangedError
from rill.log.log import Log
from rill.log.log_cleaner import (
    CleanerAbortedError,
    CleanPlan,
    CleanResult,
    Throttler,
    clean,
    discard,
    forget_swap_ends,
    plan_cleaning,
)

log = logging.getLogger("rill.log_cleaner")

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings."""

    enable: bool = True
    threads: int = 1
    backoff_ms: int = 15000
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = 1.7976931348623157e308

    @classmethod
    def from_broker(cls, config: Any) -> CleanerConfig:
        """From a ``BrokerConfig`` (or anything with ``get(name)``, or a callable ``name -> value``)."""
        getter = config if callable(config) else getattr(config, "get", None)
        if getter is None:
            return cls()

        def get(name: str, default: Any) -> Any:
            try:
                value = getter(name)
            except (KeyError, ValueError):
                return default
            return default if value is None else value

        return cls(
            enable=str(get("log.cleaner.enable", True)).lower() == "true",
            threads=int(get("log.cleaner.threads", 1)),
            backoff_ms=int(get("log.cleaner.backoff.ms", 15000)),
            dedupe_buffer_size=int(get("log.cleaner.dedupe.buffer.size", 128 * 1024 * 1024)),
            io_buffer_load_factor=float(get("log.cleaner.io.buffer.load.factor", 0.9)),
            io_max_bytes_per_second=float(get("log.cleaner.io.max.bytes.per.second", 1.7976931348623157e308)),
        )


@dataclass(slots=True)
class WorkerStats:
    """One cleaner thread's last cleaning (Kafka's CleanerStats) and last choice (PreCleanStats)."""

    bytes_read: int = 0
    bytes_written: int = 0
    clean_secs: float = 0.0
    buffer_utilization: float = 0.0  # of the key map, 0-1
    max_compaction_delay_ms: int = 0  # how far past max.compaction.lag.ms the most overdue log was


@dataclass(slots=True)
class CleanerStats:
    """What the metrics report (Kafka's kafka.log:type=LogCleaner and LogCleanerManager names): the last
    cleaning and choice of each cleaner thread, the dirtiest log's ratio at the last choice, and when a
    thread last looked for a log to clean."""

    max_dirty_percent: float = 0.0
    last_recopy_percent: float = 0.0
    max_clean_secs: float = 0.0
    last_run_ms: int = field(default_factory=_now_ms)
    cleanings: int = 0
    workers: dict[int, WorkerStats] = field(default_factory=dict)

    def worker(self, index: int) -> WorkerStats:
        stats = self.workers.get(index)
        if stats is None:
            stats = self.workers[index] = WorkerStats()
        return stats


class LogCleaner:
    """Cleans the compacted logs of a set of logs (``logs()``: tp -> (log, log dir))."""

    def __init__(self, config: CleanerConfig, processes: bool = True) -> None:
        self.config = config
        # clean_one's map and rewrite in a cleaning process (rill.log.cleaner_process), else in its thread
        self.processes = processes
        self.first_dirty: dict[TopicPartition, int] = {}
        self.in_progress: dict[TopicPartition, Log] = {}
        self.uncleanable: dict[TopicPartition, str] = {}  # why each log is uncleanable
        self.dead_workers: set[int] = set()  # cleaner tasks ended by an error, started again by a reconfigure
        self._logs_of: Any = None  # run()'s callables, for the per-log-dir metrics
        self._dirs_of: Any = None
        self.stats = CleanerStats()
        self.throttler = Throttler(config.io_max_bytes_per_second)
        self._abort = threading.Event()
        self._pool = CleanerPool(config.io_max_bytes_per_second)
        self._checkpoint_lock = threading.Lock()
        self._wake: asyncio.Event | None = None
        self._running = 0  # cleanings in worker threads
        self._idle = threading.Condition()
        # results of worker threads not yet taken by their coroutine (one cancelled meanwhile): removed by stop()
        self._unclaimed: dict[object, CleanResult] = {}
        self._workers_changed: asyncio.Event | None = None
        self.workers = 0  # cleaner tasks running

    # ---- checkpoints --------------------------------------------------------------------------

    def load_checkpoints(self, log_dirs: list[Path], logs: Mapping[TopicPartition, Log]) -> None:
        """The first dirty offsets of the ``logs`` loaded from ``log_dirs`` (entries of other logs are
        dropped)."""
        for d in log_dirs:
            try:
                saved = read_offset_checkpoint(d / CLEANER_OFFSET_CHECKPOINT)
            except (OSError, ValueError) as e:
                log.warning("Ignoring unreadable %s in %s: %s", CLEANER_OFFSET_CHECKPOINT, d, e)
                continue
            self.first_dirty.update({tp: off for tp, off in saved.items() if tp in logs and logs[tp].dir.parent == d})

    def checkpoint_snapshot(
        self, logs: dict[TopicPartition, tuple[Log, Path]]
    ) -> dict[Path, dict[TopicPartition, int]]:
        out: dict[Path, dict[TopicPartition, int]] = {}
        for tp, (plog, d) in logs.items():
            if tp in self.first_dirty and plog.config.compacted:
                out.setdefault(d, {})[tp] = self.first_dirty[tp]
        return out

    def write_checkpoints(self, snapshot: dict[Path, dict[TopicPartition, int]], dirs: list[Path]) -> None:
        """Write each log dir's ``cleaner-offset-checkpoint`` (blocking)."""
        with self._checkpoint_lock:
            for d in dirs:
                try:
                    write_offset_checkpoint(d / CLEANER_OFFSET_CHECKPOINT, snapshot.get(d, {}))
                except OSError as e:
                    log.error("Cannot write %s in %s: %s", CLEANER_OFFSET_CHECKPOINT, d, e)

    # ---- choosing -----------------------------------------------------------------------------

    def first_dirty_offset(self, plog: Log) -> int:
        tp = plog.topic_partition
        offset = self.first_dirty.get(tp, plog.log_start_offset)
        if plog.truncated_to is not None:
            offset = min(offset, plog.truncated_to)
            plog.truncated_to = None
        if offset < plog.log_start_offset or offset > plog.log_end_offset:
            offset = plog.log_start_offset
        self.first_dirty[tp] = offset
        return offset

    def dirty_ratio(self, plog: Log, now_ms: int) -> tuple[float, bool]:
        """(dirty bytes / cleanable bytes, whether max.compaction.lag.ms forces a cleaning)."""
        clean, dirty, delay_ms = _cleanable_bytes(plog, self.first_dirty_offset(plog), now_ms)
        total = clean + dirty
        return (dirty / total if total else 0.0), delay_ms > 0 and dirty > 0

    def pick(self, logs: dict[TopicPartition, tuple[Log, Path]], now_ms: int, worker: int = 0) -> Log | None:
        """The dirtiest cleanable log (None: nothing to clean). Logs no longer there are no longer
        uncleanable (Kafka's maintainUncleanablePartitions)."""
        for gone in [tp for tp in self.uncleanable if tp not in logs]:
            del self.uncleanable[gone]
        best: tuple[bool, float, Log] | None = None
        max_dirty = 0.0
        max_delay = 0
        for tp, (plog, _) in logs.items():
            if not plog.config.compacted or tp in self.in_progress or tp in self.uncleanable:
                continue
            clean, dirty, delay_ms = _cleanable_bytes(plog, self.first_dirty_offset(plog), now_ms)
            ratio = dirty / (clean + dirty) if clean + dirty else 0.0
            must = delay_ms > 0 and dirty > 0
            max_dirty = max(max_dirty, ratio)
            max_delay = max(max_delay, delay_ms)
            if ratio <= 0 or (ratio < plog.config.min_cleanable_dirty_ratio and not must):
                continue
            if best is None or (must, ratio) > best[:2]:
                best = (must, ratio, plog)
        self.stats.max_dirty_percent = 100 * max_dirty
        self.stats.worker(worker).max_compaction_delay_ms = max_delay
        self.stats.last_run_ms = _now_ms()
        return None if best is None else best[2]

    # ---- cleaning -----------------------------------------------------------------------------

    async def clean_one(
        self, logs: dict[TopicPartition, tuple[Log, Path]], offset_map: OffsetMap, worker: int = 0
    ) -> bool:
        """Clean the dirtiest log once (as cleaner thread ``worker``); False when there was none to clean."""
        now = _now_ms()
        plog = self.pick(logs, now, worker)
        if plog is None:
            return False
        tp = plog.topic_partition
        plan = plan_cleaning(plog, self.first_dirty_offset(plog), now)
        if plan is None:
            return False
        self.in_progress[tp] = plog
        ticket = object()
        try:
            try:
                result = await asyncio.to_thread(self._clean_in_thread, plan, offset_map, ticket)
                self._unclaimed.pop(ticket, None)
            except CleanerAbortedError:
                return False
            except SourceChangedError as e:  # retention removed a source meanwhile
                log.info("%s: the log changed while it was cleaned; the cleaning is dropped (%s)", tp, e)
                return True
            except Exception as e:
                if any(s.segment is not None and s.segment.closed for s in plan.sources):  # the log was deleted
                    log.info("%s: cleaning stopped, the log is gone: %s", tp, e)
                    return True
                if isinstance(e, OSError):  # a full or failing disk: tried again after the backoff
                    log.warning("%s: cleaning failed, tried again later: %s", tp, e)
                    return False
                self.uncleanable[tp] = str(e)
                log.error("%s is uncleanable (the cleaner leaves it until the broker restarts): %s", tp, e)
                return True
            if result is None:
                return False
            if self._swap(result, logs, worker):
                await asyncio.to_thread(forget_swap_ends, plan.dir, result.cleaned)
            return True
        finally:
            self.in_progress.pop(tp, None)

    def _clean_in_thread(self, plan: CleanPlan, offset_map: OffsetMap, ticket: object) -> CleanResult | None:
        with self._idle:
            if self._abort.is_set():
                raise CleanerAbortedError
            self._running += 1
        try:
            if self.processes:
                result = self._pool.clean(plan, offset_map.slots, max(1, self.config.threads))
            else:
                result = clean(plan, offset_map, self.throttler, self._abort, yield_gil=True)
            if result is not None:
                with self._idle:
                    self._unclaimed[ticket] = result
            return result
        finally:
            with self._idle:
                self._running -= 1
                self._idle.notify_all()

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the cleanings in worker threads at their next batch and wait for them (blocking): none may
        touch a log dir after the broker let go of it. Their files are removed, or, when a cleaning had
        finished but was not swapped in, its files are removed too (the log may have changed since: a truncation)."""
        self._abort.set()
        self._pool.abort()
        with self._idle:
            self._idle.wait_for(lambda: self._running == 0, timeout)
            unclaimed = list(self._unclaimed.values())
            self._unclaimed.clear()
        self._pool.shutdown()
        for result in unclaimed:  # finished after its coroutine was cancelled: never swapped in
            discard(result.cleaned)

    def clean_now(self, plog: Log, offset_map: OffsetMap, now_ms: int | None = None) -> CleanResult | None:
        """One cleaning of ``plog`` whatever its dirty ratio, all in the calling thread (tools, tests)."""
        now = _now_ms() if now_ms is None else now_ms
        plan = plan_cleaning(plog, self.first_dirty_offset(plog), now)
        result = None if plan is None else clean(plan, offset_map, self.throttler)
        if result is not None and self._swap(result, {plog.topic_partition: (plog, plog.dir.parent)}):
            forget_swap_ends(plog.dir, result.cleaned)
        return result

    def _swap(self, result: CleanResult, logs: dict[TopicPartition, tuple[Log, Path]], worker: int = 0) -> bool:
        """Put the cleaned segments in the log (on the loop), when it still holds what was cleaned; False when
        it does not (the cleaning is dropped)."""
        plan = result.plan
        plog = plan.log
        assert plog is not None
        tp = plog.topic_partition
        entry = logs.get(tp)
        old = [s.segment for g in result.groups for s in g if s.segment is not None]
        unchanged = entry is not None and entry[0] is plog and plog.truncated_to is None
        unchanged = unchanged and all(
            s.segment is not None and s.segment.size == s.size and not s.segment.closed
            for g in result.groups
            for s in g
        )
        if not unchanged or not plog.replace_segments(old, result.cleaned):
            log.info("%s: the log changed while it was cleaned; the cleaning is dropped", tp)
            discard(result.cleaned)
            return False
        self.first_dirty[tp] = result.map_end
        read, written = result.bytes_read, result.bytes_written
        stats = self.stats
        stats.cleanings += 1
        stats.max_clean_secs = max(stats.max_clean_secs, result.seconds)
        stats.last_recopy_percent = 100 * written / read if read else 0.0
        last = stats.worker(worker)
        last.bytes_read, last.bytes_written = read, written
        last.clean_secs = result.seconds
        last.buffer_utilization = result.map_utilization
        log.info(
            "log-cleaner: cleaned %s: offsets %d-%d, %d segments into %d, %.1f MB read, %.1f MB written,"
            " %d of %d records removed, first dirty offset %d -> %d, %.3f s (%.1f MB/s)",
            tp, plog.log_start_offset, result.map_end - 1, len(old), len(result.cleaned), read / 1e6,
            written / 1e6, result.records_removed, result.records_read, plan.first_dirty, result.map_end,
            result.seconds, read / 1e6 / result.seconds if result.seconds > 0 else 0.0,
        )  # fmt: skip
        return True

    async def run(self, logs_of: Any, dirs_of: Any) -> None:
        """The cleaner threads, until cancelled. ``logs_of()`` gives tp -> (log, log dir) now;
        ``dirs_of()`` the online log dirs. ``reconfigure`` changes their number while they run."""
        self._wake = asyncio.Event()
        self._workers_changed = asyncio.Event()
        self._abort.clear()
        self._pool.resume()
        self._logs_of, self._dirs_of = logs_of, dirs_of
        tasks: list[asyncio.Task[None]] = []

        async def worker(index: int) -> None:
            self.workers += 1
            self.dead_workers.discard(index)
            try:
                await work(index)
            except Exception:
                self.dead_workers.add(index)  # Kafka's DeadThreadCount; a reconfigure starts it again
                log.exception("log cleaner thread %d stopped by an error", index)
            finally:
                self.workers -= 1

        async def work(index: int) -> None:
            offset_map = OffsetMap(1)
            while index < max(1, self.config.threads):  # fewer threads wanted: the extra ones end between cleanings
                threads = max(1, self.config.threads)
                slots = slots_for(self.config.dedupe_buffer_size // threads, self.config.io_buffer_load_factor)
                if offset_map.slots != slots:
                    offset_map = OffsetMap(slots)
                cleaned = await self.clean_one(logs_of(), offset_map, index)
                offset_map.clear()
                if cleaned:
                    logs = logs_of()
                    snap = self.checkpoint_snapshot(logs)
                    await asyncio.to_thread(self.write_checkpoints, snap, dirs_of())
                    continue
                assert self._wake is not None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.config.backoff_ms / 1000)
                self._wake.clear()

        try:
            while True:
                tasks = [t for t in tasks if not t.done()]
                running = {int(t.get_name().rsplit("-", 1)[1]) for t in tasks}
                for i in range(max(1, self.config.threads)):
                    if i not in running:
                        tasks.append(asyncio.create_task(worker(i), name=f"log-cleaner-{i}"))
                for i in [i for i in self.stats.workers if i >= max(1, self.config.threads)]:
                    del self.stats.workers[i]  # threads no longer there report no last cleaning
                await self._workers_changed.wait()
                self._workers_changed.clear()
        finally:
            self._abort.set()  # a cleaning in a worker thread or process stops at its next batch
            self._pool.abort()
            for t in tasks:
                t.cancel()
            self._wake = None
            self._workers_changed = None
            self._logs_of = self._dirs_of = None

    def reconfigure(self, config: CleanerConfig) -> None:
        """Take new ``log.cleaner.*`` values (dynamic broker configs) while running: the I/O rate and backoff
        at once, the thread count and map size from each worker's next cleaning (``log.cleaner.enable`` is
        read at start only, as in Kafka)."""
        if config == self.config:
            return
        log.info("log cleaner reconfigured: %s", config)
        self.config = config
        self.throttler.rate = config.io_max_bytes_per_second
        self._pool.set_rate(config.io_max_bytes_per_second)
        if self._workers_changed is not None:
            self._workers_changed.set()
        self.wake()

    def metric_values(self) -> dict[str, float]:
        """The cleaner's gauges under the Prometheus forms of Kafka's names (rill.metrics), computed as
        Kafka's are: over the last cleaning of each cleaner thread, the maximum (buffer utilization, clean
        time, compaction delay) or the bytes written over the bytes read (recopy)."""
        stats = self.stats
        last = list(stats.workers.values())
        read = sum(w.bytes_read for w in last)
        written = sum(w.bytes_written for w in last)
        return {
            "kafka_log_logcleaner_cleaner_recopy_percent": 100 * written / max(read, 1),
            "kafka_log_logcleaner_max_clean_time_secs": max((w.clean_secs for w in last), default=0.0),
            "kafka_log_logcleaner_max_buffer_utilization_percent": 100
            * max((w.buffer_utilization for w in last), default=0.0),
            "kafka_log_logcleaner_max_compaction_delay_secs": max((w.max_compaction_delay_ms for w in last), default=0)
            / 1000,
            "kafka_log_logcleaner_deadthreadcount": float(len(self.dead_workers)),
            "kafka_log_logcleanermanager_max_dirty_percent": stats.max_dirty_percent,
            "kafka_log_logcleanermanager_time_since_last_run_ms": float(max(0, _now_ms() - stats.last_run_ms)),
        }

    def log_dir_metric_values(self) -> dict[str, dict[str, float]]:
        """LogCleanerManager's gauges tagged by log dir (``uncleanable-partitions-count`` and
        ``uncleanable-bytes``: the dirty bytes of the uncleanable logs), name -> log dir -> value; every
        online log dir is reported (0 when none of its logs is uncleanable)."""
        counts: dict[str, float] = {}
        dirty_bytes: dict[str, float] = {}
        if self._dirs_of is not None:
            for d in self._dirs_of():
                counts[str(Path(d).absolute())] = dirty_bytes[str(Path(d).absolute())] = 0.0
        logs = self._logs_of() if self._logs_of is not None else {}
        now = _now_ms()
        for tp in list(self.uncleanable):
            entry = logs.get(tp)
            if entry is None:
                continue
            plog, d = entry
            first = self.first_dirty.get(tp, plog.log_start_offset)
            if first < plog.log_start_offset or first > plog.log_end_offset:
                first = plog.log_start_offset
            key = str(Path(d).absolute())
            counts[key] = counts.get(key, 0.0) + 1
            dirty_bytes[key] = dirty_bytes.get(key, 0.0) + _cleanable_bytes(plog, first, now)[1]
        return {
            "kafka_log_logcleanermanager_uncleanable_partitions_count": counts,
            "kafka_log_logcleanermanager_uncleanable_bytes": dirty_bytes,
        }

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()


def _cleanable_bytes(plog: Log, first_dirty: int, now_ms: int) -> tuple[int, int, int]:
    """(clean bytes, dirty bytes, compaction delay in ms) of ``plog`` from ``first_dirty`` up to its first
    uncleanable offset (the active segment, the last stable offset, ``min.compaction.lag.ms``); the delay is how
    long ago the first dirty segment's first batch passed ``max.compaction.lag.ms`` (Kafka's
    maxCompactionDelay), 0 when it has not. Reads only: the metrics call it from their own thread."""
    segments = list(plog.segments)
    end = min(segments[-1].base_offset, plog.last_stable_offset)
    config = plog.config
    clean = dirty = delay = 0
    for i, seg in enumerate(segments[:-1]):
        if seg.base_offset >= end:
            break
        upper = segments[i + 1].base_offset
        if upper <= first_dirty:
            clean += seg.size
            continue
        if config.min_compaction_lag_ms > 0 and seg.largest_timestamp() > now_ms - config.min_compaction_lag_ms:
            break
        first_ts = seg.rolling_based_timestamp
        if not dirty and config.max_compaction_lag_ms < 2**63 - 1 and first_ts is not None and first_ts >= 0:
            delay = max(0, now_ms - config.max_compaction_lag_ms - first_ts)
        dirty += seg.size
    return clean, dirty, delay
