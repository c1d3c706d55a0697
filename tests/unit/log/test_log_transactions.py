"""Transactions in one partition log: ongoing transactions, markers, the last stable offset, the aborted
transaction index, read_committed reads, and all of it again after a restart, a crash and a truncation."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, overload

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from logtest_util import make_batch, open_log, small_config

from rill.errors import ErrorCode, KafkaError
from rill.log.log import Log
from rill.log.transaction_index import AbortedTxn, decode_entries
from rill.records.batch import iter_batches
from rill.records.builder import build_batch
from rill.records.control import EndTxnMarker, read_end_txn_marker
from rill.records.record import Record, decode_records_in

pytestmark = pytest.mark.timeout(60)


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0, tag: int = 0) -> bytearray:
    records = [Record(0, 1_700_000_000_000 + i, f"p{pid}-{seq + i}".encode(), bytes([tag]) * 8) for i in range(n)]
    return bytearray(
        build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    )


@overload
def committed_values(log: Log) -> list[bytes]: ...
@overload
def committed_values(log: Log, *, values: Literal[True]) -> list[tuple[bytes, bytes]]: ...
def committed_values(log: Log, *, values: bool = False) -> list[bytes] | list[tuple[bytes, bytes]]:
    """What a read_committed consumer keeps: data below the LSO, minus the aborted transactions' batches."""
    info = log.read_committed(log.log_start_offset, 1 << 20)
    data = b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)
    aborted = sorted((t.first_offset, t.producer_id) for t in info.aborted_transactions or [])
    out: list[bytes] = []
    pairs: list[tuple[bytes, bytes]] = []
    dropping: set[int] = set()
    for pos, h in iter_batches(data):
        for first, pid in aborted:
            if first <= h.base_offset:
                dropping.add(pid)
        aborted = [(f, p) for f, p in aborted if f > h.base_offset]
        if h.is_control:
            dropping.discard(h.producer_id)
            continue
        if h.producer_id in dropping and h.is_transactional:
            continue
        for r in decode_records_in(data[pos : pos + h.size]):
            out.append(r.key or b"")
            pairs.append((r.key or b"", r.value or b""))
    return pairs if values else out


def test_ongoing_transactions_hold_back_the_last_stable_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(make_batch(2), leader_epoch=0)  # plain data, 0-1
    log.append(txn_batch(1, 0), leader_epoch=0)  # pid 1 from 2
    log.append(txn_batch(2, 0), leader_epoch=0)  # pid 2 from 4
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 2
    assert log.has_ongoing_txn(1) and log.has_ongoing_txn(2) and not log.has_ongoing_txn(3)
    info = log.append_txn_marker(1, 0, 0, True, leader_epoch=0)
    assert info.first_offset == 6
    # the commit's marker is not yet below the high watermark: pid 1's transaction still counts
    assert log.last_stable_offset == 2
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 4  # pid 2 is still open
    log.append_txn_marker(2, 0, 0, False, leader_epoch=0)
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == log.high_watermark == 8
    # the abort is in the active segment's index, with the LSO as it was once the marker was written
    entries = [e for s in log.segments for e in s.txn_index.entries]
    assert entries == [AbortedTxn(2, 4, 7, 8)]
    assert committed_values(log) == [b"k0-0", b"k0-1", b"p1-0", b"p1-1"]
    log.close()


def test_marker_fencing_changes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(txn_batch(1, 0, epoch=3), leader_epoch=0)
    log.append_txn_marker(1, 3, 5, True, leader_epoch=0)
    leo = log.log_end_offset
    with pytest.raises(KafkaError) as e:
        log.append_txn_marker(1, 2, 5, True, leader_epoch=0)
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as e:
        log.append_txn_marker(1, 3, 4, False, leader_epoch=0)
    assert e.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert log.log_end_offset == leo
    # a higher epoch bumps the producer: its old epoch is fenced for data too
    log.append_txn_marker(1, 4, 5, False, leader_epoch=0)
    assert log.producer_state.producers[1].producer_epoch == 4
    with pytest.raises(KafkaError) as e:
        log.append(txn_batch(1, 2, epoch=3), leader_epoch=0)
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    # a non-transactional batch while the producer's transaction is open is refused
    log.append(txn_batch(1, 0, epoch=4), leader_epoch=0)
    with pytest.raises(KafkaError) as e:
        log.append(bytearray(make_batch(1, producer_id=1, producer_epoch=4, base_sequence=2)), leader_epoch=0)
    assert e.value.code == ErrorCode.INVALID_TXN_STATE
    log.close()


