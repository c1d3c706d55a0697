"""The log cleaner's processes (rill.log.cleaner_process): a cleaning runs in a process of its own and gives
the same log as one in the calling thread; a source that retention removed meanwhile drops the cleaning with
nothing written; a killed process leaves no file behind and the next cleaning works; the broker's stop ends a
throttled cleaning at once."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
from logtest_util import all_records, small_config

from rill.log.cleaner_offset_map import OffsetMap
from rill.log.cleaner_process import CleanerPool, SourceChangedError
from rill.log.log import Log
from rill.log.log_cleaner import plan_cleaning
from rill.log.log_cleaner_manager import CleanerConfig, LogCleaner
from rill.log.log_config import LogConfig
from rill.records.builder import build_batch
from rill.records.record import Record

pytestmark = pytest.mark.timeout(120)

NOW = (time.time_ns() // 1_000_000) + 10_000


def config() -> LogConfig:
    return small_config(cleanup_policy="compact", segment_bytes=4096, delete_retention_ms=1000)  # type: ignore[arg-type]


def fill(log: Log, batches: int, keys: int = 50) -> None:
    for i in range(batches):
        records = [Record(0, NOW, b"k%d" % ((7 * i + j) % keys), b"v%d-%d" % (i, j)) for j in range(10)]
        log.append(build_batch(records), leader_epoch=0, now_ms=NOW)
    log.high_watermark = log.log_end_offset


def leftovers(log: Log) -> list[str]:
    return sorted(n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap", ".swap-end")))


def test_a_cleaning_in_a_process_gives_the_log_a_cleaning_in_the_thread_gives(tmp_path: Path) -> None:
    logs = []
    for name, processes in (("proc-0", True), ("thread-0", False)):
        log = Log(tmp_path / name, config())
        fill(log, 300)
        cleaner = LogCleaner(CleanerConfig(), processes=processes)
        assert asyncio.run(cleaner.clean_one({log.topic_partition: (log, tmp_path)}, OffsetMap(1000)))
        cleaner.stop()
        logs.append(log)
    proc, thread = logs
    assert [(r.offset, r.key, r.value) for r in all_records(proc)] == [
        (r.offset, r.key, r.value) for r in all_records(thread)
    ]
    assert [s.base_offset for s in proc.segments] == [s.base_offset for s in thread.segments]
    assert [s.size for s in proc.segments] == [s.size for s in thread.segments]
    assert len(all_records(proc)) < 300 * 10 // 2
    assert not leftovers(proc)
    for log in logs:
        log.close()


def test_a_source_removed_by_retention_drops_the_cleaning(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", config())
    fill(log, 300)
    plan = plan_cleaning(log, log.log_start_offset, NOW)
    assert plan is not None and len(plan.sources) > 2
    before = [(r.offset, r.key, r.value) for r in all_records(log)]
    assert log.maybe_increment_log_start_offset(plan.sources[1].base_offset)  # the first source goes
    pool = CleanerPool(1e308)
    try:
        with pytest.raises(SourceChangedError):
            pool.clean(plan, 1000, 1)
    finally:
        pool.shutdown()
    assert not leftovers(log)
    assert [(r.offset, r.key, r.value) for r in all_records(log)] == [
        x for x in before if x[0] >= plan.sources[1].base_offset
    ]
    log.close()


def _cleaning_pid(log: Log, deadline: float, earlier: set[int | None]) -> int:
    """The pid of the cleaning process once it has begun writing ``log``'s cleaned segments (not one of
    ``earlier``: the cleaning processes of an earlier test may still be ending)."""
    while time.monotonic() < deadline:
        children = [c for c in multiprocessing.active_children() if c.pid not in earlier]
        if children and any(n.endswith(".cleaned") for n in os.listdir(log.dir)):
            assert len(children) == 1
            pid = children[0].pid
            assert pid is not None and pid != os.getpid()
            return pid
        time.sleep(0.01)
    raise AssertionError("no cleaning process wrote a cleaned segment")


def test_a_killed_cleaning_process_leaves_nothing_and_the_next_cleaning_works(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", config())
    fill(log, 300)
    before = [(r.offset, r.key, r.value) for r in all_records(log)]
    segments = [s.base_offset for s in log.segments]
    cleaner = LogCleaner(CleanerConfig(io_max_bytes_per_second=100_000))  # about 3 s for this log
    logs = {log.topic_partition: (log, tmp_path)}

    earlier = {c.pid for c in multiprocessing.active_children()}

    async def run() -> bool:
        task = asyncio.ensure_future(cleaner.clean_one(logs, OffsetMap(1000)))
        pid = await asyncio.to_thread(_cleaning_pid, log, time.monotonic() + 30, earlier)
        os.kill(pid, signal.SIGKILL)
        return await task

    try:
        assert not asyncio.run(run())  # tried again after the backoff
        assert not leftovers(log)
        assert not cleaner.uncleanable
        assert [s.base_offset for s in log.segments] == segments
        assert [(r.offset, r.key, r.value) for r in all_records(log)] == before
        cleaner.reconfigure(CleanerConfig())
        assert asyncio.run(cleaner.clean_one(logs, OffsetMap(1000)))
        assert len(all_records(log)) < len(before) // 2
        assert not leftovers(log)
    finally:
        cleaner.stop()
    log.close()


def test_stop_ends_a_throttled_cleaning_in_its_process_at_once(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", config())
    fill(log, 300)
    segments = [s.base_offset for s in log.segments]
    cleaner = LogCleaner(CleanerConfig(io_max_bytes_per_second=50_000))  # about 6 s for this log
    logs = {log.topic_partition: (log, tmp_path)}

    earlier = {c.pid for c in multiprocessing.active_children()}

    async def run() -> float:
        task = asyncio.ensure_future(cleaner.clean_one(logs, OffsetMap(1000)))
        await asyncio.to_thread(_cleaning_pid, log, time.monotonic() + 30, earlier)
        started = time.monotonic()
        await asyncio.to_thread(cleaner.stop)
        took = time.monotonic() - started
        assert not await task
        return took

    assert asyncio.run(run()) < 1.0
    assert not leftovers(log)
    assert [s.base_offset for s in log.segments] == segments
    log.close()
