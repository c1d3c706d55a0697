"""Property tests of the primitive readers and writers."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rill.protocol import primitives as P
from rill.protocol.errors import ProtocolDecodeError


@given(st.integers(0, 2**32 - 1))
def test_uvarint_round_trip(v: int) -> None:
    raw = P.uvarint_bytes(v)
    assert len(raw) <= 5
    assert P.read_uvarint(raw, 0) == (v, len(raw))


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(v: int) -> None:
    out = bytearray()
    P.write_varint(out, v)
    assert P.read_varint(out, 0) == (v, len(out))


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(v: int) -> None:
    out = bytearray()
    P.write_varlong(out, v)
    assert len(out) <= 10
    assert P.read_varlong(out, 0) == (v, len(out))


def test_varint_known_bytes() -> None:
    # zigzag: 0 -> 0, -1 -> 1, 1 -> 2, 300 -> 600 = ac 04 unsigned
    known = ((0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (300, b"\xd8\x04"),
             (-(2**31), b"\xff\xff\xff\xff\x0f"))
    for v, raw in known:
        out = bytearray()
        P.write_varint(out, v)
        assert bytes(out) == raw
    assert P.uvarint_bytes(300) == b"\xac\x02"


def test_overlong_varints_are_errors() -> None:
    with pytest.raises(ProtocolDecodeError):
        P.read_uvarint(b"\xff\xff\xff\xff\xff\x01", 0)
    with pytest.raises(ProtocolDecodeError):
        P.read_uvarint(b"\xff\xff\xff\xff\x7f", 0)  # 35 bits
    with pytest.raises(ProtocolDecodeError):
        P.read_uvarint(b"\x80", 0)
    with pytest.raises(ProtocolDecodeError):
        P.read_uvarlong(b"\xff" * 11, 0)


@given(st.one_of(st.none(), st.text(max_size=300)), st.booleans())
def test_strings(s: str | None, compact: bool) -> None:
    out = bytearray()
    if compact:
        P.write_compact_nullable_string(out, s)
        assert P.read_compact_nullable_string(out, 0) == (s, len(out))
    else:
        P.write_nullable_string(out, s)
        assert P.read_nullable_string(out, 0) == (s, len(out))


@given(st.one_of(st.none(), st.binary(max_size=300)), st.booleans())
def test_bytes_are_views(b: bytes | None, compact: bool) -> None:
    out = bytearray()
    (P.write_compact_nullable_bytes if compact else P.write_nullable_bytes)(out, b)
    got, end = (P.read_compact_nullable_bytes if compact else P.read_nullable_bytes)(bytes(out), 0)
    assert end == len(out)
    assert (None if got is None else bytes(got)) == b
    assert got is None or isinstance(got, memoryview)


@given(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1), st.floats(allow_nan=False))
def test_fixed(a: int, b: int, f: float) -> None:
    out = bytearray()
    P.write_int64(out, a)
    P.write_int32(out, b)
    P.write_float64(out, f)
    P.write_bool(out, True)
    v1, p = P.read_int64(out, 0)
    v2, p = P.read_int32(out, p)
    v3, p = P.read_float64(out, p)
    v4, p = P.read_bool(out, p)
    assert (v1, v2, v3, v4, p) == (a, b, f, True, len(out))
    with pytest.raises(ProtocolDecodeError):
        P.read_int64(out, len(out) - 3)


@given(st.uuids())
def test_uuid(u: uuid.UUID) -> None:
    out = bytearray()
    P.write_uuid(out, u)
    assert P.read_uuid(out, 0) == (u, 16)


@given(st.dictionaries(st.integers(0, 1000), st.binary(max_size=20), max_size=5))
def test_tagged_fields_round_trip_and_skip(fields: dict[int, bytes]) -> None:
    out = bytearray()
    P.write_tagged_fields(out, fields)
    out += b"\x2a"
    got, end = P.read_tagged_fields(out, 0)
    assert {k: bytes(v) for k, v in got.items()} == fields
    assert P.skip_tagged_fields(out, 0) == end == len(out) - 1


@given(st.binary(max_size=12))
def test_readers_only_raise_decode_errors(raw: bytes) -> None:
    for reader in (P.read_nullable_string, P.read_compact_nullable_string, P.read_nullable_bytes,
                   P.read_compact_nullable_bytes, P.read_uvarint, P.read_varlong, P.read_uuid,
                   P.skip_tagged_fields):
        with contextlib.suppress(ProtocolDecodeError):
            reader(raw, 0)
    for compact in (True, False):
        with contextlib.suppress(ProtocolDecodeError):
            P.read_array_length(raw, 0, compact)
