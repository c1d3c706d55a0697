"""Record batches decoded into columns: one pass over the bytes, no per-record objects.

Readers that hand records on in bulk (the Spark source builds Arrow arrays) do not need a ``Record`` per
record. ``decode_columns`` walks every complete v2 batch of a Fetch response's records once and fills flat
columns instead. The bytes it walks, per batch (big-endian header; layout in ``rill.records.batch``)::

    0 baseOffset int64 | 8 batchLength int32 | 16 magic int8 | 21 attributes int16 |
    23 lastOffsetDelta int32 | 27 baseTimestamp int64 | 35 maxTimestamp int64 | 57 recordsCount int32 |
    61 records (compressed as attributes & 0x07 says)

and per record inside the (decompressed) records section, zigzag varints::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint (-1 null) | key | valueLength varint (-1 null) | value |
    headersCount varint | headers (keyLength varint, key UTF-8, valueLength varint (-1 null), value)

Keys and values stay where they are in ``data``: the Fetch response's records themselves when no batch
is compressed, else one buffer joining the decompressed records sections of all batches. A
column keeps ``[start, end)`` positions (two entries per row, start then end) and the rows whose field is
null, so a consumer can cut every key out of ``data`` in one vectorised step. Headers are parsed only when
asked for; otherwise a record's headers are skipped by its length. Control batches (transaction markers)
are skipped; records outside ``[start, until)`` are skipped without decoding their fields.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass

from rill.errors import ErrorCode, KafkaError
from rill.records import compression
from rill.records.record import corrupt, read_headers, read_varint

Buffer = bytes | bytearray | memoryview

_HEADER = struct.Struct(">qiibIhiqqqhii")
_HEADER_SIZE = 61
_LOG_OVERHEAD = 12  # baseOffset and batchLength, not counted by batchLength
_LENGTH = struct.Struct(">i")
_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_CONTROL_MASK = 0x20

NO_LIMIT = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """Columns of the records with ``start <= offset < until`` of one Fetch response, in offset order.

    ``key_bounds``/``value_bounds`` hold two positions into ``data`` per row (start, end); ``key_nulls``/
    ``value_nulls`` list the rows whose key/value is null (their bounds are an empty range). ``timestamps``
    are milliseconds. ``headers`` is None unless headers were asked for. ``next_offset`` is the offset after
    the last complete batch seen (the next fetch position), or the starting offset when there was none.
    """

    data: bytes
    offsets: array[int]
    timestamps: array[int]
    timestamp_types: array[int]
    key_bounds: array[int]
    key_nulls: list[int]
    value_bounds: array[int]
    value_nulls: list[int]
    headers: list[list[tuple[str, bytes | None]]] | None
    next_offset: int

    def __len__(self) -> int:
        return len(self.offsets)

    def key(self, row: int) -> bytes | None:
        """One key (for tests and debugging; bulk readers slice ``data`` themselves)."""
        return _field(self.data, self.key_bounds, self.key_nulls, row)

    def value(self, row: int) -> bytes | None:
        return _field(self.data, self.value_bounds, self.value_nulls, row)


def _field(data: bytes, bounds: array[int], nulls: list[int], row: int) -> bytes | None:
    if row in nulls:
        return None
    return data[bounds[2 * row] : bounds[2 * row + 1]]


def decode_columns(
    records: Buffer, start: int = 0, until: int = NO_LIMIT, *, include_headers: bool = False
) -> RecordColumns:
    """Decode every complete batch in ``records`` (a trailing partial batch is left for the next fetch)
    into columns, keeping records with ``start <= offset < until``.

    Key and value positions are int32 (typecode ``i``, what Arrow's binary offsets are) unless the joined
    records sections reach 2 GiB, when they are int64 (``q``)."""
    try:
        return _decode_columns(records, start, until, include_headers, "i")
    except OverflowError:
        return _decode_columns(records, start, until, include_headers, "q")


def _decode_columns(
    records: Buffer, start: int, until: int, include_headers: bool, position_type: str
) -> RecordColumns:
    raw = records if isinstance(records, bytes) else bytes(records)
    # Pass 1: the batches to walk. Uncompressed records sections are walked where they lie in ``raw``;
    # as soon as one batch is compressed, every section goes into one joined buffer instead.
    kept: list[tuple[int, int, int, int, int, int, int]] = []  # base, base_ts, max_ts, ts_type, count, pos, end
    sections: list[bytes | memoryview] = []
    compressed = False
    next_offset = start
    view = memoryview(raw)
    for pos, end in _batch_bounds(raw):
        base, _len, _ple, magic, _crc, attrs, lod, base_ts, max_ts, _pid, _pe, _seq, count = _HEADER.unpack_from(
            raw, pos
        )
        last = base + lod
        if last < start:
            continue
        next_offset = max(next_offset, last + 1)
        if attrs & _CONTROL_MASK or base >= until:
            continue
        if magic != 2:
            raise KafkaError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, f"record batch magic {magic} is not 2")
        if count < 0:
            raise corrupt(f"negative record count {count}")
        codec = attrs & _COMPRESSION_MASK
        section: bytes | memoryview = view[pos + _HEADER_SIZE : end]
        if codec != compression.NONE:
            section = compression.decompress(codec, section)
            compressed = True
        ts_type = 1 if attrs & _TIMESTAMP_TYPE_MASK else 0
        kept.append((base, base_ts, max_ts, ts_type, count, pos + _HEADER_SIZE, end))
        sections.append(section)
    if compressed:
        data = b"".join(sections)
        at = 0
        for i, section in enumerate(sections):
            base, base_ts, max_ts, ts_type, count, _pos, _end = kept[i]
            kept[i] = (base, base_ts, max_ts, ts_type, count, at, at + len(section))
            at += len(section)
    else:
        data = raw
    # Pass 2: the records.
    offsets: array[int] = array("q")
    timestamps: array[int] = array("q")
    ts_types: array[int] = array("b")
    key_bounds: array[int] = array(position_type)
    value_bounds: array[int] = array(position_type)
    key_nulls: list[int] = []
    value_nulls: list[int] = []
    headers: list[list[tuple[str, bytes | None]]] | None = [] if include_headers else None
    for base, base_ts, max_ts, ts_type, count, pos, end in kept:
        first_row = len(offsets)
        try:
            _walk(
                data,
                count,
                base,
                base_ts,
                start,
                until,
                pos,
                end,
                offsets,
                timestamps,
                key_bounds,
                value_bounds,
                key_nulls,
                value_nulls,
                headers,
            )
        except KafkaError:
            raise
        except (IndexError, UnicodeDecodeError, ValueError) as e:
            raise corrupt(f"malformed record in batch at offset {base}: {e}") from None
        added = len(offsets) - first_row
        if ts_type:
            # LogAppendTime: every record carries the batch's maxTimestamp.
            timestamps[first_row:] = array("q", [max_ts]) * added
        ts_types.extend(array("b", [ts_type]) * added)
    return RecordColumns(
        data,
        offsets,
        timestamps,
        ts_types,
        key_bounds,
        key_nulls,
        value_bounds,
        value_nulls,
        headers,
        next_offset,
    )


def _batch_bounds(buf: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each complete batch of ``buf``; a truncated trailing batch (as a Fetch may return)
    is left out."""
    pos = 0
    size = len(buf)
    while pos + _LOG_OVERHEAD <= size:
        (length,) = _LENGTH.unpack_from(buf, pos + 8)
        if length < _HEADER_SIZE - _LOG_OVERHEAD:
            raise corrupt(f"record batch at byte {pos} has invalid length {length}")
        end = pos + _LOG_OVERHEAD + length
        if end > size:
            return
        yield pos, end
        pos = end


def _walk(
    b: bytes,
    count: int,
    base: int,
    base_ts: int,
    start: int,
    until: int,
    p: int,
    end: int,
    offsets: array[int],
    timestamps: array[int],
    key_bounds: array[int],
    value_bounds: array[int],
    key_nulls: list[int],
    value_nulls: list[int],
    headers: list[list[tuple[str, bytes | None]]] | None,
) -> None:
    """The per-record loop: appends offsets, timestamps and key/value positions of the kept records.
    ``b`` is the joined buffer, the batch's records section is ``b[p:end]``. One- and two-byte varints,
    by far the most common, are decoded inline."""
    row = len(offsets)
    add_offset = offsets.append
    add_ts = timestamps.append
    add_key = key_bounds.append
    add_value = value_bounds.append
    for _ in range(count):
        x = b[p]
        if x < 0x80:
            length = (x >> 1) ^ -(x & 1)
            p += 1
        elif b[p + 1] < 0x80:
            u = (x & 0x7F) | (b[p + 1] << 7)
            length = (u >> 1) ^ -(u & 1)
            p += 2
        else:
            length, p = read_varint(b, p)
        rec_end = p + length
        if length < 6 or rec_end > end:
            raise corrupt(f"record length {length} at byte {p} is invalid")
        p += 1  # attributes
        x = b[p]
        if x < 0x80:
            ts_delta = (x >> 1) ^ -(x & 1)
            p += 1
        elif b[p + 1] < 0x80:
            u = (x & 0x7F) | (b[p + 1] << 7)
            ts_delta = (u >> 1) ^ -(u & 1)
            p += 2
        else:
            ts_delta, p = read_varint(b, p)
        x = b[p]
        if x < 0x80:
            off = base + ((x >> 1) ^ -(x & 1))
            p += 1
        else:
            delta, p = read_varint(b, p)
            off = base + delta
        if off < start or off >= until:
            p = rec_end
            continue
        x = b[p]
        if x < 0x80:
            n = (x >> 1) ^ -(x & 1)
            p += 1
        elif b[p + 1] < 0x80:
            u = (x & 0x7F) | (b[p + 1] << 7)
            n = (u >> 1) ^ -(u & 1)
            p += 2
        else:
            n, p = read_varint(b, p)
        add_key(p)
        if n < 0:
            key_nulls.append(row)
        else:
            p += n
        add_key(p)
        x = b[p]
        if x < 0x80:
            n = (x >> 1) ^ -(x & 1)
            p += 1
        elif b[p + 1] < 0x80:
            u = (x & 0x7F) | (b[p + 1] << 7)
            n = (u >> 1) ^ -(u & 1)
            p += 2
        else:
            n, p = read_varint(b, p)
        add_value(p)
        if n < 0:
            value_nulls.append(row)
        else:
            p += n
        add_value(p)
        if headers is not None:
            p = _headers(b, p, rec_end, headers)
        if p > rec_end:
            raise corrupt(f"record at offset {off} runs past its length")
        p = rec_end
        add_offset(off)
        add_ts(base_ts + ts_delta)
        row += 1


def _headers(b: bytes, p: int, rec_end: int, out: list[list[tuple[str, bytes | None]]]) -> int:
    n, p = read_varint(b, p)
    headers, p = read_headers(b, p, n, rec_end)
    out.append(headers)
    return p
