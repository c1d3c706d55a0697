"""Records inside v2 batches: round trips for every codec, interop with kafka-python's record code,
recompression, and corrupt input."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from rill.errors import ErrorCode, KafkaError
from rill.records import compression
from rill.records.builder import build_batch, recompress_batch
from rill.records.record import Record, decode_batch_records, decode_records_in

CODECS = [0, 1, 2, 3, 4]

records_st = st.lists(
    st.builds(
        Record,
        offset=st.just(0),
        timestamp=st.integers(0, 2**41),
        key=st.none() | st.binary(max_size=40),
        value=st.none() | st.binary(max_size=300),
        headers=st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3),
    ),
    min_size=1,
    max_size=20,
)


def _plain(recs: list[Record]) -> list[tuple[object, ...]]:
    return [(r.timestamp, r.key, r.value, r.headers) for r in recs]


@settings(max_examples=60, deadline=None)
@given(records_st, st.sampled_from(CODECS), st.integers(0, 2**40), st.booleans())
def test_build_decode_round_trip(recs: list[Record], codec: int, base: int, log_append: bool) -> None:
    batch = build_batch(recs, base_offset=base, compression=codec, producer_id=5, producer_epoch=1,
                        base_sequence=0, timestamp_type=1 if log_append else 0)
    got = decode_batch_records(batch)
    assert [r.offset for r in got] == list(range(base, base + len(recs)))
    if log_append:
        assert {r.timestamp for r in got} == {max(r.timestamp for r in recs)}
        assert [(r.key, r.value, r.headers) for r in got] == [(r.key, r.value, r.headers) for r in recs]
    else:
        assert _plain(got) == _plain(recs)
    # kafka-python reads what Rill builds
    kb = DefaultRecordBatch(bytearray(batch))
    assert kb.validate_crc()
    assert [(r.key, r.value) for r in kb] == [(r.key, r.value) for r in recs]


@settings(max_examples=30, deadline=None)
@given(records_st, st.sampled_from(CODECS), st.sampled_from(CODECS))
def test_kafka_python_batches_decode_and_recompress(
    recs: list[Record], codec: int, target: int
) -> None:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i, r in enumerate(recs):
        builder.append(i, r.timestamp, r.key, r.value, r.headers)
    batch = bytes(builder.build())
    assert _plain(decode_batch_records(batch)) == _plain(recs)
    again = recompress_batch(batch, target)
    assert again[21:23][1] & 7 == target
    assert _plain(decode_batch_records(again)) == _plain(recs)
    assert DefaultRecordBatch(bytearray(again)).validate_crc()
    assert again[:8] == batch[:8]  # base offset and the rest of the header carry over


def test_snappy_raw_and_xerial_both_decode() -> None:
    import cramjam

    data = b"hello snappy " * 5000
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert compression.decompress(compression.SNAPPY, raw) == data
    xerial = compression.compress(compression.SNAPPY, data)
    assert xerial.startswith(compression.XERIAL_MAGIC)
    assert compression.decompress(compression.SNAPPY, xerial) == data


def test_gzip_multi_member_and_zstd_without_content_size() -> None:
    import gzip

    import zstandard

    assert compression.decompress(compression.GZIP, gzip.compress(b"a") + gzip.compress(b"b")) == b"ab"
    stream = zstandard.ZstdCompressor().compressobj()
    frame = stream.compress(b"x" * 1000) + stream.flush()
    assert compression.decompress(compression.ZSTD, frame) == b"x" * 1000


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_corrupt_compressed_data_is_corrupt_message(codec: int) -> None:
    with pytest.raises(KafkaError) as e:
        compression.decompress(codec, b"\x00garbage\xff" * 3)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mutated_batches_raise_kafka_errors_only(data: st.DataObject) -> None:
    recs = [Record(0, 1000 + i, b"k", b"v" * i, [("h", b"x")]) for i in range(5)]
    batch = bytearray(build_batch(recs, compression=data.draw(st.sampled_from(CODECS))))
    i = data.draw(st.integers(0, len(batch) - 1))
    batch[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(batch)))
    with contextlib.suppress(KafkaError):
        decode_batch_records(bytes(batch[:cut]), verify_crc=data.draw(st.booleans()))


def test_decode_records_in_skips_truncated_tail_and_control_batches() -> None:
    a = build_batch([Record(0, 1, b"a", b"1")], base_offset=0)
    b = build_batch([Record(0, 2, b"b", b"2")], base_offset=1)
    got = decode_records_in(a + b + b[:30])
    assert [(r.offset, r.key) for r in got] == [(0, b"a"), (1, b"b")]
    control = bytearray(b)
    control[21:23] = (0x20).to_bytes(2, "big")  # attributes: control batch (CRC not checked by the skip)
    assert [r.key for r in decode_records_in(a + bytes(control))] == [b"a"]


def test_crc_mismatch_detected() -> None:
    batch = bytearray(build_batch([Record(0, 1, b"a", b"1")]))
    batch[-1] ^= 1
    with pytest.raises(KafkaError, match="CRC"):
        decode_batch_records(batch)
