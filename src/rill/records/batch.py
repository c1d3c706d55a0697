"""Record batch v2 (magic 2) header: parse, validate and patch in place. Pure functions on bytes.

Byte layout of a batch (all integers big-endian), 61 header bytes then the records::

    offset  size  field
         0     8  baseOffset            int64   offset of the first record
         8     4  batchLength           int32   bytes after this field (whole batch = batchLength + 12)
        12     4  partitionLeaderEpoch  int32   stamped by the leader on append
        16     1  magic                 int8    2
        17     4  crc                   uint32  CRC32C of bytes 21 .. end of batch
        21     2  attributes            int16   bits 0-2 compression (0 none, 1 gzip, 2 snappy, 3 lz4,
                                                4 zstd), bit 3 timestamp type (1 = LogAppendTime),
                                                bit 4 transactional, bit 5 control
        23     4  lastOffsetDelta       int32   last record's offset minus baseOffset
        27     8  baseTimestamp         int64
        35     8  maxTimestamp          int64
        43     8  producerId            int64   -1 when not idempotent
        51     2  producerEpoch         int16
        53     4  baseSequence          int32
        57     4  recordsCount          int32
        61     .  records (possibly compressed)

``baseOffset`` and ``partitionLeaderEpoch`` lie outside the CRC, so the broker can assign
offsets and stamp the epoch without recomputing it. Switching to LogAppendTime touches
``attributes`` and ``maxTimestamp`` and therefore rewrites the CRC.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from crc32c_rs import crc32c

from rill.errors import ErrorCode, KafkaError

BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
MAGIC_V2 = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

BASE_OFFSET_POS = 0
LENGTH_POS = 8
PARTITION_LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
LAST_OFFSET_DELTA_POS = 23
BASE_TIMESTAMP_POS = 27
MAX_TIMESTAMP_POS = 35
PRODUCER_ID_POS = 43
RECORDS_COUNT_POS = 57

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
assert HEADER_STRUCT.size == BATCH_HEADER_SIZE
_HEADER = HEADER_STRUCT
_PREFIX = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")

Buffer = bytes | bytearray | memoryview


class CorruptRecordError(KafkaError):
    """A batch whose framing, magic or checksum is wrong."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.CORRUPT_MESSAGE, message)


class BatchHeader(NamedTuple):
    """The decoded 61-byte header (a named tuple: built on every append, so it must be cheap)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return TIMESTAMP_LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else TIMESTAMP_CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping at int32 max like Kafka's producer does."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def increment_sequence(sequence: int, increment: int) -> int:
    """Sequence numbers wrap from 2**31 - 1 back to 0."""
    if sequence > 0x7FFFFFFF - increment:
        return increment - (0x7FFFFFFF - sequence) - 1
    return sequence + increment


def parse_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Decode the 61-byte header at ``pos``. Raises CorruptRecordError when fewer bytes remain."""
    if len(buf) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordError(f"record batch header truncated at position {pos}")
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def check_framing(buf: Buffer, pos: int, header: BatchHeader) -> None:
    """Raise CorruptRecordError / UNSUPPORTED_FOR_MESSAGE_FORMAT unless the batch at pos fits and is v2."""
    if header.magic != MAGIC_V2:
        raise KafkaError(
            ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
            f"record batch at position {pos} has magic {header.magic}; only magic 2 is supported",
        )
    if header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"record batch at position {pos} has invalid length {header.batch_length}")
    if pos + header.size > len(buf):
        raise CorruptRecordError(
            f"record batch at position {pos} claims {header.size} bytes but only {len(buf) - pos} remain"
        )
    if header.last_offset_delta < 0:
        raise CorruptRecordError(f"record batch at position {pos} has negative lastOffsetDelta")


def iter_batches(buf: Buffer) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch in ``buf``; the batches must fill it exactly."""
    pos = 0
    end = len(buf)
    while pos < end:
        header = parse_header(buf, pos)
        check_framing(buf, pos, header)
        yield pos, header
        pos += header.size


def compute_crc(buf: Buffer, pos: int, header: BatchHeader) -> int:
    view = memoryview(buf)[pos + ATTRIBUTES_POS : pos + header.size]
    return int(crc32c(view))


def crc_ok(buf: Buffer, pos: int, header: BatchHeader) -> bool:
    return compute_crc(buf, pos, header) == header.crc


def set_base_offset(buf: bytearray | memoryview, pos: int, offset: int) -> None:
    _INT64.pack_into(buf, pos + BASE_OFFSET_POS, offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_POS, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp: int) -> None:
    """Mark the batch at ``pos`` as LogAppendTime with max timestamp ``timestamp`` and rewrite its CRC.

    ``buf`` must hold the whole batch (the CRC covers all of it).
    """
    (attributes,) = _INT16.unpack_from(buf, pos + ATTRIBUTES_POS)
    _INT16.pack_into(buf, pos + ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_MASK)
    set_max_timestamp(buf, pos, timestamp)


def set_max_timestamp(buf: bytearray | memoryview, pos: int, timestamp: int) -> int:
    """Write ``timestamp`` as the maxTimestamp of the batch at ``pos`` and rewrite its CRC, which is
    returned. ``buf`` must hold the whole batch."""
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_POS, timestamp)
    (length,) = _INT32.unpack_from(buf, pos + LENGTH_POS)
    crc: int = crc32c(memoryview(buf)[pos + ATTRIBUTES_POS : pos + length + LOG_OVERHEAD])
    _UINT32.pack_into(buf, pos + CRC_POS, crc)
    return crc


def set_crc_from_parts(header_buf: bytearray, body: Buffer) -> None:
    """Rewrite the CRC of a batch split in two: its 61-byte ``header_buf`` and the ``body`` after it."""
    crc = crc32c(memoryview(header_buf)[ATTRIBUTES_POS:BATCH_HEADER_SIZE])
    crc = crc32c(body, crc)
    _UINT32.pack_into(header_buf, CRC_POS, crc)


def crc_of_parts(header_buf: Buffer, body: Buffer) -> int:
    crc = crc32c(memoryview(header_buf)[ATTRIBUTES_POS:BATCH_HEADER_SIZE])
    return int(crc32c(body, crc))


def set_log_append_time_split(header_buf: bytearray, body: Buffer, timestamp: int) -> None:
    """``set_log_append_time`` for a batch held as a writable 61-byte header plus its read-only body."""
    (attributes,) = _INT16.unpack_from(header_buf, ATTRIBUTES_POS)
    _INT16.pack_into(header_buf, ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(header_buf, MAX_TIMESTAMP_POS, timestamp)
    set_crc_from_parts(header_buf, body)
