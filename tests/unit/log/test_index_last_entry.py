"""The indexes cache their last entry; truncation, reset and reopening must never leave it stale."""

from __future__ import annotations

from pathlib import Path

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
