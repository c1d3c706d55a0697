"""Validation of record batches on the append path and offset assignment (Kafka's LogValidator,
batch level)."""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c_rs import crc32c

from rill.common import named_tuple_from
from rill.errors import ErrorCode, KafkaError, RecordValidationError
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
    BatchHeader,
    Buffer,
    CorruptRecordError,
    set_log_append_time,
    set_log_append_time_split,
)
from rill.records.compression import decompress_chunks
from rill.records.scan import (
    ATTRIBUTES_FIELD,
    BASE_TIMESTAMP_FIELD,
    MAX_CODEC,
    MAX_TIMESTAMP_FIELD,
    NOT_FROM_CLIENTS,
    RECORDS_COUNT_FIELD,
    Flagged,
    ScanResult,
    check_batch,
    flag_records,
    record_size,
    scan_records,
)

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_unpack_header = HEADER_STRUCT.unpack_from
_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch at position 0 of a batch
stamp_prefix = _PREFIX.pack_into
"""``stamp_prefix(buf, pos, base_offset, batch_length, leader_epoch)``: what the leader writes into
every batch it appends (all outside the CRC)."""


def check_single_batch(view: memoryview, config: LogConfig) -> tuple[int, ...] | None:
    """The header fields (``HEADER_STRUCT`` order) when ``view`` is exactly one batch from a client
    that passes every check of ``validate_batches`` and ``validate_records`` and needs no fix-up (its
    maxTimestamp is its records' largest); None otherwise (those functions then name the error), and
    None whenever the log bounds CreateTimes (``LogConfig.single_batch_max_bytes`` is then -1).
    The produce fast path: one compiled pass over header, CRC and uncompressed records
    (``rill.records.scan.check_batch``); a compressed batch's records are decompressed piece by piece
    and scanned (``scan_batch_records``).
    """
    fields = check_batch(view, config.single_batch_max_bytes, config.compacted)
    if fields is None or not fields[ATTRIBUTES_FIELD] & COMPRESSION_MASK:
        return fields
    try:
        codec, count = fields[ATTRIBUTES_FIELD] & COMPRESSION_MASK, fields[RECORDS_COUNT_FIELD]
        summary = scan_batch_records(view, codec, count, config)
    except KafkaError:
        return None
    if (
        (config.compacted and summary.null_key >= 0)
        or summary.bad_offset >= 0
        or summary.max_ts_delta is None
        or fields[BASE_TIMESTAMP_FIELD] + summary.max_ts_delta != fields[MAX_TIMESTAMP_FIELD]
    ):
        return None
    return fields


class RecordsSummary(NamedTuple):
    """What the records of one batch hold that the append path checks (see ``rill.records.scan``)."""

    min_ts_delta: int | None
    max_ts_delta: int | None
    null_key: int
    bad_offset: int
    bad_time: int
    bad_time_delta: int


