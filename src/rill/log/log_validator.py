"""Validation of record batches on the append path and offset assignment (Kafka's LogValidator,
batch level)."""

from __future__ import annotations

import struct

from crc32c import crc32c

from rill.errors import ErrorCode, KafkaError
from rill.log.log_config import LogConfig
from rill.records.batch import (
    ATTRIBUTES_POS,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_POS,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Buffer,
    CorruptRecordError,
    set_log_append_time,
    set_log_append_time_split,
)
from rill.records.record import decode_batch_records

_MAX_COMPRESSION = 4  # zstd
_NOT_FROM_CLIENTS = CONTROL_MASK | TIMESTAMP_TYPE_MASK  # control batches; LogAppendTime is the broker's to set
_unpack_header = HEADER_STRUCT.unpack_from
_new_tuple = tuple.__new__
_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch at position 0 of a batch
stamp_prefix = _PREFIX.pack_into
"""``stamp_prefix(buf, pos, base_offset, batch_length, leader_epoch)``: what the leader writes into
every batch it appends (all outside the CRC)."""


def check_single_batch(view: memoryview, config: LogConfig) -> tuple[int, ...] | None:
    """The header fields (``HEADER_STRUCT`` order) when ``view`` is exactly one batch from a client
    that passes every check of ``validate_batches``; None otherwise (that function then names the
    error), and None whenever the log bounds CreateTimes (checked record by record on the other path:
    ``LogConfig.single_batch_max_bytes`` is then -1).
    The produce fast path: one unpack, one combined test, one CRC.
    """
    size = len(view)
    if size < BATCH_HEADER_SIZE:
        return None
    fields = _unpack_header(view, 0)
    _, length, _, magic, crc, attributes, delta, _, _, _, _, _, count = fields
    if (
        length + LOG_OVERHEAD != size
        or magic != MAGIC_V2
        or size > config.single_batch_max_bytes
        or attributes & _NOT_FROM_CLIENTS
        or attributes & COMPRESSION_MASK > _MAX_COMPRESSION
        or count <= 0
        or delta != count - 1
        or crc32c(view[ATTRIBUTES_POS:]) != crc
    ):
        return None
    return fields


def check_create_times(
    view: memoryview, batches: list[tuple[int, BatchHeader]], bounds: tuple[int, int], now_ms: int
) -> None:
    """Kafka's bounds on producer timestamps (``message.timestamp.before.max.ms`` and
    ``.after.max.ms``): INVALID_TIMESTAMP naming the first record whose CreateTime lies outside
    ``[now - before, now + after]``. Records without a timestamp (-1) pass. Decodes every record,
    so the append path calls it only when a bound is set."""
    low, high = now_ms - bounds[0], now_ms + bounds[1]
    for index, (pos, h) in enumerate(batches):
        end = pos + h.batch_length + LOG_OVERHEAD
        for record in decode_batch_records(view[pos:end], verify_crc=False):
            if record.timestamp != -1 and not low <= record.timestamp <= high:
                raise KafkaError(
                    ErrorCode.INVALID_TIMESTAMP,
                    f"record {record.offset} of batch {index} has CreateTime {record.timestamp}, outside"
                    f" [{low}, {high}] (message.timestamp.before.max.ms, message.timestamp.after.max.ms)",
                )


def validate_batches(view: memoryview, config: LogConfig, *, from_client: bool) -> list[tuple[int, BatchHeader]]:
    """Frame, checksum and size-check every batch in ``view``; returns ``(position, header)`` pairs.

    Raises KafkaError with UNSUPPORTED_FOR_MESSAGE_FORMAT (magic other than 2), CORRUPT_MESSAGE
    (framing, checksum), MESSAGE_SIZE_TOO_LARGE (a batch above ``max.message.bytes``),
    RECORD_LIST_TOO_LARGE (the whole append above ``segment.bytes``), INVALID_RECORD, or (from a
    client) INVALID_TIMESTAMP for a batch marked LogAppendTime.
    """
    # Every produce request passes here: one combined test per batch on the good path, and the
    # precise error worked out by ``_reject`` only when that test fails.
    out: list[tuple[int, BatchHeader]] = []
    end = len(view)
    if from_client and end > config.segment_bytes:
        raise KafkaError(
            ErrorCode.RECORD_LIST_TOO_LARGE,
            f"{end} bytes of record batches exceed segment.bytes {config.segment_bytes}",
        )
    max_message_bytes = config.max_message_bytes
    pos = 0
    while pos < end:
        if end - pos < BATCH_HEADER_SIZE:
            _reject_short(view, pos, end)
        header = _new_tuple(BatchHeader, _unpack_header(view, pos))  # BatchHeader(*fields), without the copy
        size = header.batch_length + LOG_OVERHEAD
        if (
            header.magic != MAGIC_V2
            or size < BATCH_HEADER_SIZE
            or pos + size > end
            or size > max_message_bytes
            or crc32c(view[pos + ATTRIBUTES_POS : pos + size]) != header.crc
            or header.attributes & COMPRESSION_MASK > _MAX_COMPRESSION
            or header.last_offset_delta < 0
            or (
                from_client
                and (
                    header.records_count <= 0
                    or header.last_offset_delta != header.records_count - 1
                    or header.attributes & _NOT_FROM_CLIENTS
                )
            )
        ):
            _reject(view, pos, end, header, max_message_bytes)
        out.append((pos, header))
        pos += size
    return out


