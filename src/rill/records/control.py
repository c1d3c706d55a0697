"""Control records: the transaction markers (Kafka's EndTransactionMarker). Pure functions on bytes.

A control batch has the control and transactional attribute bits set (``rill.records.batch``), the
producer's id and epoch, base sequence -1, and one uncompressed record whose key and value are::

    key (4 bytes)                         value (6 bytes)
    offset  size  field                   offset  size  field
         0     2  version  int16  0            0     2  version           int16  0
         2     2  type     int16               2     4  coordinatorEpoch  int32

``type`` is 0 for ABORT and 1 for COMMIT (2 and up name control records that are no transaction
markers, such as the leader-change message, which Rill never writes). A key of a higher version is
read by its first two fields, as Kafka does; a value shorter than six bytes is corrupt.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from rill.errors import ErrorCode, KafkaError
from rill.records.batch import (
    CONTROL_MASK,
    NO_SEQUENCE,
    TRANSACTIONAL_MASK,
    parse_header,
)
from rill.records.builder import pack_batch
from rill.records.record import Buffer, decode_batch_records, encode_record

ABORT = 0
COMMIT = 1
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class EndTxnMarker(NamedTuple):
    """A decoded transaction marker."""

    commit: bool
    coordinator_epoch: int


def encode_control_key(control_type: int) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, control_type)


def decode_control_key(key: Buffer | None) -> int:
    """The control record type of ``key`` (CORRUPT_MESSAGE when it is missing or short)."""
    if key is None or len(key) < _KEY.size:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "control record key shorter than 4 bytes")
    version, control_type = _KEY.unpack_from(key, 0)
    if version < 0:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"control record key version {version}")
    return int(control_type)


def encode_end_txn_marker_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def decode_end_txn_marker(key: Buffer | None, value: Buffer | None) -> EndTxnMarker:
    """The marker in one control record; CORRUPT_MESSAGE when it is no (well-formed) transaction marker."""
    control_type = decode_control_key(key)
    if control_type not in (ABORT, COMMIT):
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"control record type {control_type} is no transaction marker")
    if value is None or len(value) < _VALUE.size:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "transaction marker value shorter than 6 bytes")
    version, coordinator_epoch = _VALUE.unpack_from(value, 0)
    if version < 0:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"transaction marker version {version}")
    return EndTxnMarker(control_type == COMMIT, int(coordinator_epoch))


def build_end_txn_marker_batch(
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    timestamp: int,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A control batch holding one COMMIT or ABORT marker for the producer."""
    raw = bytearray()
    encode_record(
        raw, 0, 0, encode_control_key(COMMIT if commit else ABORT), encode_end_txn_marker_value(coordinator_epoch), []
    )
    return pack_batch(
        bytes(raw),
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=CONTROL_MASK | TRANSACTIONAL_MASK,
        last_offset_delta=0,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        count=1,
    )


def read_end_txn_marker(batch: Buffer) -> EndTxnMarker | None:
    """The marker of a control batch (``batch`` starts at its header); None for a control batch whose
    record is no transaction marker. CORRUPT_MESSAGE for a batch that does not decode."""
    header = parse_header(batch)
    if not header.attributes & CONTROL_MASK:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "not a control batch")
    records = decode_batch_records(batch, verify_crc=False)
    if not records:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "control batch without a record")
    record = records[0]
    control_type = decode_control_key(record.key)
    if control_type not in (ABORT, COMMIT):
        return None
    return decode_end_txn_marker(record.key, record.value)


def marker_or_none(batch: Buffer) -> EndTxnMarker | None:
    """``read_end_txn_marker``, with None for a control batch that does not decode (replay goes on)."""
    try:
        return read_end_txn_marker(batch)
    except KafkaError:
        return None


def describe_control_record(key: Buffer | None, value: Buffer | None) -> str:
    """A one-line description of a control record (for ``rill dump-log``)."""
    try:
        control_type = decode_control_key(key)
    except KafkaError as e:
        return f"control record (undecodable: {e.message})"
    if control_type not in (ABORT, COMMIT):
        return f"control record type {control_type}"
    try:
        marker = decode_end_txn_marker(key, value)
    except KafkaError as e:
        return f"{'COMMIT' if control_type == COMMIT else 'ABORT'} marker (undecodable value: {e.message})"
    return f"endTxnMarker: {'COMMIT' if marker.commit else 'ABORT'} coordinatorEpoch: {marker.coordinator_epoch}"


__all__ = [
    "ABORT",
    "COMMIT",
    "EndTxnMarker",
    "build_end_txn_marker_batch",
    "decode_control_key",
    "decode_end_txn_marker",
    "describe_control_record",
    "encode_control_key",
    "encode_end_txn_marker_value",
    "marker_or_none",
    "read_end_txn_marker",
]
