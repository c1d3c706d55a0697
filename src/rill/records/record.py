"""Records inside a v2 record batch (after the 61-byte batch header, decompressed).

Each record, with varints zigzag-encoded as in protobuf::

    length           varint    bytes of the record after this field
    attributes       int8      unused, 0
    timestampDelta   varlong   timestamp - batch baseTimestamp
    offsetDelta      varint    offset - batch baseOffset
    keyLength        varint    -1 for a null key
    key              bytes
    valueLength      varint    -1 for a null value
    value            bytes
    headersCount     varint
    headers          per header: keyLength varint, key (UTF-8), valueLength varint (-1 null), value

Batch header fields this module reads (big-endian; the full layout is in ``rill.records.batch``)::

    0 baseOffset int64 | 8 batchLength int32 | 12 partitionLeaderEpoch int32 | 16 magic int8 | 17 crc uint32 |
    21 attributes int16 | 23 lastOffsetDelta int32 | 27 baseTimestamp int64 | 35 maxTimestamp int64 |
    43 producerId int64 | 51 producerEpoch int16 | 53 baseSequence int32 | 57 recordsCount int32 | 61 records
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from crc32c_rs import crc32c

from rill.errors import ErrorCode, KafkaError
from rill.records import compression
from rill.records.batch import (
    ATTRIBUTES_POS,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    check_framing,
    parse_header,
)
from rill.records.batch import (
    CONTROL_MASK as CONTROL_MASK,
)

Buffer = bytes | bytearray | memoryview

HEADER = HEADER_STRUCT
HEADER_SIZE = BATCH_HEADER_SIZE
CRC_START = ATTRIBUTES_POS


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, message)


# -- varints (inlined fast path for the one-byte case) -------------------------------------------------------


def read_varint(b: bytes, p: int) -> tuple[int, int]:
    x = b[p]
    if x < 0x80:
        return (x >> 1) ^ -(x & 1), p + 1
    u = x & 0x7F
    shift = 7
    while True:
        p += 1
        x = b[p]
        u |= (x & 0x7F) << shift
        if x < 0x80:
            return (u >> 1) ^ -(u & 1), p + 1
        shift += 7
        if shift > 63:
            raise corrupt("varint longer than 10 bytes")


def write_varint(out: bytearray, v: int) -> None:
    """Append a zigzag varint (64-bit range)."""
    u = ((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


# -- records -----------------------------------------------------------------------------------------------


def read_headers(b: bytes, p: int, count: int, rec_end: int) -> tuple[list[tuple[str, bytes | None]], int]:
    """The ``count`` headers of a record starting at ``p``; they must end exactly at ``rec_end``."""
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        hk, p = read_varint(b, p)
        if hk < 0 or p + hk > rec_end:
            raise corrupt("invalid header key length")
        hkey = str(b[p : p + hk], "utf-8")
        p += hk
        hv, p = read_varint(b, p)
        if hv < 0:
            headers.append((hkey, None))
        else:
            headers.append((hkey, b[p : p + hv]))
            p += hv
    if p != rec_end:
        raise corrupt(f"record ends at byte {p}, its length says {rec_end}")
    return headers, p


def decode_records(
    b: bytes, count: int, base_offset: int, base_timestamp: int, log_append_time: int | None = None
) -> list[Record]:
    """Decode ``count`` records from the (decompressed) records section ``b``.

    With ``log_append_time`` set, every record takes that timestamp (LogAppendTime batches).
    """
    records: list[Record] = []
    append = records.append
    p = 0
    end = len(b)
    try:
        for _ in range(count):
            x = b[p]
            if x < 0x80:
                length, p = (x >> 1) ^ -(x & 1), p + 1
            else:
                length, p = read_varint(b, p)
            rec_end = p + length
            if length < 6 or rec_end > end:
                raise corrupt(f"record length {length} at byte {p} is invalid")
            p += 1  # attributes
            ts_delta, p = read_varint(b, p)
            x = b[p]
            if x < 0x80:
                off_delta, p = (x >> 1) ^ -(x & 1), p + 1
            else:
                off_delta, p = read_varint(b, p)
            x = b[p]
            if x < 0x80:
                n, p = (x >> 1) ^ -(x & 1), p + 1
            else:
                n, p = read_varint(b, p)
            if n < 0:
                key = None
            else:
                key = b[p : p + n]
                p += n
            x = b[p]
            if x < 0x80:
                n, p = (x >> 1) ^ -(x & 1), p + 1
            else:
                n, p = read_varint(b, p)
            if n < 0:
                value = None
            else:
                value = b[p : p + n]
                p += n
            x = b[p]
            if x < 0x80:
                n, p = (x >> 1) ^ -(x & 1), p + 1
            else:
                n, p = read_varint(b, p)
            headers, p = read_headers(b, p, n, rec_end)
            append(
                Record(
                    base_offset + off_delta,
                    base_timestamp + ts_delta if log_append_time is None else log_append_time,
                    key,
                    value,
                    headers,
                )
            )
    except KafkaError:
        raise
    except (IndexError, UnicodeDecodeError, ValueError) as e:
        raise corrupt(f"malformed record: {e}") from None
    return records


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: Buffer | None,
    value: Buffer | None,
    headers: list[tuple[str, bytes | None]] | None = None,
) -> None:
    """Append one record (length prefix included) to ``out``."""
    body = bytearray(b"\x00")
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    if key is None:
        body.append(1)  # zigzag(-1)
    else:
        write_varint(body, len(key))
        body += key
    if value is None:
        body.append(1)
    else:
        write_varint(body, len(value))
        body += value
    if not headers:
        body.append(0)
    else:
        write_varint(body, len(headers))
        for hkey, hval in headers:
            raw = hkey.encode()
            write_varint(body, len(raw))
            body += raw
            if hval is None:
                body.append(1)
            else:
                write_varint(body, len(hval))
                body += hval
    write_varint(out, len(body))
    out += body


# -- batches -----------------------------------------------------------------------------------------------


def decode_batch_records(batch: Buffer, *, verify_crc: bool = True) -> list[Record]:
    """All records of one v2 batch (decompressed), with absolute offsets and timestamps."""
    view = memoryview(batch)
    h = parse_header(view)
    check_framing(view, 0, h)
    size = h.size
    body = view[HEADER_SIZE:size]
    if verify_crc and crc32c(view[CRC_START:size]) != h.crc:
        raise corrupt("record batch CRC mismatch")
    if h.records_count < 0:
        raise corrupt(f"negative record count {h.records_count}")
    data = compression.decompress(h.attributes & COMPRESSION_MASK, body)
    lat = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else None
    return decode_records(data, h.records_count, h.base_offset, h.base_timestamp, lat)


def iter_batch_views(buf: Buffer) -> Iterator[memoryview]:
    """Each complete batch in ``buf`` as a view; a truncated trailing batch (as a Fetch may return) is
    left out."""
    view = memoryview(buf)
    pos = 0
    while pos + LOG_OVERHEAD <= len(view):
        (length,) = struct.unpack_from(">i", view, pos + 8)
        if length < HEADER_SIZE - LOG_OVERHEAD:
            raise corrupt(f"record batch at byte {pos} has invalid length {length}")
        end = pos + LOG_OVERHEAD + length
        if end > len(view):
            return
        yield view[pos:end]
        pos = end


def decode_records_in(buf: Buffer, *, include_control: bool = False) -> list[Record]:
    """The records of every complete batch in ``buf`` (a records field of a Fetch response, a log slice);
    control batches (transaction markers) are skipped unless asked for."""
    out: list[Record] = []
    for batch in iter_batch_views(buf):
        (attributes,) = struct.unpack_from(">h", batch, CRC_START)
        if attributes & CONTROL_MASK and not include_control:
            continue
        out.extend(decode_batch_records(batch))
    return out
