"""Pure parts of the client and the Spark source: hashing, bootstrap parsing, offset arithmetic, options."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rill.client import default_partition, murmur2, parse_bootstrap
from rill.common import TopicPartition

pytestmark = pytest.mark.timeout(60)


def test_murmur2_matches_kafka_java() -> None:
    # Values computed by Kafka's Utils.murmur2 (also used by kafka-python's test suite).
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107
    assert murmur2(b"") == 275646681


@given(st.binary(max_size=64), st.integers(1, 1000))
def test_default_partition_in_range(key: bytes, n: int) -> None:
    assert 0 <= default_partition(key, n) < n


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("127.0.0.1:9092, PLAINTEXT://h:1") == [("127.0.0.1", 9092), ("h", 1)]
    for bad in ("", "nohost", "h:x", ":12"):
        with pytest.raises(ValueError):
            parse_bootstrap(bad)


import pyspark  # noqa: E402,F401  (the spark extra is part of the test setup)

from rill.spark.options import (  # noqa: E402
    OffsetRange,
    OptionError,
    SourceOptions,
    offsets_from_json,
    offsets_to_json,
    split_ranges,
)
from rill.spark.stream_reader import rate_limit  # noqa: E402


def test_options_parse_and_errors() -> None:
    o = SourceOptions.parse(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "a, b", "failondataloss": "false", "includeheaders": "true"}
    )
    assert o.subscribe == ("a", "b") and not o.fail_on_data_loss and o.include_headers
    a = SourceOptions.parse({"rill.bootstrap.servers": "h:1", "assign": '{"t": [0, 2]}'})
    assert a.assign == (TopicPartition("t", 0), TopicPartition("t", 2))
    with pytest.raises(OptionError, match="bootstrap"):
        SourceOptions.parse({"subscribe": "a"})
    with pytest.raises(OptionError, match="exactly one"):
        SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "assign": '{"a": [0]}'})
    with pytest.raises(OptionError, match="maxOffsetsPerTrigger"):
        SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "maxoffsetspertrigger": "x"})
    with pytest.raises(OptionError, match="failOnDataLoss"):
        SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "failondataloss": "maybe"})


def test_offsets_json_round_trip() -> None:
    offs = {TopicPartition("a", 0): 5, TopicPartition("a", 10): 7, TopicPartition("b", 1): 0}
    assert offsets_from_json(offsets_to_json(offs)) == offs


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 5000)), min_size=1, max_size=6),
    st.integers(1, 20),
    st.integers(1, 3000),
)
def test_split_ranges_cover_every_offset_once(spans: list[tuple[int, int]], min_parts: int, max_records: int) -> None:
    ranges = [OffsetRange("t", i, s, s + n) for i, (s, n) in enumerate(spans)]
    pieces = split_ranges(ranges, min_partitions=min_parts, max_records=max_records)
    for r in ranges:
        mine = sorted((p.start, p.until) for p in pieces if p.partition == r.partition)
        covered = [o for s, u in mine for o in range(s, u)]
        assert covered == list(range(r.start, r.until))
    assert all(p.size <= max_records for p in pieces)
    total = sum(r.size for r in ranges)
    if total >= min_parts:
        assert len(pieces) >= min(min_parts, total)


@given(
    st.dictionaries(st.integers(0, 8), st.tuples(st.integers(0, 100), st.integers(0, 1000)), min_size=1),
    st.integers(1, 2000),
)
def test_rate_limit_bounds_progress(parts: dict[int, tuple[int, int]], limit: int) -> None:
    start = {TopicPartition("t", p): s for p, (s, _) in parts.items()}
    latest = {TopicPartition("t", p): s + n for p, (s, n) in parts.items()}
    end = rate_limit(start, latest, limit)
    for tp in latest:
        assert start[tp] <= end[tp] <= latest[tp]
    moved = sum(end[tp] - start[tp] for tp in latest)
    backlog = sum(latest[tp] - start[tp] for tp in latest)
    assert moved <= max(limit, 0) + len(latest)  # at most one extra per partition (rounding up tiny shares)
    if backlog:
        assert moved > 0