def scan_batch_records(
    view: memoryview,
    codec: int,
    count: int,
    config: LogConfig,
    time_bounds: tuple[int, int, int] | None = None,
    flagged: list[Flagged] | None = None,
) -> RecordsSummary:
    """Scan the ``count`` records of the batch ``view`` (decompressed piece by piece): INVALID_RECORD
    when one is malformed, when there are fewer or more than ``count``, or when one decompressed
    record is larger than ``LogConfig.max_decompressed_bytes``; CORRUPT_MESSAGE when the records do not
    decompress. ``time_bounds`` (the batch's base timestamp, the lowest and the highest allowed) asks
    for the first record whose timestamp lies outside (``RecordsSummary.bad_time``). The summary
    names the first record of each kind; given ``flagged``, the scan also appends to it every record
    with a null key, an offset delta other than its number, or a timestamp outside the bounds
    (``rill.records.scan.flag_records``)."""
    scan = _BatchScan(count, time_bounds, flagged)
    body = view[BATCH_HEADER_SIZE:]
    if codec == 0:
        return scan.summary(scan.take(body))
    # A compressed batch may hold far more than it takes on the wire, even on purpose (a
    # decompression bomb): it is read in pieces of _SCAN_CHUNK and scanned where they lie; only a
    # record that spans pieces is copied (``held``), and no more than ``cap`` bytes of it.
    cap = config.max_decompressed_bytes
    held = bytearray()
    for piece in decompress_chunks(codec, body, _SCAN_CHUNK, cap):
        rest = memoryview(piece)
        if scan.next_record == count:
            if rest:
                raise KafkaError(ErrorCode.INVALID_RECORD, f"bytes remain after the batch's {count} records")
            continue
        if held:
            need = record_size(held)
            if not need:
                # The record's length field itself was cut: it has at most 5 bytes, and a record at
                # least 7, so 5 bytes never reach past the record.
                take = min(len(rest), 5 - len(held))
                held += rest[:take]
                rest = rest[take:]
                need = record_size(held)
                if not need:
                    if len(held) >= 5:
                        scan.take(held)  # a length field of more than 5 bytes: names the error
                    continue
            if need > cap:
                raise KafkaError(ErrorCode.INVALID_RECORD, f"record {scan.next_record} is larger than {cap} bytes")
            take = max(0, need - len(held))
            held += rest[:take]
            rest = rest[take:]
            if len(held) < need:
                continue
            scan.take(held)  # exactly the one record (or an error)
            held = bytearray()
        left = scan.take(rest)
        if left:
            held = bytearray(rest[len(rest) - left :])
            if record_size(held) > cap:
                raise KafkaError(ErrorCode.INVALID_RECORD, f"record {scan.next_record} is larger than {cap} bytes")
    return scan.summary(len(held))


_SCAN_CHUNK = 256 * 1024  # decompressed bytes scanned at a time: fits the CPU's L2 cache


class _BatchScan:
    """The records of one batch scanned so far, over ``take`` calls on consecutive pieces."""

    def __init__(
        self, count: int, time_bounds: tuple[int, int, int] | None, flagged: list[Flagged] | None = None
    ) -> None:
        self.count = count
        self.bounds = time_bounds or ()
        self.flagged = flagged
        self.next_record = 0
        self.min_ts: int | None = None
        self.max_ts: int | None = None
        self.null_key = self.bad_offset = self.bad_time = -1
        self.bad_time_delta = 0

    def take(self, data: Buffer) -> int:
        """Scan the whole records at the start of ``data``; returns the bytes left after them."""
        try:
            if self.flagged is None:
                found = scan_records(data, self.count, self.next_record, *self.bounds)
            else:
                found = flag_records(self.flagged, data, self.count, self.next_record, *self.bounds)
        except ValueError as e:
            raise KafkaError(ErrorCode.INVALID_RECORD, str(e)) from None
        self._add(found)
        return len(data) - found.consumed

    def _add(self, found: ScanResult) -> None:
        if found.min_ts_delta is not None and found.max_ts_delta is not None:
            self.min_ts = found.min_ts_delta if self.min_ts is None else min(self.min_ts, found.min_ts_delta)
            self.max_ts = found.max_ts_delta if self.max_ts is None else max(self.max_ts, found.max_ts_delta)
        if self.null_key < 0:
            self.null_key = found.null_key
        if self.bad_offset < 0:
            self.bad_offset = found.bad_offset
        if self.bad_time < 0:
            self.bad_time, self.bad_time_delta = found.bad_time, found.bad_time_delta
        self.next_record = found.next_record

    def summary(self, left: int) -> RecordsSummary:
        """What the batch holds, once every piece was taken and ``left`` bytes were not read:
        INVALID_RECORD unless exactly ``count`` records were read and nothing is left."""
        if self.next_record < self.count:
            raise KafkaError(
                ErrorCode.INVALID_RECORD, f"the batch declares {self.count} records, it holds {self.next_record}"
            )
        if left:
            raise KafkaError(ErrorCode.INVALID_RECORD, f"bytes remain after the batch's {self.count} records")
        return RecordsSummary(
            self.min_ts, self.max_ts, self.null_key, self.bad_offset, self.bad_time, self.bad_time_delta
        )