def _reject_short(view: memoryview, pos: int, end: int) -> None:
    if end - pos > MAGIC_POS and view[pos + MAGIC_POS] != MAGIC_V2:
        _reject_magic(pos, view[pos + MAGIC_POS])
    raise CorruptRecordError(f"{end - pos} trailing bytes at position {pos} are not a record batch")


def _reject_magic(pos: int, magic: int) -> None:
    raise KafkaError(
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        f"record batch at position {pos} has magic {magic}; only magic 2 is supported",
    )


def _reject(view: memoryview, pos: int, end: int, header: BatchHeader, max_message_bytes: int) -> None:
    """Raise the error for the first check the batch at ``pos`` fails, in Kafka's order."""
    if header.magic != MAGIC_V2:
        _reject_magic(pos, header.magic)
    length = header.batch_length
    size = length + LOG_OVERHEAD
    if size < BATCH_HEADER_SIZE or pos + size > end:
        raise CorruptRecordError(f"record batch at position {pos} has length {length}, {end - pos} bytes remain")
    if size > max_message_bytes:
        raise KafkaError(
            ErrorCode.MESSAGE_SIZE_TOO_LARGE,
            f"record batch of {size} bytes exceeds max.message.bytes {max_message_bytes}",
        )
    if crc32c(view[pos + ATTRIBUTES_POS : pos + size]) != header.crc:
        raise CorruptRecordError(f"record batch at position {pos} fails its CRC32C check")
    attributes = header.attributes
    if attributes & COMPRESSION_MASK > _MAX_COMPRESSION:
        raise CorruptRecordError(
            f"record batch at position {pos} has unknown compression {attributes & COMPRESSION_MASK}"
        )
    delta = header.last_offset_delta
    if delta < 0:
        raise CorruptRecordError(f"record batch at position {pos} has negative lastOffsetDelta")
    count = header.records_count
    if count <= 0:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"record batch at position {pos} holds no records")
    if delta != count - 1:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"record batch at position {pos}: lastOffsetDelta {delta} does not match {count} records",
        )
    if attributes & CONTROL_MASK:
        raise KafkaError(ErrorCode.INVALID_RECORD, "clients may not append control batches")
    raise KafkaError(
        ErrorCode.INVALID_TIMESTAMP,
        f"record batch at position {pos} is marked LogAppendTime; only the broker sets that timestamp type",
    )


def assign_offsets(
    view: memoryview,
    batches: list[tuple[int, BatchHeader]],
    first_offset: int,
    leader_epoch: int,
    append_time: int,
) -> tuple[list[Buffer], list[tuple[int, int, int, int]]]:
    """Give the validated ``batches`` consecutive offsets from ``first_offset``, stamp the leader
    epoch and, when ``append_time`` >= 0, LogAppendTime.

    Writable input is patched in place and returned as one buffer; read-only input is returned as
    copied headers plus the original bodies. Also returns, per batch, ``(position, last offset,
    max timestamp, size)``.
    """
    writable = not view.readonly
    bufs: list[Buffer] = [view] if writable else []
    infos: list[tuple[int, int, int, int]] = []
    offset = first_offset
    for pos, h in batches:
        size = h.batch_length + LOG_OVERHEAD
        if writable:
            stamp_prefix(view, pos, offset, h.batch_length, leader_epoch)
            if append_time >= 0:
                set_log_append_time(view, pos, append_time)
        else:
            head = bytearray(view[pos : pos + BATCH_HEADER_SIZE])
            body = view[pos + BATCH_HEADER_SIZE : pos + size]
            stamp_prefix(head, 0, offset, h.batch_length, leader_epoch)
            if append_time >= 0:
                set_log_append_time_split(head, body, append_time)
            bufs += (head, body)
        last = offset + h.records_count - 1
        infos.append((pos, last, h.max_timestamp if append_time < 0 else append_time, size))
        offset = last + 1
    return bufs, infos
