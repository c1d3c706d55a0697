"""The aborted transaction index (``.txnindex``): Kafka's 34-byte entries, round trips, corrupt files refused and
rebuilt from the log, truncation, and the file following its segment (renamed, deleted)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logtest_util import make_batch, open_log, small_config
from test_log_transactions import txn_batch

from rill.log.transaction_index import (
    ENTRY_SIZE,
    AbortedTxn,
    CorruptIndexError,
    TransactionIndex,
    decode_entries,
    encode_entry,
)

pytestmark = pytest.mark.timeout(60)


def test_entry_layout_is_kafkas() -> None:
    raw = encode_entry(AbortedTxn(0x0102030405060708, 10, 20, 21))
    assert len(raw) == ENTRY_SIZE == 34
    assert raw == struct.pack(">hqqqq", 0, 0x0102030405060708, 10, 20, 21)


_ENTRIES = st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 1000), st.integers(0, 1000), st.integers(-1, 10**6))


@given(st.lists(_ENTRIES, max_size=20))
@settings(max_examples=50, deadline=None)
def test_round_trip(raw: list[tuple[int, int, int, int]]) -> None:
    entries, last = [], 0
    for pid, first, length, lso in raw:
        first = last + first
        last = first + length
        entries.append(AbortedTxn(pid, first, last, lso))
    data = b"".join(map(encode_entry, entries))
    assert decode_entries(data) == entries


def test_file_round_trip_truncate_and_reset(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path)
    assert not path.exists()  # made by the first entry only
    index.append(AbortedTxn(1, 0, 5, 3))  # pid 2 was open from 3
    index.append(AbortedTxn(2, 3, 9, 10))
    index.append(AbortedTxn(1, 10, 12, 13))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(3, 0, 11, 12))  # markers come in offset order
    index.flush()
    assert path.stat().st_size == 3 * ENTRY_SIZE
    again = TransactionIndex(path)
    again.load()
    assert again.entries == index.entries
    assert again.collect_aborted(6, 10) == ([AbortedTxn(2, 3, 9, 10)], True)  # lso 10 reaches the bound
    assert again.collect_aborted(0, 4) == ([AbortedTxn(1, 0, 5, 3), AbortedTxn(2, 3, 9, 10)], True)
    assert again.collect_aborted(13, 20) == ([], False)
    index.truncate_to(9)
    assert index.entries == [AbortedTxn(1, 0, 5, 3)] and path.stat().st_size == ENTRY_SIZE
    index.reset()
    assert index.entries == [] and path.stat().st_size == 0
    index.close()


@pytest.mark.parametrize(
    "data",
    [
        b"\x00" * 33,  # not a whole entry
        struct.pack(">hqqqq", 1, 1, 0, 5, 6),  # unknown version
        struct.pack(">hqqqq", 0, 1, 5, 4, 6),  # last offset before first
        struct.pack(">hqqqq", 0, 1, 0, 9, 10) + struct.pack(">hqqqq", 0, 1, 0, 5, 10),  # going backwards
    ],
)
def test_corrupt_files_are_refused(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(data)
    index = TransactionIndex(path)
    with pytest.raises(CorruptIndexError):
        index.load()
    assert index.entries == []


def _aborting_log(path: Path) -> tuple[object, list[list[AbortedTxn]]]:
    log = open_log(path, small_config(segment_bytes=700))
    for i in range(4):
        log.append(txn_batch(1, 2 * i), leader_epoch=0)
        log.append(make_batch(3, tag=i), leader_epoch=0)
        log.append_txn_marker(1, 0, 0, i % 2 == 0, leader_epoch=0)
    entries = [list(s.txn_index.entries) for s in log.segments]
    assert sum(map(len, entries)) == 2 and log.num_segments > 1
    return log, entries


def test_a_corrupt_index_is_rebuilt_when_the_log_opens(tmp_path: Path) -> None:
    log, entries = _aborting_log(tmp_path / "t-0")
    log.flush()
    log.close()  # type: ignore[attr-defined]
    files = sorted((tmp_path / "t-0").glob("*.txnindex"))
    assert len(files) == 2
    files[0].write_bytes(files[0].read_bytes()[:-3])  # torn entry
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=700), had_clean_shutdown=True)
    assert [list(s.txn_index.entries) for s in log.segments] == entries
    assert files[0].stat().st_size % ENTRY_SIZE == 0
    log.close()


def test_the_index_follows_its_segment(tmp_path: Path) -> None:
    log, _ = _aborting_log(tmp_path / "t-0")
    seg = next(s for s in log.segments if s.txn_index.entries)  # type: ignore[attr-defined]
    path = seg.txn_index.path
    log.truncate_to(seg.base_offset - 1)  # type: ignore[attr-defined]
    deleted = path.with_name(path.name + ".deleted")
    assert not path.exists() and deleted.exists()
    for doomed in log.take_due_deletions(now_ms=2**62):  # type: ignore[attr-defined]
        doomed.delete_files()
    assert not deleted.exists()
    log.close()  # type: ignore[attr-defined]
    log = open_log(tmp_path / "t-1", small_config(segment_bytes=700, file_delete_delay_ms=60_000))
    for i in range(3):
        log.append(txn_batch(1, 2 * i), leader_epoch=0)
        log.append(make_batch(8, tag=i), leader_epoch=0)
        log.append_txn_marker(1, 0, 0, False, leader_epoch=0)
    n = next(i for i, s in enumerate(log.segments) if s.txn_index.entries)
    first = log.segments[n]
    log.high_watermark = log.log_end_offset
    log.maybe_increment_log_start_offset(log.segments[n + 1].base_offset)
    assert first.txn_index.path.name.endswith(".txnindex.deleted") and first.txn_index.path.exists()
    for seg in log.take_due_deletions(now_ms=2**62):
        seg.delete_files()
    assert not any((tmp_path / "t-1").glob("*.deleted"))
    log.close()
