"""An ABORT marker whose ``.txnindex`` entry cannot be written (a real full disk: a 512 KiB tmpfs) is refused with
KAFKA_STORAGE_ERROR and changes nothing, as leader and as follower; written later, it is indexed. Accepted
without its entry, read_committed consumers would see the aborted data, and the cleaner would take the aborted
batches for committed ones.

The disk is filled after the segment's first page was written: the marker (a few dozen bytes) still fits in
that page, while the first entry of a ``.txnindex`` needs a page of its own, as in a disk that filled up between
a transaction's data and its marker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from logtest_util import small_config
from test_log_transactions import committed_values

from rill.errors import ErrorCode, KafkaError
from rill.log.log import Log
from rill.log.transaction_index import AbortedTxn, decode_entries
from rill.records.builder import build_batch
from rill.records.record import Record

pytestmark = pytest.mark.timeout(60)


def txn_batch(pid: int) -> bytearray:
    """Two records of the producer's transaction, stamped now (the marker that follows needs no time roll)."""
    now = int(time.time() * 1000)
    records = [Record(0, now, f"p{pid}-{i}".encode(), b"v" * 8) for i in range(2)]
    return bytearray(build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True))


def _fill(tmpfs: Path) -> Path:
    filler = tmpfs / "filler"
    with open(filler, "wb", buffering=0) as f, pytest.raises(OSError):
        while True:
            f.write(bytes(4096))
    return filler


def _index_entries(log: Log) -> list[AbortedTxn]:
    return [e for s in log.segments for e in (decode_entries(s.txn_index.path.read_bytes())
            if s.txn_index.path.exists() else [])]  # fmt: skip


def test_an_abort_marker_that_cannot_be_indexed_is_refused_as_leader(tmpfs: Path) -> None:
    log = Log(tmpfs / "t-0", small_config(segment_bytes=1 << 20))
    try:
        log.append(txn_batch(1), leader_epoch=0)  # producer 1's transaction, offsets 0-1
        log.high_watermark = log.log_end_offset
        filler = _fill(tmpfs)
        leo = log.log_end_offset
        try:
            log.append_txn_marker(1, 0, 0, False, leader_epoch=0)
            refused = None
        except KafkaError as e:
            refused = e.code
        log.high_watermark = log.log_end_offset
        seen = committed_values(log)
        assert seen == [], "a read_committed read returned the aborted transaction's records"
        assert refused == ErrorCode.KAFKA_STORAGE_ERROR
        assert log.log_end_offset == leo and log.has_ongoing_txn(1)
        filler.unlink()  # room again: the coordinator's next try goes through
        info = log.append_txn_marker(1, 0, 0, False, leader_epoch=0)
        log.high_watermark = log.log_end_offset
        assert committed_values(log) == []
        assert _index_entries(log) == [AbortedTxn(1, 0, info.first_offset, info.first_offset + 1)]
    finally:
        log.close()


def test_an_abort_marker_that_cannot_be_indexed_is_refused_as_follower(tmp_path: Path, tmpfs: Path) -> None:
    leader = Log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    follower = Log(tmpfs / "t-0", small_config(segment_bytes=1 << 20))
    try:
        leader.append(txn_batch(1), leader_epoch=0)
        data = leader.read_bytes(0, 1 << 20)
        leader.append_txn_marker(1, 0, 0, False, leader_epoch=0)
        marker = leader.read_bytes(leader.log_end_offset - 1, 1 << 20)
        follower.append_as_follower(data)
        filler = _fill(tmpfs)
        leo = follower.log_end_offset
        try:
            follower.append_as_follower(marker)
            refused = None
        except KafkaError as e:
            refused = e.code
        follower.high_watermark = follower.log_end_offset
        assert committed_values(follower) == [], "a read_committed read returned the aborted transaction's records"
        assert refused == ErrorCode.KAFKA_STORAGE_ERROR
        assert follower.log_end_offset == leo and follower.has_ongoing_txn(1)
        filler.unlink()  # the fetcher fetches the marker again
        follower.append_as_follower(marker)
        follower.high_watermark = follower.log_end_offset
        assert committed_values(follower) == []
        assert _index_entries(follower) == _index_entries(leader) == [AbortedTxn(1, 0, 2, 3)]
    finally:
        leader.close()
        follower.close()
