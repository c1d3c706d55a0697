"""The record scanner: the compiled ``rill.records._scan`` and its pure-Python twin agree on every
input, well formed or not, and both find what a v2 record batch's records hold."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from rill.records import _scan, scan
from rill.records.batch import BATCH_HEADER_SIZE, HEADER_STRUCT, parse_header
from rill.records.builder import build_batch
from rill.records.record import Record, encode_record, write_varint

pytestmark = pytest.mark.timeout(120)

BASE_TS = 1_700_000_000_000


def c_scan(data: bytes, count: int, index: int, *bounds: int) -> scan.ScanResult:
    return scan.ScanResult._make(_scan.scan_records(data, count, index, *bounds))


def outcome(fn, *args):  # type: ignore[no-untyped-def]
    """What a call returns, or the message of the ValueError it raises."""
    try:
        return fn(*args)
    except ValueError as e:
        return ("error", str(e))


def both_scans(data: bytes, count: int, index: int = 0, *bounds: int):  # type: ignore[no-untyped-def]
    c = outcome(c_scan, data, count, index, *bounds)
    py = outcome(scan.py_scan_records, data, count, index, *bounds)
    assert c == py
    return c


def both_checks(view: bytes | bytearray, max_bytes: int = 1 << 30, require_keys: bool = False):  # type: ignore[no-untyped-def]
    c = _scan.check_batch(view, max_bytes, require_keys)
    assert c == scan.py_check_batch(view, max_bytes, require_keys)
    return c


def test_the_extension_is_built_and_used() -> None:
    # CI installs with a compiler: the broker's append path must run the compiled scanner.
    assert scan.ACCELERATED
    assert scan.check_batch is _scan.check_batch


record_st = st.builds(
    Record,
    st.just(0),
    st.integers(-(2**40), 2**40).map(lambda d: BASE_TS + d),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(record_st, min_size=1, max_size=30))
def test_well_formed_records_are_read_whole(records: list[Record]) -> None:
    batch = build_batch(records)
    body = batch[BATCH_HEADER_SIZE:]
    found = both_scans(body, len(records))
    base = records[0].timestamp
    deltas = [r.timestamp - base for r in records]
    nulls = [i for i, r in enumerate(records) if r.key is None]
    assert found == (len(body), len(records), min(deltas), max(deltas), nulls[0] if nulls else -1, -1, -1, 0)
    assert both_checks(batch) == HEADER_STRUCT.unpack_from(batch)
    assert (both_checks(batch, require_keys=True) is None) == bool(nulls)


INT64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=500, deadline=None)
@given(st.lists(record_st, min_size=1, max_size=20), st.data())
def test_the_first_timestamp_outside_the_bounds_is_named(records: list[Record], data: st.DataObject) -> None:
    body = build_batch(records)[BATCH_HEADER_SIZE:]
    deltas = [r.timestamp - records[0].timestamp for r in records]
    # The base the caller passes, and bounds drawn around the records' own timestamps or at the ends
    # of the int64 range (a base + delta past int64 is outside; -1, no timestamp, always passes).
    base = data.draw(st.one_of(st.just(records[0].timestamp), st.just(-1 - deltas[-1]), INT64))
    near = st.sampled_from([base + d + k for d in deltas for k in (-1, 0, 1)])
    low, high = sorted((data.draw(st.one_of(near, INT64)), data.draw(st.one_of(near, INT64))))
    low, high = (min(max(x, -(2**63)), 2**63 - 1) for x in (low, high))  # bounds are int64, as the broker passes them
    outside = [
        i
        for i, d in enumerate(deltas)
        if base + d != -1 and not (low <= base + d <= high and -(2**63) <= base + d < 2**63)
    ]
    found = both_scans(body, len(records), 0, base, low, high)
    assert (found.bad_time, found.bad_time_delta) == ((outside[0], deltas[outside[0]]) if outside else (-1, 0))
    # Scanned in two calls, the second numbering from where the first stopped, the same record is named.
    cut = data.draw(st.integers(0, len(body)))
    first = both_scans(body[:cut], len(records), 0, base, low, high)
    second = both_scans(body[first.consumed :], len(records), first.next_record, base, low, high)
    named = first if first.bad_time >= 0 else second
    assert (named.bad_time, named.bad_time_delta) == (found.bad_time, found.bad_time_delta)


def test_scan_records_takes_no_bounds_or_all_three() -> None:
    body = build_batch([Record(0, BASE_TS, b"k", b"v", [])])[BATCH_HEADER_SIZE:]
    for fn in (_scan.scan_records, scan.py_scan_records):
        with pytest.raises(TypeError, match="takes 3 or 6 arguments, 4 given"):
            fn(body, 1, 0, BASE_TS)


@settings(max_examples=300, deadline=None)
@given(st.lists(record_st, min_size=1, max_size=12), st.data())
def test_any_split_resumes_where_the_last_whole_record_ended(records: list[Record], data: st.DataObject) -> None:
    body = build_batch(records)[BATCH_HEADER_SIZE:]
    cut = data.draw(st.integers(0, len(body)))
    first = both_scans(body[:cut], len(records))
    assert isinstance(first, scan.ScanResult)
    second = both_scans(body[first.consumed :], len(records), first.next_record)
    assert isinstance(second, scan.ScanResult)
    assert (second.next_record, first.consumed + second.consumed) == (len(records), len(body))


@settings(max_examples=1500, deadline=None)
@given(st.lists(record_st, min_size=1, max_size=8), st.data())
def test_both_scanners_agree_on_damaged_records(records: list[Record], data: st.DataObject) -> None:
    body = bytearray(build_batch(records)[BATCH_HEADER_SIZE:])
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        at = data.draw(st.integers(0, max(0, len(body) - 1)))
        if kind == "flip" and body:
            body[at] = data.draw(st.integers(0, 255))
        elif kind == "insert":
            body[at:at] = data.draw(st.binary(min_size=1, max_size=6))
        elif body:
            del body[at : at + data.draw(st.integers(1, 6))]
    count = data.draw(st.sampled_from([len(records), len(records) + 1, max(1, len(records) - 1), 2**31 - 1]))
    both_scans(bytes(body), count)
    both_scans(bytes(body), count, 0, BASE_TS, BASE_TS - 2**39, BASE_TS + 2**39)
    # The same damage behind a valid header and CRC, so that the batch checks reach the records.
    batch = bytearray(build_batch(records)[:BATCH_HEADER_SIZE]) + body
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">i", batch, 57, count)
    struct.pack_into(">i", batch, 23, count - 1)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    both_checks(bytes(batch))


def record(*fields: int, raw: bytes = b"", length: int | None = None) -> bytes:
    """A record from varint ``fields`` (attributes byte first), ``raw`` bytes after them."""
    body = bytearray(fields[:1])
    for f in fields[1:]:
        write_varint(body, f)
    body += raw
    out = bytearray()
    write_varint(out, len(body) if length is None else length)
    return bytes(out + body)


GOOD = record(0, 0, 0, -1, -1, 0)  # null key, null value, no headers


@pytest.mark.parametrize(
    ("data", "count", "message"),
    [
        (record(0, 0, 0, -1, -1, 0, length=5), 1, "record 0: invalid record length 5"),
        (record(0, 0, 0, -1, -1, -2), 1, "record 0: invalid number of headers -2"),
        (record(0, 0, 0, -1, -1, 1, -1, -1), 1, "record 0: invalid header key length -1"),
        (record(0, 0, 0, 5, -1, 0), 1, "record 0: fields run past the record's length 6"),
        (record(0, 0, 0, -1, -1, 0, raw=b"xx"), 1, "record 0: fields end at byte 6 of the record, its length says 8"),
        (GOOD + b"\x80\x80\x80\x80\x80\x01", 2, "record 1: varint longer than 5 bytes"),
        (GOOD + b"\x18\x00" + b"\xff" * 10 + b"\x00", 2, "record 1: varint longer than 10 bytes"),
    ],
    ids=["short", "negative-headers", "header-key", "key-overrun", "slack", "length-varint", "timestamp-varlong"],
)
def test_malformed_records_are_named(data: bytes, count: int, message: str) -> None:
    assert both_scans(data, count) == ("error", message)


def test_negative_lengths_other_than_minus_one_mean_null_as_in_kafka() -> None:
    data = record(0, 0, 0, -7, -3, 1, 0, -9)
    assert both_scans(data, 1) == (len(data), 1, 0, 0, 0, -1, -1, 0)


def test_a_fifth_varint_byte_keeps_only_the_bits_of_an_int32() -> None:
    length = bytes([0x8C, 0x80, 0x80, 0x80, 0x10])  # zigzag 12 (6) plus bit 32, which an int32 drops
    data = length + record(0, 0, 0, -1, -1, 0)[1:]  # the 6 bytes of a record's fields
    found = both_scans(data, 1)
    assert found == (len(data), 1, 0, 0, 0, -1, -1, 0)


def test_offset_deltas_and_timestamps_are_reported() -> None:
    data = record(0, 10, 0, 0, -1, 0) + record(0, -4, 7, 0, -1, 0)
    assert both_scans(data, 2) == (len(data), 2, -4, 10, -1, 1, -1, 0)


def test_nothing_read_reports_no_timestamps() -> None:
    assert both_scans(b"", 3) == (0, 0, None, None, -1, -1, -1, 0)
    assert both_scans(b"\x80", 3) == (0, 0, None, None, -1, -1, -1, 0)  # the length varint is cut off
    assert both_scans(GOOD, 0) == (0, 0, None, None, -1, -1, -1, 0)


def test_check_batch_refuses_what_the_general_path_must_name() -> None:
    records = [Record(0, BASE_TS + i, b"k", b"v" * 10) for i in range(3)]
    good = build_batch(records)
    assert both_checks(good) is not None
    assert both_checks(good, max_bytes=len(good) - 1) is None
    assert both_checks(good + b"\x00") is None  # not exactly one batch
    wrong_max = bytearray(good)
    struct.pack_into(">q", wrong_max, 35, BASE_TS + 7)  # maxTimestamp not the records' largest
    struct.pack_into(">I", wrong_max, 17, crc32c(bytes(wrong_max[21:])))
    assert both_checks(wrong_max) is None
    more = bytearray(good)
    struct.pack_into(">i", more, 57, 4)  # declares 4 records, holds 3
    struct.pack_into(">i", more, 23, 3)
    struct.pack_into(">I", more, 17, crc32c(bytes(more[21:])))
    assert both_checks(more) is None
    assert parse_header(good).records_count == 3


flag_st = st.lists(
    st.tuples(st.booleans(), st.booleans(), st.integers(-5000, 5000)),  # keyless, misplaced, timestamp delta
    min_size=1,
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(flag_st, st.data())
def test_flag_records_notes_every_record_a_check_refuses(
    records: list[tuple[bool, bool, int]], data: st.DataObject
) -> None:
    """``flag_records`` (compiled and twin alike) notes every record with a null key, an offset delta
    other than its index or a timestamp outside the bounds, not only the first of each, and returns
    what ``scan_records`` returns; split anywhere, the two calls note the same records."""
    body = bytearray()
    for i, (keyless, misplaced, delta) in enumerate(records):
        encode_record(body, i + 1 if misplaced else i, delta, None if keyless else b"k", b"v")
    low, high = BASE_TS - 1000, BASE_TS + 1000
    expected = [
        (i, int(keyless), int(misplaced), int(not low <= BASE_TS + delta <= high), delta)
        for i, (keyless, misplaced, delta) in enumerate(records)
        if keyless or misplaced or not low <= BASE_TS + delta <= high
    ]
    for bounds in ((), (BASE_TS, low, high)):
        want = expected if bounds else [(i, k, m, 0, d) for i, k, m, _, d in expected if k or m]
        c_flagged: list[scan.Flagged] = []
        py_flagged: list[scan.Flagged] = []
        c = scan.ScanResult._make(_scan.flag_records(c_flagged, bytes(body), len(records), 0, *bounds))
        py = scan.py_flag_records(py_flagged, bytes(body), len(records), 0, *bounds)
        assert c == py == both_scans(bytes(body), len(records), 0, *bounds)
        assert c_flagged == py_flagged == want
        cut = data.draw(st.integers(0, len(body)))
        split: list[scan.Flagged] = []
        first = scan.flag_records(split, bytes(body[:cut]), len(records), 0, *bounds)
        scan.flag_records(split, bytes(body[first.consumed :]), len(records), first.next_record, *bounds)
        assert split == want
