"""Transaction markers (control records): the bytes Kafka writes, round trips, and what is refused."""

from __future__ import annotations

import pytest

from rill.errors import ErrorCode, KafkaError
from rill.records.batch import CONTROL_MASK, NO_SEQUENCE, TRANSACTIONAL_MASK, crc_ok, parse_header
from rill.records.builder import build_batch, pack_batch
from rill.records.control import (
    ABORT,
    COMMIT,
    EndTxnMarker,
    build_end_txn_marker_batch,
    decode_control_key,
    decode_end_txn_marker,
    describe_control_record,
    encode_control_key,
    encode_end_txn_marker_value,
    marker_or_none,
    read_end_txn_marker,
)
from rill.records.record import Record, decode_batch_records, decode_records_in, encode_record


def test_key_and_value_bytes_are_kafkas() -> None:
    assert encode_control_key(ABORT) == b"\x00\x00\x00\x00"
    assert encode_control_key(COMMIT) == b"\x00\x00\x00\x01"
    assert encode_end_txn_marker_value(7) == b"\x00\x00\x00\x00\x00\x07"
    assert encode_end_txn_marker_value(-1) == b"\x00\x00\xff\xff\xff\xff"


@pytest.mark.parametrize("commit", [True, False])
@pytest.mark.parametrize("coordinator_epoch", [0, 5, 2**31 - 1])
def test_marker_batch_round_trip(commit: bool, coordinator_epoch: int) -> None:
    batch = build_end_txn_marker_batch(42, 3, coordinator_epoch, commit, 1_700_000_000_123, base_offset=10)
    h = parse_header(batch)
    assert h.attributes & CONTROL_MASK and h.attributes & TRANSACTIONAL_MASK
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (42, 3, NO_SEQUENCE, 1)
    assert (h.base_offset, h.max_timestamp) == (10, 1_700_000_000_123)
    assert crc_ok(batch, 0, h)
    assert read_end_txn_marker(batch) == EndTxnMarker(commit, coordinator_epoch)
    (record,) = decode_batch_records(batch)
    assert decode_control_key(record.key) == (COMMIT if commit else ABORT)
    assert decode_end_txn_marker(record.key, record.value) == EndTxnMarker(commit, coordinator_epoch)
    # readers of data skip control batches unless asked
    assert decode_records_in(batch) == []
    assert len(decode_records_in(batch, include_control=True)) == 1
    text = describe_control_record(record.key, record.value)
    assert ("COMMIT" if commit else "ABORT") in text and f"coordinatorEpoch: {coordinator_epoch}" in text


def test_a_higher_key_version_is_read_by_its_first_fields() -> None:
    key = b"\x00\x01\x00\x01" + b"extra"
    assert decode_control_key(key) == COMMIT
    assert decode_end_txn_marker(key, b"\x00\x01\x00\x00\x00\x09tail") == EndTxnMarker(True, 9)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, b"\x00\x00\x00\x00\x00\x01"),
        (b"\x00\x00\x00", b"\x00\x00\x00\x00\x00\x01"),  # short key
        (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x01"),  # negative version
        (b"\x00\x00\x00\x02", b"\x00\x00\x00\x00\x00\x01"),  # not a transaction marker
        (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00"),  # short value
        (b"\x00\x00\x00\x01", None),
    ],
)
def test_malformed_markers_are_corrupt(key: bytes | None, value: bytes | None) -> None:
    with pytest.raises(KafkaError) as e:
        decode_end_txn_marker(key, value)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    assert "control record" in describe_control_record(key, value) or "undecodable" in describe_control_record(
        key, value
    )


def test_read_end_txn_marker_refuses_data_batches_and_tolerant_reader_returns_none() -> None:
    data = build_batch([Record(0, 1, b"k", b"v")], producer_id=1, producer_epoch=0, base_sequence=0)
    with pytest.raises(KafkaError):
        read_end_txn_marker(data)
    assert marker_or_none(data) is None
    raw = bytearray()
    encode_record(raw, 0, 0, encode_control_key(COMMIT), b"\x00", [])  # a value too short for a marker
    short = pack_batch(
        bytes(raw), base_offset=0, partition_leader_epoch=-1, attributes=CONTROL_MASK | TRANSACTIONAL_MASK,
        last_offset_delta=0, base_timestamp=5, max_timestamp=5, producer_id=1, producer_epoch=0,
        base_sequence=NO_SEQUENCE, count=1,
    )  # fmt: skip
    assert marker_or_none(short) is None
    assert marker_or_none(build_end_txn_marker_batch(1, 0, 0, False, 5)) == EndTxnMarker(False, 0)
