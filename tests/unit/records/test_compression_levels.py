"""Compression levels (Kafka's compression.gzip/lz4/zstd.level) used when the broker recompresses."""

from __future__ import annotations

import random

import lz4.frame
import pytest

from rill.records import compression as c
from rill.records.batch import parse_header
from rill.records.builder import build_batch, recompress_batch
from rill.records.record import Record, decode_batch_records


def _text() -> bytes:
    rng = random.Random(7)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 8))) for _ in range(300)]
    return " ".join(rng.choice(words) for _ in range(20000)).encode()


@pytest.mark.parametrize(("codec", "low", "high"), [(c.GZIP, 1, 9), (c.LZ4, 1, 17), (c.ZSTD, 1, 19)])
def test_levels_round_trip_and_a_higher_level_compresses_more(codec: int, low: int, high: int) -> None:
    data = _text()
    sizes = {}
    for level in (None, low, high):
        out = c.compress(codec, data, level)
        assert c.decompress(codec, out) == data
        sizes[level] = len(out)
    assert sizes[high] < sizes[low]


def test_lz4_default_level_is_the_fast_compressor_as_in_kafka() -> None:
    data = _text()
    fast = c.compress(c.LZ4, data, None)
    assert c.compress(c.LZ4, data, c.LZ4_DEFAULT_LEVEL) == fast
    assert len(c.compress(c.LZ4, data, 10)) < len(fast)  # any other level: LZ4 HC
    assert lz4.frame.decompress(fast) == data


def test_recompress_batch_at_a_level_keeps_every_record() -> None:
    records = [Record(0, 1_700_000_000_000 + i, None, _text()[i * 500 : (i + 1) * 500], []) for i in range(40)]
    batch = build_batch(records)
    default = recompress_batch(batch, c.ZSTD)
    high = recompress_batch(batch, c.ZSTD, 19)
    assert len(high) < len(default)
    for out in (default, high):
        assert parse_header(out).compression == c.ZSTD
        assert [r.value for r in decode_batch_records(out)] == [r.value for r in records]
