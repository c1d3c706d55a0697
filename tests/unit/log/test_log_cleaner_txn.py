"""The log cleaner and transactions: it never cleans into an open transaction (the last stable offset bounds it),
keeps every marker, and carries the aborted transactions of the segments it rewrites into the cleaned ones, so
read_committed never shows aborted records, after the swap and after a crash in the middle of one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from logtest_util import small_config
from test_log_transactions import committed_values

from rill.log.cleaner_offset_map import OffsetMap
from rill.log.log import Log
from rill.log.log_cleaner import clean, plan_cleaning
from rill.log.log_config import LogConfig
from rill.log.log_segment import SWAP_SUFFIX
from rill.records.batch import iter_batches
from rill.records.builder import build_batch
from rill.records.record import Record, decode_records_in

pytestmark = pytest.mark.timeout(60)


def _config() -> LogConfig:
    return small_config(cleanup_policy="compact", segment_bytes=700, delete_retention_ms=1000)  # type: ignore[arg-type]


def _write(log: Log, key: str, value: str, pid: int = -1, seq: int = -1) -> int:
    records = [Record(0, 1_700_000_000_000, key.encode(), value.encode())]
    batch = build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=pid >= 0)
    first = log.append(bytearray(batch), leader_epoch=0).first_offset
    log.high_watermark = log.log_end_offset
    return first


def _fill(log: Log) -> tuple[list[bytes], int]:
    """Plain, committed and aborted updates of a few keys over several segments, then an open transaction."""
    seqs = {1: 0, 2: 0}
    for round in range(6):
        for pid, commit in ((1, True), (2, False)):
            for k in range(2):
                _write(log, f"k{k}", f"{'c' if commit else 'a'}{round}", pid, seqs[pid])
                seqs[pid] += 1
            log.append_txn_marker(pid, 0, 0, commit, leader_epoch=0)
            log.high_watermark = log.log_end_offset
        _write(log, f"plain{round % 2}", f"p{round}")
    open_first = _write(log, "k0", "open", 1, seqs[1])
    for i in range(6):
        _write(log, f"after{i % 2}", f"x{i}")  # segments roll past the open transaction
    return committed_values(log), open_first


def test_cleaning_keeps_aborted_records_hidden_and_stops_at_the_open_transaction(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", _config())
    _, open_first = _fill(log)
    before = committed_values(log, values=True)
    assert log.last_stable_offset == open_first
    assert sum(len(s.txn_index.entries) for s in log.segments) == 6
    plan = plan_cleaning(log, 0, 1_700_000_100_000)
    assert plan is not None and plan.end <= open_first
    result = clean(plan, OffsetMap(1000))
    assert result is not None
    assert log.replace_segments([s.segment for g in result.groups for s in g], result.cleaned)
    assert latest(committed_values(log, values=True)) == latest(before)  # the same table for a read_committed consumer
    assert not any(v.startswith(b"a") for _, v in committed_values(log, values=True))
    # every aborted record below the cleaning's end is gone; the markers and index entries stay
    records = decode_records_in(log.read_bytes(0, 1 << 20, max_offset=result.map_end))
    assert not any((r.value or b"").startswith(b"a") for r in records)
    assert sum(len(s.txn_index.entries) for s in log.segments) == 6
    log.close()


def latest(pairs: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    return dict(pairs)


def test_a_crash_mid_swap_completes_with_the_aborted_transactions(tmp_path: Path) -> None:
    config = _config()
    log = Log(tmp_path / "t-0", config)
    _fill(log)
    leo, hw = log.log_end_offset, log.high_watermark
    plan = plan_cleaning(log, 0, 1_700_000_100_000)
    assert plan is not None
    result = clean(plan, OffsetMap(1000))
    assert result is not None
    assert any(n.endswith(".txnindex.cleaned") for n in os.listdir(log.dir))
    for seg in result.cleaned:  # the swap's first step, then the crash
        seg.rename_suffix(SWAP_SUFFIX)
        seg.close()
    assert any(n.endswith(".txnindex.swap") for n in os.listdir(log.dir))
    log.close(clean=False)
    log = Log(tmp_path / "t-0", config, recovery_point=leo, high_watermark=hw, had_clean_shutdown=True)
    assert not any(n.endswith((".swap", ".cleaned")) for n in os.listdir(log.dir))
    assert not any(v.startswith(b"a") for _, v in committed_values(log, values=True))
    # the same as when the swap completes on the loop
    other = Log(tmp_path / "u-0", config)
    _fill(other)
    plan = plan_cleaning(other, 0, 1_700_000_100_000)
    assert plan is not None
    result = clean(plan, OffsetMap(1000))
    assert result is not None
    assert other.replace_segments([s.segment for g in result.groups for s in g], result.cleaned)
    assert latest(committed_values(log, values=True)) == latest(committed_values(other, values=True))
    other.close()
    log.close()


def _clean_once(log: Log, now_ms: int) -> None:
    plan = plan_cleaning(log, 0, now_ms)
    assert plan is not None
    result = clean(plan, OffsetMap(1000))
    assert result is not None
    assert log.replace_segments([s.segment for g in result.groups for s in g], result.cleaned, now_ms=now_ms)


def _markers(log: Log, below: int) -> list[tuple[int, int, bool]]:
    """(offset, producer id, has a delete horizon) of the markers below ``below``."""
    data = log.read_bytes(0, 1 << 20, max_offset=below)
    return [(h.base_offset, h.producer_id, bool(h.attributes & 0x40)) for _, h in iter_batches(data) if h.is_control
            and h.records_count]  # fmt: skip


def test_markers_go_once_their_transaction_is_cleaned_away_and_delete_retention_passed(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", _config())
    now = 1_700_000_100_000
    _write(log, "k0", "c", 1, 0)
    commit_at = log.append_txn_marker(1, 0, 0, True, leader_epoch=0).first_offset
    _write(log, "k1", "a", 2, 0)
    abort_at = log.append_txn_marker(2, 0, 0, False, leader_epoch=0).first_offset
    _write(log, "k0", "plain")  # supersedes the committed record
    _write(log, "k1", "plain")
    _write(log, "x", "1", 1, 1)  # each producer's last batch lies after (and is kept)
    log.append_txn_marker(1, 0, 0, True, leader_epoch=0)
    _write(log, "y", "1", 2, 1)
    log.append_txn_marker(2, 0, 0, True, leader_epoch=0)
    for i in range(8):
        _write(log, f"filler{i % 2}", str(i))
    log.high_watermark = log.log_end_offset
    end = log.segments[-1].base_offset
    table = latest(committed_values(log, values=True))
    assert table[b"k0"] == b"plain" and table[b"k1"] == b"plain"

    _clean_once(log, now)  # the transactions' batches are read (and removed): their markers stay
    assert [(o, p) for o, p, _ in _markers(log, end)][:2] == [(commit_at, 1), (abort_at, 2)]
    assert any(e.last_offset == abort_at for s in log.segments for e in s.txn_index.entries)
    _clean_once(log, now)  # nothing of them is left: the markers get a delete horizon
    assert _markers(log, end)[:2] == [(commit_at, 1, True), (abort_at, 2, True)]
    _clean_once(log, now + 500)  # before the horizon: kept
    assert [o for o, _, _ in _markers(log, end)][:2] == [commit_at, abort_at]
    _clean_once(log, now + 1000)
    assert commit_at not in [o for o, _, _ in _markers(log, end)] and abort_at not in [
        o for o, _, _ in _markers(log, end)
    ]
    assert not any(e.last_offset == abort_at for s in log.segments for e in s.txn_index.entries)
    assert latest(committed_values(log, values=True)) == table
    log.close()
    log = Log(tmp_path / "t-0", _config(), recovery_point=0)  # replayed from the cleaned log: nothing is open
    assert log.producer_state.ongoing_txns == {}
    log.close()