def validate_records(
    view: memoryview, pos: int, header: BatchHeader, index: int, config: LogConfig, now_ms: int
) -> int:
    """Kafka's record-level checks of one producer batch (at ``pos``, batch ``index`` of the
    request, its header checked by ``validate_batches``); returns the largest record timestamp, which
    the caller writes into the header's maxTimestamp when it differs, as Kafka does.

    Every record is read, compressed ones decompressed piece by piece (the batch is still stored as
    it came). INVALID_RECORD when a record is malformed, when the batch holds more or fewer records
    than it declares, when a record lacks a key on a compacted topic, or when the records of a
    compressed batch do not carry offset deltas 0, 1, 2, ... (Kafka rewrites such a batch, a relic
    of old clients; Rill refuses it); INVALID_TIMESTAMP when a CreateTime lies outside
    ``message.timestamp.before.max.ms`` / ``after.max.ms``; CORRUPT_MESSAGE when the records do
    not decompress. A batch refused for some of its records names every one of them
    (``RecordValidationError.record_errors``), as Kafka's RecordErrors do.
    """
    batch = view[pos : pos + header.batch_length + LOG_OVERHEAD]
    codec = header.attributes & COMPRESSION_MASK
    bounds = config.create_time_bounds
    base = header.base_timestamp
    low = high = 0
    if bounds is not None:
        low, high = max(_INT64_MIN, now_ms - bounds[0]), min(_INT64_MAX, now_ms + bounds[1])
    time_bounds = None if bounds is None else (base, low, high)
    try:
        summary = scan_batch_records(batch, codec, header.records_count, config, time_bounds)
        if (
            (codec and summary.bad_offset >= 0)
            or (config.compacted and summary.null_key >= 0)
            or summary.bad_time >= 0
        ):
            # Refused: read the records again, one by one, to name every one at fault.
            flagged: list[Flagged] = []
            scan_batch_records(batch, codec, header.records_count, config, time_bounds, flagged)
            _refuse_records(index, flagged, codec, config.compacted, base, low, high)
    except RecordValidationError:
        raise
    except KafkaError as e:
        raise KafkaError(e.code, f"record batch at position {pos}: {e.message}") from None
    assert summary.max_ts_delta is not None  # records_count > 0
    return base + summary.max_ts_delta


def _refuse_records(
    batch: int, flagged: list[Flagged], codec: int, compacted: bool, base: int, low: int, high: int
) -> None:
    """Refuse batch number ``batch`` of the request for the records among ``flagged`` that fail a
    check (each for the first it fails, in Kafka's order), named in the error's ``record_errors`` as
    Kafka's RecordErrors name them: by their index in the batch. INVALID_TIMESTAMP when one of them
    has a CreateTime out of bounds, INVALID_RECORD otherwise, as Kafka answers."""
    errors: list[tuple[int, str]] = []
    late = False
    for number, null_key, bad_offset, bad_time, time_delta in flagged:
        if codec and bad_offset:
            why = "an offset delta other than its place in the compressed batch"
        elif compacted and null_key:
            why = "no key; a compacted topic (cleanup.policy=compact) takes only keyed records"
        elif bad_time:
            late = True
            why = (
                f"CreateTime {base + time_delta} is outside [{low}, {high}]"
                " (message.timestamp.before.max.ms, message.timestamp.after.max.ms)"
            )
        else:
            continue
        errors.append((number, why))
    if not errors:
        return
    first, why = errors[0]
    message = f"record {first} of batch {batch}: {why}"
    if len(errors) > 1:
        message += f" ({len(errors)} records of the batch refused)"
    raise RecordValidationError(ErrorCode.INVALID_TIMESTAMP if late else ErrorCode.INVALID_RECORD, message, errors)


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
        header = named_tuple_from(BatchHeader, _unpack_header(view, pos))
        size = header.batch_length + LOG_OVERHEAD
        if (
            header.magic != MAGIC_V2
            or size < BATCH_HEADER_SIZE
            or pos + size > end
            or size > max_message_bytes
            or crc32c(view[pos + ATTRIBUTES_POS : pos + size]) != header.crc
            or header.attributes & COMPRESSION_MASK > MAX_CODEC
            or header.last_offset_delta < 0
            or (
                from_client
                and (
                    header.records_count <= 0
                    or header.last_offset_delta != header.records_count - 1
                    or header.attributes & NOT_FROM_CLIENTS
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
    if attributes & COMPRESSION_MASK > MAX_CODEC:
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
