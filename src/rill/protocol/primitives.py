"""Kafka protocol primitive types: how each one is laid out in bytes.

All integers are big-endian two's complement unless stated otherwise.

    int8 / int16 / int32 / int64      1 / 2 / 4 / 8 bytes, signed
    uint16 / uint32                   2 / 4 bytes, unsigned
    float64                           8 bytes, IEEE 754 double
    bool                              1 byte, 0 is false, anything else true
    uuid                              16 bytes
    unsigned varint                   7 bits per byte, least significant group first, high bit = "more"
                                      (at most 5 bytes for 32-bit values, 10 for 64-bit)
    varint / varlong                  zigzag-encoded signed value ((n << 1) ^ (n >> 63)) as an unsigned varint
    string                            int16 length N, then N bytes of UTF-8; nullable: length -1 is null
    compact string                    unsigned varint N+1, then N bytes; 0 is null
    bytes                             int32 length N, then N bytes; nullable: -1 is null
    compact bytes                     unsigned varint N+1, then N bytes; 0 is null
    records                           same framing as bytes (compact bytes in flexible versions)
    array                             int32 count N (-1 is null), then N elements
    compact array                     unsigned varint N+1 (0 is null), then N elements
    tagged fields                     unsigned varint count, then per field: unsigned varint tag,
                                      unsigned varint size, size bytes of value (KIP-482; unknown tags
                                      are skipped by size)

Readers take ``(buf, pos)`` and return ``(value, new_pos)``; they raise ``ProtocolDecodeError`` on short or
malformed input.  Writers append to a ``bytearray``.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from rill.protocol.errors import ProtocolDecodeError

Buffer = bytes | bytearray | memoryview

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")

ZERO_UUID = uuid.UUID(int=0)

# Fixed-width types: struct format character and width.
FIXED_FORMATS: dict[str, tuple[str, int]] = {
    "bool": ("?", 1),
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "uint32": ("I", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
}


def _short(pos: int) -> ProtocolDecodeError:
    return ProtocolDecodeError(f"buffer underflow at byte {pos}")


# -- fixed width ----------------------------------------------------------------------------------------


def _fixed_reader(s: struct.Struct) -> Any:
    size = s.size
    unpack_from = s.unpack_from

    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        if pos + size > len(buf):
            raise _short(pos)
        return unpack_from(buf, pos)[0], pos + size

    return read


read_int8 = _fixed_reader(INT8)
read_int16 = _fixed_reader(INT16)
read_int32 = _fixed_reader(INT32)
read_int64 = _fixed_reader(INT64)
read_uint16 = _fixed_reader(UINT16)
read_uint32 = _fixed_reader(UINT32)
read_float64 = _fixed_reader(FLOAT64)


def read_bool(buf: Buffer, pos: int) -> tuple[bool, int]:
    if pos >= len(buf):
        raise _short(pos)
    return buf[pos] != 0, pos + 1


def write_int8(out: bytearray, v: int) -> None:
    out += INT8.pack(v)


def write_int16(out: bytearray, v: int) -> None:
    out += INT16.pack(v)


def write_int32(out: bytearray, v: int) -> None:
    out += INT32.pack(v)


def write_int64(out: bytearray, v: int) -> None:
    out += INT64.pack(v)


def write_uint16(out: bytearray, v: int) -> None:
    out += UINT16.pack(v)


def write_uint32(out: bytearray, v: int) -> None:
    out += UINT32.pack(v)


def write_float64(out: bytearray, v: float) -> None:
    out += FLOAT64.pack(v)


def write_bool(out: bytearray, v: bool) -> None:
    out.append(1 if v else 0)


def read_uuid(buf: Buffer, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(buf):
        raise _short(pos)
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


def uuid_bytes(v: uuid.UUID | bytes | None) -> bytes:
    """The 16 wire bytes of a uuid given as ``uuid.UUID`` or 16 raw bytes (None is the zero uuid)."""
    if v is None:
        return bytes(16)
    if isinstance(v, uuid.UUID):
        return v.bytes
    if len(v) != 16:
        raise ValueError(f"a uuid is 16 bytes, got {len(v)}")
    return bytes(v)


def write_uuid(out: bytearray, v: uuid.UUID | bytes | None) -> None:
    out += uuid_bytes(v)


# -- varints --------------------------------------------------------------------------------------------


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (32 bits)."""
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        result = b & 0x7F
        shift = 7
        while True:
            pos += 1
            b = buf[pos]
            result |= (b & 0x7F) << shift
            if b < 0x80:
                if shift == 28 and b > 0x0F:
                    raise ProtocolDecodeError("unsigned varint exceeds 32 bits")
                return result, pos + 1
            shift += 7
            if shift > 28:
                raise ProtocolDecodeError("unsigned varint longer than 5 bytes")
    except IndexError:
        raise _short(pos) from None


