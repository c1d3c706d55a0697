"""The log cleaner's processes: the heavy part of a cleaning (the key map over the dirty section and the
rewrite of the source segments into ``.cleaned`` files, see rill.log.log_cleaner) runs in a process of its own,
so the cleaning's CPU work never holds the broker's GIL and ``log.cleaner.io.max.bytes.per.second`` is what
bounds what it costs the producers.

``CleanerPool`` holds ``log.cleaner.threads`` processes, started with the ``spawn`` method (never forked
from the broker, whose threads and event loop a fork would copy in an unknown state) the first time a
cleaning needs one, and kept until the cleaner stops. They run at nice 10 in the batch scheduling class:
when the broker and a cleaning both want a core the broker's event loop goes first, and a cleaning waking
from its throttle does not preempt it. The broker gives a process only plain data
(``CleanJob``: the directory, each source segment's path with the device and inode of the file the plan
holds open, its size and its transaction index entries, the log's config, the aborted transactions, now)
and takes back plain data (``JobResult``: the base offsets of the cleaned segments and of the sources each
one replaces, what was read, written and removed). The broker keeps the plan, the source segments' files
open until the cleaning ends, and the swap on its event loop:

- the process opens each source by path and checks it is the very file the plan held (same device and
  inode, at least the planned size); a source that retention deleted or replaced meanwhile raises
  ``SourceChangedError`` and the cleaning is dropped with nothing written. A source renamed after the
  process opened it is still read whole (the same file), and the swap refuses segments no longer in the log;
- the processes share one abort flag: the broker's stop sets it and each cleaning stops at its next batch
  (its files removed); a cleaning whose broker died (SIGKILL) stops the same way, and an idle process ends
  within a second of its broker;
- the processes share the throttle's state (rate, window start, bytes in the window), so all of them
  together keep to the configured rate, and a reconfigured rate applies at once;
- a process that dies (killed, out of memory) leaves files only of its own cleaning: the broker removes
  every ``.cleaned``, ``.swap`` and ``.swap-end`` file of the log at the sources' base offsets (no other
  cleaning of that log runs meanwhile) and starts new processes for the next cleaning.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rill.log.cleaner_offset_map import OffsetMap
from rill.log.log_cleaner import CleanPlan, CleanResult, SourceSegment, Throttler, clean, discard
from rill.log.log_config import LogConfig
from rill.log.log_segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_END_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    SegmentFile,
    segment_file_name,
)
from rill.log.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn

_CONTEXT = multiprocessing.get_context("spawn")


class SourceChangedError(Exception):
    """A planned source segment is no longer the file the plan held open."""


class CleanerProcessDiedError(OSError):
    """The process running a cleaning ended without an answer."""


@dataclass(frozen=True, slots=True)
class SourceFile:
    path: str
    device: int
    inode: int
    size: int
    base_offset: int
    end_offset: int
    index_entries: int
    txns: tuple[AbortedTxn, ...]


@dataclass(frozen=True, slots=True)
class CleanJob:
    dir: str
    config: LogConfig
    first_dirty: int
    end: int
    now_ms: int
    producer_last: dict[int, int]
    aborted: dict[int, list[tuple[int, int]]]
    sources: tuple[SourceFile, ...]
    map_slots: int


@dataclass(frozen=True, slots=True)
class JobResult:
    groups: list[list[int]]  # for each cleaned segment, the base offsets of the sources it replaces
    map_end: int
    bytes_read: int
    bytes_written: int
    records_read: int
    records_removed: int
    map_utilization: float
    seconds: float


def make_job(plan: CleanPlan, map_slots: int) -> CleanJob:
    """The plain data a process needs for one cleaning of ``plan`` (blocking: fstat of each source)."""
    sources = []
    for s in plan.sources:
        st = os.fstat(s.file.fd)
        sources.append(
            SourceFile(str(plan.dir / s.name), st.st_dev, st.st_ino, s.size, s.base_offset, s.end_offset,
                       s.index_entries, tuple(s.txns))
        )  # fmt: skip
    return CleanJob(str(plan.dir), plan.config, plan.first_dirty, plan.end, plan.now_ms, dict(plan.producer_last),
                    {pid: list(r) for pid, r in plan.aborted.items()}, tuple(sources), map_slots)  # fmt: skip


def open_result(plan: CleanPlan, job: JobResult) -> CleanResult:
    """The cleaning's result in the broker: the ``.cleaned`` segments the process wrote, opened (blocking).
    On any error every one of them is removed."""
    by_base = {s.base_offset: s for s in plan.sources}
    groups = [[by_base[b] for b in g] for g in job.groups]
    result = CleanResult(plan, groups, [], job.map_end, job.bytes_read, job.bytes_written, job.records_read,
                         job.records_removed, job.map_utilization, job.seconds)  # fmt: skip
    config = plan.config
    try:
        for group in job.groups:
            seg = LogSegment(
                plan.dir, group[0], index_interval_bytes=config.index_interval_bytes,
                max_index_size=config.segment_index_bytes, now_ms=plan.now_ms, roll_jitter_ms=0, active=False,
                suffix=CLEANED_SUFFIX,
            )  # fmt: skip
            result.cleaned.append(seg)
            if not seg.load():
                raise OSError(f"the cleaned segment {seg.log_path.name} does not load")
    except BaseException:
        discard(result.cleaned)
        remove_leftovers(plan)
        raise
    return result


def remove_leftovers(plan: CleanPlan) -> None:
    """Remove what a cleaning of ``plan`` may have left in the log's directory (its process died)."""
    for s in plan.sources:
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            for state in (CLEANED_SUFFIX, SWAP_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(plan.dir / (segment_file_name(s.base_offset, suffix) + state))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(plan.dir / (segment_file_name(s.base_offset, LOG_SUFFIX) + SWAP_END_SUFFIX))


_RATE, _WINDOW_START, _WINDOW_BYTES, _ABORT = range(4)  # the shared state: doubles, written without a lock


class ProcessAbort(threading.Event):
    """A cleaning process's abort check (``is_set``, at every batch): the broker set the shared flag, or the
    broker is gone (the process is no longer its child)."""

    def __init__(self, shared: Any, parent: int) -> None:
        super().__init__()
        self._shared = shared
        self._parent = parent

    def is_set(self) -> bool:
        return self._shared[_ABORT] != 0.0 or os.getppid() != self._parent


class SharedThrottler(Throttler):
    """The Throttler's window in memory shared by the processes (rate, window start, bytes), so they keep to
    one rate together. No lock: a process killed while holding one would stop the others (two processes
    throttling at the same instant may each miss the other's last bytes). A wait ends early when the
    cleaning is aborted (it then stops at its next batch)."""

    def __init__(self, shared: Any, abort: ProcessAbort) -> None:
        super().__init__(shared[_RATE])
        self._shared = shared
        self._abort = abort

    def maybe_throttle(self, n: int) -> None:
        shared = self._shared
        rate = shared[_RATE]
        if rate <= 0 or rate >= 1e300:
            return
        done = shared[_WINDOW_BYTES] + n
        now = time.monotonic()
        elapsed = now - shared[_WINDOW_START]
        wait = done / rate - elapsed
        if elapsed > 1.0 and wait <= 0:
            shared[_WINDOW_START], done = now, 0.0
        shared[_WINDOW_BYTES] = done
        until = now + wait
        while wait > 0 and not self._abort.is_set():
            time.sleep(min(wait, 0.05))
            wait = until - time.monotonic()


# ---- in a cleaning process ------------------------------------------------------------------------

_abort: ProcessAbort | None = None
_throttler: SharedThrottler | None = None
_offset_map: OffsetMap | None = None


def _init_process(shared: Any, parent: int) -> None:
    """Set up a cleaning process of the broker whose pid is ``parent`` (passed, not asked: the broker may
    already be gone when the process starts)."""
    global _abort, _throttler
    # background work: the scheduler's batch class (no preempting the broker when a throttled wait ends)
    # and a lower priority, so the broker's event loop runs first when both want the CPU
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    with contextlib.suppress(OSError):
        os.nice(10)
    _abort = ProcessAbort(shared, parent)
    _throttler = SharedThrottler(shared, _abort)
    threading.Thread(target=_exit_with, args=(parent,), name="parent-watch", daemon=True).start()


def _exit_with(parent: int) -> None:
    """End this process once the broker is gone (a cleaning under way stops at its next batch first)."""
    while os.getppid() == parent:
        time.sleep(0.5)
    time.sleep(0.5)
    os._exit(1)


def _open_source(s: SourceFile) -> SourceSegment:
    name = os.path.basename(s.path)
    try:
        fd = os.open(s.path, os.O_RDONLY)
    except FileNotFoundError:
        raise SourceChangedError(f"{name} is no longer there") from None
    file = SegmentFile(fd)
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (s.device, s.inode) or st.st_size < s.size:
        raise SourceChangedError(f"{name} is no longer the planned file")
    return SourceSegment(None, file, s.size, s.base_offset, s.end_offset, s.index_entries, name, list(s.txns))


def run_job(job: CleanJob) -> JobResult | None:
    """One cleaning, in a cleaning process: the map and the ``.swap`` files (see rill.log.log_cleaner.clean)."""
    global _offset_map
    sources = [_open_source(s) for s in job.sources]
    plan = CleanPlan(None, Path(job.dir), job.config, job.first_dirty, job.end, sources, job.now_ms,
                     job.producer_last, job.aborted)  # fmt: skip
    if _offset_map is None or _offset_map.slots != job.map_slots:
        _offset_map = None
        _offset_map = OffsetMap(job.map_slots)
    try:
        result = clean(plan, _offset_map, _throttler, _abort)
    finally:
        _offset_map.clear()
    if result is None:
        return None
    for seg in result.cleaned:
        seg.close()
    return JobResult([[s.base_offset for s in g] for g in result.groups], result.map_end, result.bytes_read,
                     result.bytes_written, result.records_read, result.records_removed, result.map_utilization,
                     result.seconds)  # fmt: skip


# ---- in the broker --------------------------------------------------------------------------------


class CleanerPool:
    """The cleaning processes of one LogCleaner, started at the first cleaning (thread safe)."""

    def __init__(self, rate: float) -> None:
        self._lock = threading.Lock()
        self._rate = rate
        self._executor: ProcessPoolExecutor | None = None
        self._size = 0
        self._aborted = False
        self._shared: Any = None

    def set_rate(self, rate: float) -> None:
        with self._lock:
            self._rate = rate
            if self._shared is not None:
                self._shared[_RATE] = rate

    def abort(self) -> None:
        self._set_abort(True)

    def resume(self) -> None:
        self._set_abort(False)

    def _set_abort(self, aborted: bool) -> None:
        with self._lock:
            self._aborted = aborted
            if self._shared is not None:
                self._shared[_ABORT] = 1.0 if aborted else 0.0

    def _executor_for(self, workers: int) -> ProcessPoolExecutor:
        with self._lock:
            if self._shared is None:
                self._shared = _CONTEXT.RawArray("d", [self._rate, time.monotonic(), 0.0, float(self._aborted)])
            if self._executor is None or self._size < workers:
                if self._executor is not None:
                    self._executor.shutdown(wait=False)  # its cleanings go on to their end
                self._executor = ProcessPoolExecutor(
                    workers, mp_context=_CONTEXT, initializer=_init_process, initargs=(self._shared, os.getpid())
                )
                self._size = workers
            return self._executor

    def clean(self, plan: CleanPlan, map_slots: int, workers: int) -> CleanResult | None:
        """One cleaning of ``plan`` in a process (blocking: a worker thread waits for it)."""
        job = make_job(plan, map_slots)
        executor = self._executor_for(workers)
        try:
            done = executor.submit(run_job, job).result()
        except BrokenProcessPool as e:
            with self._lock:
                if self._executor is executor:
                    self._executor = None
            remove_leftovers(plan)
            raise CleanerProcessDiedError(f"the cleaning process ended: {e}") from None
        return None if done is None else open_result(plan, done)

    def shutdown(self) -> None:
        """Let the processes end (after their current cleaning, which the abort event stops)."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
