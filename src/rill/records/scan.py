"""Record-level checks of a v2 record batch: is every record inside well formed, how many are there,
and what do they hold that the broker must check (timestamps, null keys, offset deltas).

Two implementations with the same arguments, results and error messages: the compiled one in
``rill.records._scan`` (C, built when the package is installed with a compiler at hand) and the
pure-Python twin below, used when the extension is missing. ``ACCELERATED`` says which one
``scan_records`` and ``check_batch`` are.

The record layout is in ``rill.records.record``. Varints are zigzag LEB128 of at most 5 bytes (an
int32: the high bits of a fifth byte are dropped, as Kafka's reader drops them) or 10 (an int64,
the timestamp delta). A record is malformed when its length is below 6, when a field runs past its
length, when the fields end before its length does, when a varint is too long, when it declares a
negative number of headers or a header with a negative key length. A negative key or value length
means null (Kafka reads every negative length as null).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

from crc32c_rs import crc32c

from rill.records.batch import (
    ATTRIBUTES_POS,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
)
from rill.records.compression import ZSTD

Buffer = bytes | bytearray | memoryview

NOT_FROM_CLIENTS = CONTROL_MASK | TIMESTAMP_TYPE_MASK
"""Attribute bits a producer may not set: control batches, LogAppendTime (the broker's to set)."""
MAX_CODEC = ZSTD
"""The highest compression id in attributes bits 0-2."""
# Where the tuple ``check_batch`` returns (``HEADER_STRUCT``'s order: the fields of ``BatchHeader``) holds
# the fields that the append path reads from it directly (a ``BatchHeader`` made of it costs 0.17 us more)
ATTRIBUTES_FIELD = BatchHeader._fields.index("attributes")
LAST_OFFSET_DELTA_FIELD = BatchHeader._fields.index("last_offset_delta")
BASE_TIMESTAMP_FIELD = BatchHeader._fields.index("base_timestamp")
MAX_TIMESTAMP_FIELD = BatchHeader._fields.index("max_timestamp")
PRODUCER_ID_FIELD = BatchHeader._fields.index("producer_id")
RECORDS_COUNT_FIELD = BatchHeader._fields.index("records_count")
_MIN_RECORD_BODY = 6
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class ScanResult(NamedTuple):
    """What one ``scan_records`` call read."""

    consumed: int
    """bytes of complete records read from the start of the data"""
    next_record: int
    """the number of the next record (records read, counting those of earlier calls)"""
    min_ts_delta: int | None
    """smallest timestamp delta among the records read; None when none was read"""
    max_ts_delta: int | None
    null_key: int
    """number of the first record read with a null key; -1 when none"""
    bad_offset: int
    """number of the first record read whose offset delta is not its number; -1 when none"""
    bad_time: int
    """given bounds, number of the first record read whose timestamp lies outside them; -1 when none"""
    bad_time_delta: int
    """that record's timestamp delta; 0 when none"""


class _Incomplete(Exception):
    """The data ends inside a record's length varint."""


def _varint(b: Buffer, p: int, end: int, max_bytes: int, index: int) -> tuple[int, int]:
    """A zigzag varint at ``p`` (see the module doc); _Incomplete when ``end`` comes first."""
    u = 0
    for shift in range(0, 7 * max_bytes, 7):
        if p >= end:
            raise _Incomplete
        x = b[p]
        p += 1
        u |= (x & 0x7F) << shift
        if x < 0x80:
            u &= 0xFFFFFFFF if max_bytes == 5 else 0xFFFFFFFFFFFFFFFF
            return (u >> 1) ^ -(u & 1), p
    raise ValueError(f"record {index}: varint longer than {max_bytes} bytes")


def _field(b: Buffer, p: int, rec_end: int, max_bytes: int, index: int, length: int) -> tuple[int, int]:
    try:
        return _varint(b, p, rec_end, max_bytes, index)
    except _Incomplete:
        raise ValueError(f"record {index}: fields run past the record's length {length}") from None


Flagged = tuple[int, int, int, int, int]
"""A record ``flag_records`` notes: (index, null key, offset delta other than its index, timestamp
outside the bounds, timestamp delta), the flags 0 or 1."""


def py_scan_records(data: Buffer, count: int, index: int, *bounds: int) -> ScanResult:
    """The pure-Python ``scan_records``: check the complete records at the start of ``data`` (a
    records section, decompressed), numbering them from ``index``, stopping at record ``count`` or
    at the first record not whole in ``data``. Raises ValueError on a malformed record.

    ``bounds``, when given, are the batch's base timestamp and the lowest and highest timestamp
    allowed: the result then names the first record whose timestamp (base + delta) lies outside.
    A timestamp of -1 (none) passes; one past the int64 range does not."""
    return _py_scan(None, data, count, index, bounds)


def py_flag_records(flagged: list[Flagged], data: Buffer, count: int, index: int, *bounds: int) -> ScanResult:
    """The pure-Python ``flag_records``: ``scan_records`` that also appends to ``flagged`` every
    record read with a null key, an offset delta other than its index, or (given ``bounds``) a
    timestamp outside them (``Flagged``)."""
    return _py_scan(flagged, data, count, index, bounds)


def _py_scan(
    flagged: list[Flagged] | None, data: Buffer, count: int, index: int, bounds: tuple[int, ...]
) -> ScanResult:
    b = memoryview(data).cast("B") if not isinstance(data, bytes | bytearray) else data
    end = len(b)
    p = 0
    start = index
    min_ts, max_ts, null_key, bad_offset = _INT64_MAX, _INT64_MIN, -1, -1
    bad_time, bad_time_delta = -1, 0
    if len(bounds) not in (0, 3):
        raise TypeError(f"scan_records takes 3 or 6 arguments, {3 + len(bounds)} given")
    if bounds:
        base_ts, low, high = bounds
    while index < count:
        try:
            length, q = _varint(b, p, end, 5, index)
        except _Incomplete:
            break
        if length < _MIN_RECORD_BODY:
            raise ValueError(f"record {index}: invalid record length {length}")
        if length > end - q:
            break
        rec, rec_end = q, q + length
        q += 1  # attributes
        ts, q = _field(b, q, rec_end, 10, index, length)
        min_ts = min(min_ts, ts)
        max_ts = max(max_ts, ts)
        late = False
        if bounds:
            t = base_ts + ts
            late = t != -1 and not (low <= t <= high and _INT64_MIN <= t <= _INT64_MAX)
            if late and bad_time < 0:
                bad_time, bad_time_delta = index, ts
        delta, q = _field(b, q, rec_end, 5, index, length)
        misplaced = delta != index
        if misplaced and bad_offset < 0:
            bad_offset = index
        n, q = _field(b, q, rec_end, 5, index, length)  # key
        keyless = n < 0
        if keyless:
            if null_key < 0:
                null_key = index
        elif n > rec_end - q:
            raise ValueError(f"record {index}: fields run past the record's length {length}")
        else:
            q += n
        n, q = _field(b, q, rec_end, 5, index, length)  # value
        if n >= 0:
            if n > rec_end - q:
                raise ValueError(f"record {index}: fields run past the record's length {length}")
            q += n
        headers, q = _field(b, q, rec_end, 5, index, length)
        if headers < 0:
            raise ValueError(f"record {index}: invalid number of headers {headers}")
        for _ in range(headers):
            n, q = _field(b, q, rec_end, 5, index, length)
            if n < 0:
                raise ValueError(f"record {index}: invalid header key length {n}")
            if n > rec_end - q:
                raise ValueError(f"record {index}: fields run past the record's length {length}")
            q += n
            n, q = _field(b, q, rec_end, 5, index, length)
            if n >= 0:
                if n > rec_end - q:
                    raise ValueError(f"record {index}: fields run past the record's length {length}")
                q += n
        if q != rec_end:
            raise ValueError(
                f"record {index}: fields end at byte {q - rec} of the record, its length says {length}"
            )
        if flagged is not None and (keyless or misplaced or late):
            flagged.append((index, int(keyless), int(misplaced), int(late), ts))
        p = rec_end
        index += 1
    if index == start:
        return ScanResult(p, index, None, None, null_key, bad_offset, bad_time, bad_time_delta)
    return ScanResult(p, index, min_ts, max_ts, null_key, bad_offset, bad_time, bad_time_delta)


def record_size(data: Buffer) -> int:
    """Bytes of the record at the start of ``data``, its length field included, as that field says;
    0 when ``data`` ends inside the field (a malformed field is left for ``scan_records`` to name)."""
    try:
        length, after = _varint(data, 0, len(data), 5, 0)
    except (_Incomplete, ValueError):
        return 0
    return after + max(0, length)


def py_check_batch(view: Buffer, max_bytes: int, require_keys: bool) -> tuple[int, ...] | None:
    """The pure-Python ``check_batch``: the 13 header fields (``HEADER_STRUCT`` order) when ``view``
    is exactly one producer batch that passes every batch check of the append path (length, magic 2,
    at most ``max_bytes``, no control or LogAppendTime flag, a known codec, records count and last
    offset delta consistent, CRC32C) and, when its records are not compressed, every record check:
    well formed, exactly ``recordsCount`` of them filling the batch, the header's maxTimestamp their
    largest (CreateTime), a key on each when ``require_keys``. None otherwise: the general path then
    names the error."""
    size = len(view)
    if size < BATCH_HEADER_SIZE:
        return None
    fields: tuple[int, ...] = HEADER_STRUCT.unpack_from(view, 0)
    _, length, _, magic, crc, attributes, delta, base_ts, max_ts, _, _, _, count = fields
    if (
        length + LOG_OVERHEAD != size
        or magic != MAGIC_V2
        or size > max_bytes
        or attributes & NOT_FROM_CLIENTS
        or attributes & COMPRESSION_MASK > MAX_CODEC
        or count <= 0
        or delta != count - 1
        or crc32c(memoryview(view)[ATTRIBUTES_POS:]) != crc
    ):
        return None
    if not attributes & COMPRESSION_MASK:
        try:
            found = py_scan_records(memoryview(view)[BATCH_HEADER_SIZE:], count, 0)
        except ValueError:
            return None
        if found.next_record != count or found.consumed != size - BATCH_HEADER_SIZE:
            return None
        assert found.max_ts_delta is not None  # count > 0 records were read
        if base_ts + found.max_ts_delta != max_ts:
            return None
        if require_keys and found.null_key >= 0:
            return None
    return fields


class _ScanRecords(Protocol):
    def __call__(self, data: Buffer, count: int, index: int, *bounds: int) -> ScanResult: ...


class _FlagRecords(Protocol):
    def __call__(self, flagged: list[Flagged], data: Buffer, count: int, index: int, *bounds: int) -> ScanResult: ...


scan_records: _ScanRecords
"""``py_scan_records``, compiled when the extension is built."""
flag_records: _FlagRecords
"""``py_flag_records``, compiled when the extension is built."""
check_batch: Callable[[Buffer, int, bool], tuple[int, ...] | None]
"""``py_check_batch``, compiled when the extension is built."""

try:
    from rill.records import _scan
except ImportError:  # built without a compiler: the twins do the same, slower
    ACCELERATED = False
    scan_records, flag_records, check_batch = py_scan_records, py_flag_records, py_check_batch
else:
    ACCELERATED = True

    def scan_records(data: Buffer, count: int, index: int, *bounds: int) -> ScanResult:
        return ScanResult._make(_scan.scan_records(data, count, index, *bounds))

    def flag_records(flagged: list[Flagged], data: Buffer, count: int, index: int, *bounds: int) -> ScanResult:
        return ScanResult._make(_scan.flag_records(flagged, data, count, index, *bounds))

    check_batch = _scan.check_batch