def read_uvarlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 10 bytes (64 bits)."""
    result = 0
    shift = 0
    try:
        while True:
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                if result >> 64:
                    raise ProtocolDecodeError("unsigned varlong exceeds 64 bits")
                return result, pos
            shift += 7
            if shift > 63:
                raise ProtocolDecodeError("unsigned varlong longer than 10 bytes")
    except IndexError:
        raise _short(pos) from None


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """A zigzag-encoded signed 32-bit varint."""
    u, pos = read_uvarint(buf, pos)
    return (u >> 1) ^ -(u & 1), pos


def read_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """A zigzag-encoded signed 64-bit varint."""
    u, pos = read_uvarlong(buf, pos)
    return (u >> 1) ^ -(u & 1), pos


def uvarint_bytes(v: int) -> bytes:
    if v < 0:
        raise ValueError(f"unsigned varint cannot hold {v}")
    if v < 0x80:
        return bytes((v,))
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def write_uvarint(out: bytearray, v: int) -> None:
    if 0 <= v < 0x80:
        out.append(v)
    else:
        out += uvarint_bytes(v)


def zigzag32(v: int) -> int:
    if not -(1 << 31) <= v < (1 << 31):
        raise ValueError(f"varint out of range: {v}")
    return ((v << 1) ^ (v >> 31)) & 0xFFFFFFFF


def zigzag64(v: int) -> int:
    if not -(1 << 63) <= v < (1 << 63):
        raise ValueError(f"varlong out of range: {v}")
    return ((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF


def write_varint(out: bytearray, v: int) -> None:
    write_uvarint(out, zigzag32(v))


def write_varlong(out: bytearray, v: int) -> None:
    write_uvarint(out, zigzag64(v))


# -- strings, bytes, records ------------------------------------------------------------------------------


def _span(buf: Buffer, pos: int, n: int) -> int:
    end = pos + n
    if n < 0 or end > len(buf):
        raise ProtocolDecodeError(f"length {n} at byte {pos} runs past the end of the buffer")
    return end


def _decode_utf8(raw: Buffer) -> str:
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolDecodeError(f"invalid UTF-8 in string: {e}") from None


def read_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    n, pos = read_int16(buf, pos)
    if n < 0:
        if n != -1:
            raise ProtocolDecodeError(f"negative string length {n}")
        return None, pos
    end = _span(buf, pos, n)
    return _decode_utf8(buf[pos:end]), end


def read_string(buf: Buffer, pos: int) -> tuple[str, int]:
    s, pos = read_nullable_string(buf, pos)
    if s is None:
        raise ProtocolDecodeError("null in a non-nullable string")
    return s, pos


def read_compact_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = _span(buf, pos, n - 1)
    return _decode_utf8(buf[pos:end]), end


def read_compact_string(buf: Buffer, pos: int) -> tuple[str, int]:
    s, pos = read_compact_nullable_string(buf, pos)
    if s is None:
        raise ProtocolDecodeError("null in a non-nullable compact string")
    return s, pos


def write_nullable_string(out: bytearray, v: str | None) -> None:
    if v is None:
        out += b"\xff\xff"
        return
    raw = v.encode()
    if len(raw) > 0x7FFF:
        raise ValueError(f"string of {len(raw)} bytes is longer than 32767")
    out += INT16.pack(len(raw))
    out += raw


write_string = write_nullable_string


def write_compact_nullable_string(out: bytearray, v: str | None) -> None:
    if v is None:
        out.append(0)
        return
    raw = v.encode()
    write_uvarint(out, len(raw) + 1)
    out += raw


write_compact_string = write_compact_nullable_string


def read_nullable_bytes(buf: Buffer, pos: int) -> tuple[memoryview | None, int]:
    """A view into ``buf`` (no copy), or None."""
    n, pos = read_int32(buf, pos)
    if n < 0:
        if n != -1:
            raise ProtocolDecodeError(f"negative bytes length {n}")
        return None, pos
    end = _span(buf, pos, n)
    return memoryview(buf)[pos:end], end


def read_compact_nullable_bytes(buf: Buffer, pos: int) -> tuple[memoryview | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = _span(buf, pos, n - 1)
    return memoryview(buf)[pos:end], end


def write_nullable_bytes(out: bytearray, v: Buffer | None) -> None:
    if v is None:
        out += b"\xff\xff\xff\xff"
        return
    out += INT32.pack(len(v))
    out += v


def write_compact_nullable_bytes(out: bytearray, v: Buffer | None) -> None:
    if v is None:
        out.append(0)
        return
    write_uvarint(out, len(v) + 1)
    out += v


# Records use the framing of (compact) nullable bytes.
read_records = read_nullable_bytes
read_compact_records = read_compact_nullable_bytes
write_records = write_nullable_bytes
write_compact_records = write_compact_nullable_bytes


# -- arrays ----------------------------------------------------------------------------------------------


def read_array_length(buf: Buffer, pos: int, compact: bool) -> tuple[int, int]:
    """The element count of an (compact) array; -1 means null."""
    if compact:
        n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        n, pos = read_int32(buf, pos)
        if n < -1:
            raise ProtocolDecodeError(f"negative array length {n}")
    if n > len(buf) - pos:
        raise ProtocolDecodeError(f"array of {n} elements cannot fit in {len(buf) - pos} bytes")
    return n, pos


def write_array_length(out: bytearray, n: int | None, compact: bool) -> None:
    if compact:
        write_uvarint(out, 0 if n is None else n + 1)
    else:
        out += INT32.pack(-1 if n is None else n)


# -- tagged fields ----------------------------------------------------------------------------------------


def skip_tagged_fields(buf: Buffer, pos: int) -> int:
    """Skip a whole tagged-field section (all tags unknown to the reader)."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos = _span(buf, pos, size)
    return pos


def read_tagged_fields(buf: Buffer, pos: int) -> tuple[dict[int, memoryview], int]:
    """A tagged-field section as ``{tag: raw value bytes}``."""
    count, pos = read_uvarint(buf, pos)
    fields: dict[int, memoryview] = {}
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = _span(buf, pos, size)
        fields[tag] = memoryview(buf)[pos:end]
        pos = end
    return fields, pos


def write_tagged_fields(out: bytearray, fields: dict[int, bytes]) -> None:
    """Write a tagged-field section, tags in ascending order as the protocol requires."""
    write_uvarint(out, len(fields))
    for tag in sorted(fields):
        raw = fields[tag]
        write_uvarint(out, tag)
        write_uvarint(out, len(raw))
        out += raw
