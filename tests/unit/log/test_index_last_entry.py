"""The indexes cache their last entry; truncation, reset and reopening must never leave it stale."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from rill.log.offset_index import OffsetIndex
from rill.log.time_index import TimeIndex


def test_offset_index_last_entry_follows_appends_and_truncation(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 100, 4096, True)
    assert idx.last_offset == 100 and idx.last_values() is None
    for i in range(1, 6):
        idx.append(100 + 10 * i, 1000 * i)
    idx.append(120, 99_999)  # not above the last offset: ignored
    assert idx.last_offset == 150 and idx.entries == 5
    idx.truncate_to(125)
    assert idx.entries == 2 and idx.last_offset == 120
    idx.append(121, 2500)  # above the new last entry: accepted again
    assert idx.entries == 3 and idx.lookup(121) == (121, 2500)
    idx.reset()
    assert idx.entries == 0 and idx.last_offset == 100
    idx.append(105, 10)
    idx.close()
    again = OffsetIndex(tmp_path / "0.index", 100, 4096, True)
    assert again.entries == 1 and again.last_offset == 105
    again.append(105, 20)
    again.append(107, 30)
    assert again.entries == 2
    again.close()


def test_time_index_last_entry_follows_appends_and_truncation(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "0.timeindex", 0, 4096, True)
    assert idx.last_entry() is None
    idx.maybe_append(1000, 5)
    idx.maybe_append(1000, 6)  # same timestamp: ignored
    idx.maybe_append(2000, 9)
    assert idx.last_entry() == (2000, 9) and idx.entries == 2
    idx.truncate_to(9)
    assert idx.last_entry() == (1000, 5)
    idx.maybe_append(1500, 7)
    assert idx.last_entry() == (1500, 7) and idx.entries == 2
    idx.close()


@pytest.mark.parametrize("kind", [OffsetIndex, TimeIndex])
def test_an_untrimmed_index_reopens_without_reading_its_holes(tmp_path: Path, kind: type) -> None:
    """After a crash the active segment's index is still preallocated (10 MiB, sparse past the blocks
    reserved for its entries). Reopening finds the entries inside the reserved blocks: probing the
    holes through the map cost a page fault each (and the zeroed pages read ahead around it): a
    restart after SIGKILL with 1,000 partitions took over 30 s, 1.5 s without."""
    path = tmp_path / "0.index"
    idx = kind(path, 0, 10 * 1024 * 1024, True)
    count = 3000  # past the first reserved chunk
    for i in range(1, count + 1):
        if kind is OffsetIndex:
            idx.append(i, i * 100)
        else:
            idx.maybe_append(1_000 + i, i)
    assert path.stat().st_size >= 10 * 1024 * 1024 - idx.entry_size
    idx._unmap()  # the process dies: no trim
    # This thread's faults only: threads other tests left behind (clients, pools) fault pages of their own.
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    again = kind(path, 0, 10 * 1024 * 1024, True)
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - faults
    assert again.entries == count
    # 1 fault here (the first page); probing the holes took 6 (offset index) and 11 (time index),
    # each fault mapping a freshly zeroed page cache page and its read-ahead neighbours
    assert faults <= 3, f"{faults} page faults to reopen the index"
    again.close()


@pytest.mark.parametrize("trimmed", [True, False])
def test_a_time_index_entry_for_timestamp_zero_at_the_base_offset_survives_a_reopen(
    tmp_path: Path, trimmed: bool
) -> None:
    """(0, base offset) is stored as twelve zero bytes, like an unused slot; Kafka keeps it, and so must we:
    trimmed (a rolled segment, a clean close) or not (the active segment after a crash, with later entries)."""
    path = tmp_path / "0.timeindex"
    idx = TimeIndex(path, 500, 4096, True)
    idx.maybe_append(0, 500)
    if not trimmed:
        idx.maybe_append(7, 503)
    else:
        idx.trim()
    expected = idx.all_entries()
    idx.close()
    assert os.path.getsize(path) == (12 if trimmed else 4092 // 12 * 12)
    again = TimeIndex(path, 500, 4096, False)
    assert again.all_entries() == expected
    assert again.lookup(0) == (0, 500) and again.last_entry() == expected[-1]
    again.close()


def test_an_unused_preallocated_time_index_stays_empty(tmp_path: Path) -> None:
    path = tmp_path / "0.timeindex"
    TimeIndex(path, 0, 4096, True).close()  # preallocated, never written: all slots zero
    for writable in (True, False):
        again = TimeIndex(path, 0, 4096, writable)
        assert again.entries == 0 and again.last_entry() is None
        again.close()


def test_a_segment_of_timestamp_zero_keeps_its_time_index_entry_over_a_restart(tmp_path: Path) -> None:
    from tests.unit.log.logtest_util import make_batch, open_log, small_config

    config = small_config(index_interval_bytes=1)
    log = open_log(tmp_path / "t-0", config)
    for n in (1, 2, 2):  # the first batch holds the base offset alone
        log.append(make_batch(n, ts=0, ts_step=0), leader_epoch=0)
    log.roll()
    first = log.segments[0]
    entries = first.time_index.all_entries()
    assert entries[0] == (0, 0)
    end = log.log_end_offset
    log.flush()
    log.close()
    log = open_log(tmp_path / "t-0", config, recovery_point=end, had_clean_shutdown=True)  # loaded, not recovered
    try:
        assert log.segments[0].time_index.all_entries() == entries
    finally:
        log.close()
