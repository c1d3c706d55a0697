"""The columnar decoder agrees with the object decoder (``decode_batch_records``) on every batch shape:
all codecs, null keys and values, headers, offset gaps (compaction), LogAppendTime, control batches,
ranges cut inside batches, and a truncated trailing batch. The Arrow assembly is checked the same way."""

from __future__ import annotations

import struct
from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rill.records import compression
from rill.records.columnar import decode_columns
from rill.records.record import decode_batch_records, encode_record

pytestmark = pytest.mark.timeout(120)

HEADER = struct.Struct(">qiibIhiqqqhii")
CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]

blobs = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3)
records = st.lists(
    st.tuples(st.integers(1, 3), st.integers(-5_000, 5_000), blobs, blobs, headers), min_size=1, max_size=40
)


def make_batch(
    base_offset: int,
    base_ts: int,
    recs: list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    codec: int,
    *,
    log_append_time: int | None = None,
    control: bool = False,
) -> tuple[bytes, int]:
    """A v2 batch whose records sit at cumulative offset steps (gaps as compaction leaves them)."""
    raw = bytearray()
    delta = -1
    max_ts = base_ts
    for step, ts_delta, key, value, hs in recs:
        delta += step
        encode_record(raw, delta, ts_delta, key, value, hs)
        max_ts = max(max_ts, base_ts + ts_delta)
    attrs = codec | (0x08 if log_append_time is not None else 0) | (0x20 if control else 0)
    if log_append_time is not None:
        max_ts = log_append_time
    body = compression.compress(codec, bytes(raw)) if codec else bytes(raw)
    header = bytearray(
        HEADER.pack(base_offset, 49 + len(body), 0, 2, 0, attrs, delta, base_ts, max_ts, -1, -1, -1, len(recs))
    )
    crc = crc32c.crc32c(body, crc32c.crc32c(bytes(header[21:])))
    header[17:21] = crc.to_bytes(4, "big")
    return bytes(header) + body, base_offset + delta + 1


batch_specs = st.lists(
    st.tuples(
        records,
        st.sampled_from(CODECS),
        st.booleans(),  # LogAppendTime
        st.integers(0, 9),  # 0: a control batch
        st.integers(0, 3),  # offsets skipped before the batch
    ),
    min_size=1,
    max_size=5,
)


def build(specs: Any) -> tuple[bytes, list[Any], int]:
    """The concatenated batches, the records the object decoder sees (control batches left out), and
    the offset after the last batch."""
    out = bytearray()
    expected: list[Any] = []
    offset = 0
    for recs, codec, lat, kind, skip in specs:
        offset += skip
        batch, offset = make_batch(
            offset, 1_700_000_000_000, recs, codec, log_append_time=1_800_000_000_000 if lat else None,
            control=kind == 0,
        )
        if kind != 0:
            expected.extend((r, 1 if lat else 0) for r in decode_batch_records(batch))
        out += batch
    return bytes(out), expected, offset


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch_specs, st.integers(0, 60), st.integers(0, 80), st.booleans())
def test_columns_equal_object_decoder(specs: Any, start: int, span: int, with_headers: bool) -> None:
    buf, expected, end = build(specs)
    until = start + span
    cols = decode_columns(buf, start, until, include_headers=with_headers)
    want = [(r, t) for r, t in expected if start <= r.offset < until]
    assert len(cols) == len(want)
    assert list(cols.offsets) == [r.offset for r, _ in want]
    assert list(cols.timestamps) == [r.timestamp for r, _ in want]
    assert list(cols.timestamp_types) == [t for _, t in want]
    assert [cols.key(i) for i in range(len(cols))] == [r.key for r, _ in want]
    assert [cols.value(i) for i in range(len(cols))] == [r.value for r, _ in want]
    if with_headers:
        assert cols.headers == [r.headers for r, _ in want]
    else:
        assert cols.headers is None
    # The next fetch position: after the last batch that reaches ``start`` (control batches included).
    assert cols.next_offset == max(start, end)

    # A Fetch may end inside a batch: the partial batch is left for the next fetch.
    if len(buf) > 70:
        partial = decode_columns(buf[:-7], start, until)
        assert list(partial.offsets) == list(cols.offsets)[: len(partial)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch_specs, st.booleans())
def test_arrow_batch_equals_object_decoder(specs: Any, with_headers: bool) -> None:
    pa = pytest.importorskip("pyarrow")
    from rill.spark.arrow import arrow_schema, columns_to_arrow

    buf, expected, _ = build(specs)
    cols = decode_columns(buf, include_headers=with_headers)
    batch = columns_to_arrow(cols, "events", 3, arrow_schema(with_headers))
    assert batch.schema == arrow_schema(with_headers)
    batch.validate(full=True)
    assert batch.column("key").to_pylist() == [r.key for r, _ in expected]
    assert batch.column("value").to_pylist() == [r.value for r, _ in expected]
    assert batch.column("offset").to_pylist() == [r.offset for r, _ in expected]
    assert batch.column("topic").to_pylist() == ["events"] * len(expected)
    assert batch.column("partition").to_pylist() == [3] * len(expected)
    assert batch.column("timestampType").to_pylist() == [t for _, t in expected]
    micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
    assert micros == [r.timestamp * 1000 for r, _ in expected]
    if with_headers:
        got = [[(h["key"], h["value"]) for h in hs] for hs in batch.column("headers").to_pylist()]
        assert got == [r.headers for r, _ in expected]


def test_corrupt_record_length_is_reported() -> None:
    batch, _ = make_batch(0, 0, [(1, 0, b"k", b"v", [])], compression.NONE)
    broken = bytearray(batch)
    broken[61] = 0x7E  # record length 63: past the end of the batch
    from rill.errors import KafkaError

    with pytest.raises(KafkaError, match="record length"):
        decode_columns(bytes(broken))
