"""Idempotent producer state: duplicates, gaps, fencing, snapshots and restarts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logtest_util import BASE_TS, make_batch, open_log, small_config

from rill.errors import ErrorCode, KafkaError
from rill.log.producer_state import ProducerStateEntry, ProducerStateManager, read_snapshot, snapshot_offsets
from rill.records.batch import parse_header
from rill.records.builder import build_batch
from rill.records.record import Record

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("append_input_kind")]


def pb(seq: int, n: int = 2, epoch: int = 0, pid: int = 7) -> bytes:
    return make_batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def expect(code: ErrorCode, log: object, data: bytes) -> None:
    with pytest.raises(KafkaError) as e:
        log.append(data, leader_epoch=0)  # type: ignore[attr-defined]
    assert e.value.code == code


def test_duplicates_gaps_and_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p-0")
    assert log.append(pb(0), leader_epoch=0).first_offset == 0
    assert log.append(pb(2), leader_epoch=0).first_offset == 2
    dup = log.append(pb(0), leader_epoch=0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (0, 1)
    assert log.log_end_offset == 4
    expect(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, log, pb(5))
    # the last five batches are remembered
    for seq in range(4, 14, 2):
        log.append(pb(seq), leader_epoch=0)
    assert log.append(pb(6), leader_epoch=0).duplicate
    expect(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, log, pb(2))  # too old to be recognised
    # a new epoch must start at 0; older epochs are fenced
    expect(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, log, pb(14, epoch=1))
    assert not log.append(pb(0, epoch=1), leader_epoch=0).duplicate
    expect(ErrorCode.INVALID_PRODUCER_EPOCH, log, pb(14, epoch=0))
    # an unknown producer is accepted at any sequence
    assert not log.append(pb(1000, pid=99), leader_epoch=0).duplicate
    # several batches of one producer in one append must chain
    assert log.append(pb(2, epoch=1) + pb(4, epoch=1), leader_epoch=0).record_count == 4
    expect(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, log, pb(6, epoch=1) + pb(9, epoch=1))
    leo = log.log_end_offset
    expect(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, log, pb(7, epoch=1))
    assert log.log_end_offset == leo
    # sequence numbers wrap at int32 max
    log.append(pb(2**31 - 2, pid=5), leader_epoch=0)
    assert log.append(pb(0, pid=5), leader_epoch=0).first_offset == log.log_end_offset - 2
    log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_dedup_survives_restart(tmp_path: Path, clean: bool) -> None:
    cfg = small_config(segment_bytes=600)
    log = open_log(tmp_path / "p-0", cfg)
    for i in range(20):
        log.append(pb(2 * i), leader_epoch=0)
    assert log.num_segments > 2 and snapshot_offsets(log.dir)  # snapshots at rolls
    leo = log.log_end_offset
    log.close(clean=clean)
    log = open_log(tmp_path / "p-0", cfg, had_clean_shutdown=clean)
    dup = log.append(pb(38), leader_epoch=0)
    assert dup.duplicate and dup.first_offset == leo - 2
    if not clean:  # replayed batches give back all five
        assert log.append(pb(32), leader_epoch=0).duplicate
    expect(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, log, pb(41))
    assert log.append(pb(40), leader_epoch=0).first_offset == leo
    log.close()


def test_snapshot_format_and_corruption(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p-0")
    log.append(pb(0, n=3, pid=11, epoch=4), leader_epoch=0)
    log.close()
    snaps = snapshot_offsets(tmp_path / "p-0")
    assert snaps == [3]
    path = tmp_path / "p-0" / "00000000000000000003.snapshot"
    entry = read_snapshot(path)[11]
    assert entry.producer_epoch == 4 and entry.last_seq == 2 and entry.last_offset == 2
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    # a corrupt snapshot is dropped and the state rebuilt from the log
    log = open_log(tmp_path / "p-0", had_clean_shutdown=True)
    assert log.append(pb(0, n=3, pid=11, epoch=4), leader_epoch=0).duplicate
    log.close()


def test_truncation_rewinds_producer_state(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p-0")
    for i in range(5):
        log.append(pb(2 * i), leader_epoch=0)
    log.truncate_to(6)
    assert log.append(pb(6), leader_epoch=0).first_offset == 6
    log.close()


_ops = st.lists(
    st.tuples(
        st.sampled_from([7, 8]),  # producer id
        st.integers(0, 2),  # epoch
        st.one_of(st.integers(0, 40), st.just(2**31 - 2)),  # first sequence
        st.integers(1, 4),  # records
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(_ops)
def test_the_single_batch_path_decides_as_the_general_one(ops: list[tuple[int, int, int, int]]) -> None:
    """``check_one``/``append_one`` (one batch in an append, the produce fast path) give the outcome
    and the state of ``prepare``/``record``/``commit`` (any number of batches) on any sequence."""
    single, general = ProducerStateManager(Path("unused")), ProducerStateManager(Path("unused"))
    offset = 0
    for pid, epoch, seq, n in ops:
        header = parse_header(pb(seq, n, epoch, pid))
        outcomes = []
        try:
            dup = single.check_one(header)
            if dup is None:
                single.append_one(header, offset, 5)
            outcomes.append(dup)
        except KafkaError as e:
            outcomes.append(e.code)
        pending: dict[int, ProducerStateEntry] = {}
        try:
            dup = general.prepare(header, pending)
            if dup is None:
                general.record(pending, header, offset, 5)
                general.commit(pending, offset + n)
            outcomes.append(dup)
        except KafkaError as e:
            outcomes.append(e.code)
        assert outcomes[0] == outcomes[1], (pid, epoch, seq, n)
        if outcomes[0] is None:
            offset += n
        assert single.producers == general.producers
        assert single.map_end_offset == general.map_end_offset


def test_idle_producers_expire_but_not_an_open_transaction(tmp_path: Path) -> None:
    """``producer.id.expiration.ms``: producers whose last batch is that old are forgotten (the next snapshot
    leaves them out; a later batch of theirs is taken as one of an unknown producer); one with a transaction
    open here stays, however old."""
    log = open_log(tmp_path / "p-0")
    log.append(make_batch(2, producer_id=1, producer_epoch=0, base_sequence=0, ts=BASE_TS), leader_epoch=0)
    log.append(make_batch(2, producer_id=2, producer_epoch=0, base_sequence=0, ts=BASE_TS + 5000), leader_epoch=0)
    records = [Record(0, BASE_TS, b"t", b"v")]
    txn = build_batch(records, producer_id=3, producer_epoch=0, base_sequence=0, is_transactional=True)
    log.append(txn, leader_epoch=0)
    state = log.producer_state
    assert log.remove_expired_producers(BASE_TS + 5000, 10_000) == 0
    assert log.remove_expired_producers(BASE_TS + 10_001, 10_000) == 1  # producer 1's batch is 10 s old
    assert sorted(state.producers) == [2, 3]
    assert log.remove_expired_producers(BASE_TS + 60_000, 10_000) == 1  # 2 goes; 3's transaction is open
    assert sorted(state.producers) == [3]
    log.roll()  # a snapshot: only the producer still known
    assert sorted(read_snapshot(tmp_path / "p-0" / f"{log.log_end_offset:020d}.snapshot")) == [3]
    # a forgotten producer writes again at any sequence, as one the log does not know
    assert not log.append(make_batch(1, producer_id=1, producer_epoch=0, base_sequence=40), leader_epoch=0).duplicate
    log.append_txn_marker(3, 0, 0, True, leader_epoch=0)  # stamped now
    later = int(time.time() * 1000) + 10_000
    assert log.remove_expired_producers(later, 10_000) == 2  # its transaction ended: 3 goes too, with 1
    log.close()