def test_marker_batches_carry_the_marker(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", small_config(message_timestamp_type="LogAppendTime"))
    log.append(txn_batch(9, 0), leader_epoch=2)
    info = log.append_txn_marker(9, 0, 7, False, leader_epoch=2)
    raw = log.read_bytes(info.first_offset, 1000)
    ((_, h),) = list(iter_batches(raw))
    assert h.is_control and h.is_transactional and h.producer_id == 9 and h.base_offset == info.first_offset
    assert h.partition_leader_epoch == 2 and h.timestamp_type == 1
    assert read_end_txn_marker(raw) == EndTxnMarker(False, 7)
    log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_reopen_keeps_ongoing_transactions_and_the_index(tmp_path: Path, clean: bool) -> None:
    config = small_config(segment_bytes=600)
    log = open_log(tmp_path / "t-0", config)
    log.append(txn_batch(1, 0), leader_epoch=0)
    for i in range(6):
        log.append(make_batch(2, tag=i), leader_epoch=0)  # several segments roll (snapshots taken)
    pid2_first = log.append(txn_batch(2, 0), leader_epoch=0).first_offset
    log.append_txn_marker(1, 0, 0, False, leader_epoch=0)
    pid1_first = log.append(txn_batch(1, 2), leader_epoch=0).first_offset  # pid 1 opens a new transaction
    leo = log.log_end_offset
    assert log.num_segments > 2
    before = [(s.base_offset, list(s.txn_index.entries)) for s in log.segments]
    if clean:
        log.flush()
        log.close()
    else:
        for seg in log.segments:  # a crash: nothing flushed, the indexes of recovered segments go
            seg.close()
        for seg in log.segments:
            seg.txn_index.path.unlink(missing_ok=True)
    log = open_log(tmp_path / "t-0", config, high_watermark=leo, recovery_point=0, had_clean_shutdown=clean)
    assert [(s.base_offset, list(s.txn_index.entries)) for s in log.segments] == before
    assert any(entries for _, entries in before)
    assert log.producer_state.ongoing_txns == {2: pid2_first, 1: pid1_first}
    assert log.last_stable_offset == pid2_first
    log.close()


def test_truncation_drops_index_entries_and_reopens_transactions(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(txn_batch(1, 0), leader_epoch=0)  # 0-1
    log.append_txn_marker(1, 0, 0, False, leader_epoch=0)  # 2
    log.append(txn_batch(1, 2), leader_epoch=0)  # 3-4
    log.append_txn_marker(1, 0, 0, False, leader_epoch=0)  # 5
    assert [e.last_offset for s in log.segments for e in s.txn_index.entries] == [2, 5]
    log.truncate_to(5)
    assert [e.last_offset for s in log.segments for e in s.txn_index.entries] == [2]
    assert log.producer_state.ongoing_txns == {1: 3}
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 3
    # the file holds exactly the remaining entry
    files = [s.txn_index.path for s in log.segments if s.txn_index.path.exists()]
    assert [decode_entries(f.read_bytes()) for f in files] == [[AbortedTxn(1, 0, 2, 3)]]
    log.close()


def test_follower_appends_index_aborts_like_the_leader(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "a-0")
    follower = open_log(tmp_path / "b-0")
    leader.append(txn_batch(1, 0), leader_epoch=0)
    leader.append(txn_batch(2, 0), leader_epoch=0)
    leader.append_txn_marker(1, 0, 0, False, leader_epoch=0)
    leader.append_txn_marker(2, 0, 0, True, leader_epoch=0)
    follower.append_as_follower(leader.read_bytes(0, 1 << 20))
    entries = [e for s in leader.segments for e in s.txn_index.entries]
    assert entries == [AbortedTxn(1, 0, 4, 2)]
    assert [e for s in follower.segments for e in s.txn_index.entries] == entries
    assert follower.producer_state.ongoing_txns == {}
    follower.high_watermark = 5  # the commit's marker (offset 5) not replicated yet
    assert follower.last_stable_offset == 2
    follower.high_watermark = follower.log_end_offset
    assert follower.last_stable_offset == follower.log_end_offset
    leader.close()
    follower.close()


def test_transactional_batches_without_sequence_skip_the_sequence_checks(tmp_path: Path) -> None:
    # the group coordinator's TxnOffsetCommit records: the producer's id and epoch, base sequence -1
    log = open_log(tmp_path / "t-0")
    log.append(txn_batch(4, 0, epoch=2), leader_epoch=0)
    log.append_txn_marker(4, 2, 0, True, leader_epoch=0)
    first = log.append(txn_batch(4, -1, epoch=2), leader_epoch=0).first_offset
    log.append(txn_batch(4, -1, epoch=2), leader_epoch=0)
    assert log.producer_state.ongoing_txns == {4: first}
    log.append_txn_marker(4, 2, 0, False, leader_epoch=0)
    assert [e for s in log.segments for e in s.txn_index.entries][-1][:3] == (4, first, first + 4)
    # the producer's sequences go on where they were
    with pytest.raises(KafkaError) as e:
        log.append(txn_batch(4, 5, epoch=2), leader_epoch=0)
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    log.append(txn_batch(4, 2, epoch=2), leader_epoch=0)
    log.close()


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("data"), st.integers(1, 3), st.just(True)),
        st.tuples(st.just("txn"), st.integers(1, 3), st.booleans()),
        st.tuples(st.just("end"), st.integers(1, 3), st.booleans()),
    ),
    max_size=40,
)


