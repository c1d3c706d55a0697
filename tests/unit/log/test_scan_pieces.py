"""The records of a compressed batch are scanned piece by piece as they decompress: whatever the piece
size, and wherever a record (or its length field) is cut, the outcome is the one of scanning the
same records uncompressed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rill.errors import KafkaError
from rill.log import log_validator
from rill.log.log_config import LogConfig
from rill.records.compression import GZIP, LZ4, ZSTD, compress
from rill.records.record import encode_record

pytestmark = pytest.mark.timeout(300)

HEADER = bytes(61)  # scan_batch_records reads only what follows the header


def outcome(raw: bytes, codec: int, count: int) -> object:
    body = compress(codec, raw) if codec else raw
    try:
        return log_validator.scan_batch_records(memoryview(HEADER + body), codec, count, LogConfig())
    except KafkaError as e:
        return (e.code, e.message)


record_st = st.tuples(
    st.integers(-1000, 1000),  # timestamp delta
    st.one_of(st.none(), st.binary(max_size=30)),
    st.one_of(st.none(), st.binary(max_size=400)),
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(record_st, min_size=1, max_size=12),
    st.sampled_from([GZIP, LZ4, ZSTD]),
    st.integers(1, 300),
    st.data(),
)
def test_pieces_of_any_size_give_the_plain_outcome(
    records: list[tuple[int, bytes | None, bytes | None]], codec: int, chunk: int, data: st.DataObject
) -> None:
    raw = bytearray()
    for i, (ts, key, value) in enumerate(records):
        encode_record(raw, i, ts, key, value)
    if data.draw(st.booleans()):  # damage some of the time
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    count = data.draw(st.sampled_from([len(records), len(records) + 1, max(1, len(records) - 1)]))
    expected = outcome(bytes(raw), 0, count)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(log_validator, "_SCAN_CHUNK", chunk)
        assert outcome(bytes(raw), codec, count) == expected


def _plain_records(n: int, value_size: int) -> bytes:
    raw = bytearray()
    for i in range(n):
        encode_record(raw, i, 0, b"k", bytes(value_size))
    return bytes(raw)


@pytest.mark.parametrize("chunk", range(1, 9))
def test_length_fields_cut_between_pieces(chunk: int) -> None:
    good = _plain_records(3, 200)  # 2-byte length fields
    too_long = _plain_records(1, 0) + b"\x80\x80\x80\x80\x80\x01" + bytes(10)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(log_validator, "_SCAN_CHUNK", chunk)
        for raw, count in ((good, 3), (too_long, 2)):
            for codec in (GZIP, LZ4, ZSTD):
                assert outcome(raw, codec, count) == outcome(raw, 0, count)
    assert outcome(too_long, 0, 2)[1] == "record 1: varint longer than 5 bytes"  # type: ignore[index]
