"""``rill dump-log`` on real segment, index and snapshot files."""

from __future__ import annotations

from pathlib import Path

import pytest
from logtest_util import make_batch, open_log, small_config

from rill.cli.dump_log import main

pytestmark = pytest.mark.timeout(30)


def test_dump_log_prints_batches_indexes_and_snapshots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, small_config(segment_bytes=600, index_interval_bytes=50))
    for i in range(12):
        log.append(make_batch(2, tag=i, producer_id=3, producer_epoch=1, base_sequence=2 * i), leader_epoch=5)
    log.close()
    assert main([str(d), "--print-data-log"]) == 0
    out = capsys.readouterr().out
    assert "baseOffset: 0 lastOffset: 1 count: 2" in out and "producerId: 3 producerEpoch: 1" in out
    assert "partitionLeaderEpoch: 5" in out and "isvalid: true" in out and "compresscodec: NONE" in out
    assert "| offset: 1 " in out and "key: k0-1" in out
    assert "offset: " in out and "position: " in out and "timestamp: " in out
    assert "producerId: 3 producerEpoch: 1" in out and "lastSequence: 23" in out
    seg = sorted(d.glob("*.log"))[-1]
    with open(seg, "ab") as f:
        f.write(b"\x00" * 70)
    assert main([str(seg)]) == 1
    assert "Found 70 invalid bytes" in capsys.readouterr().out
    junk = tmp_path / "00000000000000000000.log"
    junk.write_bytes(b"not a segment at all, " * 4)
    assert main([str(junk)]) == 1
    assert "Found 88 invalid bytes at position 0 (no record batch at the start" in capsys.readouterr().out
    assert main([str(tmp_path / "missing.log")]) == 1


def test_a_batch_that_fails_its_crc_fails_the_dump(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As the module says: exit 1 for a damaged file, a flipped byte inside a batch included (it exited 0,
    printing ``isvalid: false``); records print as Kafka's tool prints them (null key size -1, the payload)."""
    d = tmp_path / "t-0"
    log = open_log(d, small_config())
    log.append(make_batch(2, tag=0), leader_epoch=0)
    log.append(make_batch(2, tag=1), leader_epoch=0)
    log.close()
    seg = next(d.glob("*.log"))
    assert main([str(seg), "--print-data-log"]) == 0
    out = capsys.readouterr().out
    assert "isTransactional: false isControl: false" in out and "payload: " in out
    data = bytearray(seg.read_bytes())
    data[-3] ^= 0xFF  # inside the second batch's last record
    seg.write_bytes(bytes(data))
    assert main([str(seg), "--print-data-log"]) == 1
    out = capsys.readouterr().out
    assert out.count("isvalid: true") == 1 and out.count("isvalid: false") == 1
    assert "| records not printed: the batch fails its CRC" in out


def test_dump_log_shows_tombstones_and_the_delete_horizon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rill.log.cleaner_offset_map import OffsetMap
    from rill.log.log_cleaner_manager import CleanerConfig, LogCleaner
    from rill.records.builder import build_batch
    from rill.records.record import Record

    d = tmp_path / "t-0"
    log = open_log(d, small_config(cleanup_policy="compact", delete_retention_ms=1000))
    now = 1_800_000_000_000
    log.append(build_batch([Record(0, now, b"a", b"1"), Record(0, now + 5, b"a", None)]), leader_epoch=0)
    log.roll()
    log.append(build_batch([Record(0, now, b"b", b"2")]), leader_epoch=0)
    log.high_watermark = log.log_end_offset
    LogCleaner(CleanerConfig()).clean_now(log, OffsetMap(10), now)
    log.close()
    assert main([str(d), "--print-data-log"]) == 0
    out = capsys.readouterr().out
    assert f"deleteHorizonMs: {now + 1000} " in out
    assert f"| offset: 1 CreateTime: {now + 5} keySize: 1 valueSize: -1 " in out
    assert "key: a payload: null (tombstone)" in out


def test_dump_log_shows_transaction_markers_the_txn_index_and_open_transactions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_log_transactions import txn_batch

    d = tmp_path / "t-0"
    log = open_log(d)
    log.append(txn_batch(7, 0, epoch=2), leader_epoch=1)  # 0-1
    log.append_txn_marker(7, 2, 4, False, leader_epoch=1)  # 2
    log.append(txn_batch(7, 2, epoch=2), leader_epoch=1)
    log.append(txn_batch(8, 0), leader_epoch=1)
    log.append_txn_marker(7, 2, 4, True, leader_epoch=1)
    log.close()  # a snapshot at the log end: producer 8's transaction is open
    assert main([str(d), "--print-data-log"]) == 0
    out = capsys.readouterr().out
    assert "isTransactional: true isControl: true" in out
    assert "keySize: 4 valueSize: 6 endTxnMarker: ABORT coordinatorEpoch: 4" in out
    assert "endTxnMarker: COMMIT coordinatorEpoch: 4" in out
    assert "version: 0 producerId: 7 firstOffset: 0 lastOffset: 2 lastStableOffset: 3" in out
    assert "producerId: 7 producerEpoch: 2 coordinatorEpoch: 4" in out and "currentTxnFirstOffset: -1" in out
    assert "producerId: 8 producerEpoch: 0 coordinatorEpoch: -1" in out and "currentTxnFirstOffset: 5" in out
    torn = next(d.glob("*.txnindex"))
    torn.write_bytes(torn.read_bytes() + b"\x00" * 5)
    assert main([str(torn)]) == 1
    assert "not a multiple of 34" in capsys.readouterr().out