@given(ops=_OPS, reopen=st.sampled_from(["clean", "crash", "none"]))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_read_committed_matches_a_model(tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, bool]],
                                        reopen: str) -> None:  # fmt: skip
    """Random data, transactional writes and markers of three producers: read_committed returns exactly the
    records of committed transactions and plain data below the last stable offset (the first offset of an open
    transaction), before and after the log is opened again (after a clean close, or a crash that lost every
    transaction index)."""
    dir = tmp_path_factory.mktemp("model") / "t-0"
    config = small_config(segment_bytes=900)
    log = open_log(dir, config)
    seqs = {1: 0, 2: 0, 3: 0}
    open_keys: dict[int, list[tuple[int, bytes]]] = {}
    open_first: dict[int, int] = {}
    visible: list[tuple[int, bytes]] = []  # (offset, key) of records a committed reader may see
    plain = 0
    for kind, pid, flag in ops:
        if kind == "data":
            first = log.append(make_batch(1, tag=plain), leader_epoch=0).first_offset
            visible.append((first, b"k%d-0" % plain))
            plain += 1
        elif kind == "txn":
            first = log.append(txn_batch(pid, seqs[pid], n=2), leader_epoch=0).first_offset
            keys = [b"p%d-%d" % (pid, seqs[pid] + i) for i in range(2)]
            seqs[pid] += 2
            open_keys.setdefault(pid, [])
            open_first.setdefault(pid, first)
            open_keys[pid] += [(first + i, k) for i, k in enumerate(keys)]
        else:
            log.append_txn_marker(pid, 0, 0, flag, leader_epoch=0)
            if flag:
                visible += open_keys.get(pid, [])
            open_keys.pop(pid, None)
            open_first.pop(pid, None)
        log.high_watermark = log.log_end_offset

    def check(log: Log) -> None:
        lso = min(open_first.values(), default=log.log_end_offset)
        assert log.last_stable_offset == lso
        assert committed_values(log) == [k for o, k in sorted(visible) if o < lso]

    check(log)
    leo = log.log_end_offset
    if reopen == "none":
        log.close()
        return
    if reopen == "clean":
        log.close()
    else:
        for seg in log.segments:
            seg.close()
            seg.txn_index.path.unlink(missing_ok=True)
    log = open_log(dir, config, high_watermark=leo, recovery_point=0, had_clean_shutdown=reopen == "clean")
    check(log)
    log.close()


def test_retention_and_delete_records_keep_kafkas_bounds(tmp_path: Path) -> None:
    """Retention and DeleteRecords are bounded by the high watermark, not the last stable offset (Kafka's rule):
    a transaction open from below the new log start holds the last stable offset at the log start."""
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=600, retention_bytes=700))
    first = log.append(txn_batch(1, 0), leader_epoch=0).first_offset
    for i in range(12):
        log.append(make_batch(3, tag=i), leader_epoch=0)
    hw = log.segments[2].base_offset
    log.high_watermark = hw
    assert log.last_stable_offset == first == 0
    assert log.delete_old_segments() == 2
    assert log.log_start_offset == hw  # the high watermark bounds retention, the open transaction does not
    assert log.last_stable_offset == log.log_start_offset
    assert log.read_committed(log.log_start_offset, 1 << 20).size == 0
    with pytest.raises(KafkaError):
        log.maybe_increment_log_start_offset(log.high_watermark + 1)
    log.high_watermark = log.log_end_offset
    log.maybe_increment_log_start_offset(log.log_end_offset - 2)
    assert log.last_stable_offset == log.log_start_offset == log.log_end_offset - 2
    # the abort ends it; the index entry names the transaction's first offset, below the log start
    log.append_txn_marker(1, 0, 0, False, leader_epoch=0)
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == log.log_end_offset
    info = log.read_committed(log.log_start_offset, 1 << 20)
    assert [(t.producer_id, t.first_offset) for t in info.aborted_transactions or []] == [(1, 0)]
    log.close()
