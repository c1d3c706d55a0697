"""Batch reads through Spark: every offset once, bytes, headers and timestamps as produced, for each codec."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import confluent_kafka
import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]

BASE_TS = 1_700_000_000_000


def produce(bootstrap: str, topic: str, n: int, *, partitions: int, compression: str = "none") -> list[dict[str, Any]]:
    """Produce ``n`` records with confluent-kafka (a real client); returns what was sent."""
    p = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": compression,
            "linger.ms": 5,
            "enable.idempotence": False,
            "acks": "all",
        }
    )
    sent = []
    for i in range(n):
        key = None if i % 7 == 3 else f"key-{i}".encode()
        value = None if i % 11 == 5 else os.urandom(i % 50) + f"value-{i}".encode()
        headers = [("i", str(i).encode()), ("empty", None)] if i % 2 else []
        ts = BASE_TS + i * 1000
        part = i % partitions
        p.produce(topic, value=value, key=key, partition=part, timestamp=ts, headers=headers or None)
        sent.append({"key": key, "value": value, "headers": headers, "ts": ts, "partition": part})
    assert p.flush(30) == 0
    return sent


def read_all(spark: Any, bootstrap: str, topic: str, **options: str) -> list[Any]:
    reader = spark.read.format("rill").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return list(reader.load().collect())


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_batch_read_equals_produced(spark: Any, bootstrap: str, new_topic: Callable[..., str], codec: str) -> None:
    topic = new_topic(partitions=2)
    sent = produce(bootstrap, topic, 300, partitions=2, compression=codec)
    rows = read_all(spark, bootstrap, topic, includeHeaders="true")
    assert len(rows) == len(sent)
    by_partition: dict[int, list[Any]] = {0: [], 1: []}
    for r in rows:
        by_partition[r.partition].append(r)
    for part, prows in by_partition.items():
        prows.sort(key=lambda r: r.offset)
        assert [r.offset for r in prows] == list(range(len(prows)))  # every offset once
        expected = [s for s in sent if s["partition"] == part]
        for r, s in zip(prows, expected, strict=True):
            assert r.topic == topic
            assert (bytes(r.key) if r.key is not None else None) == s["key"]
            assert (bytes(r.value) if r.value is not None else None) == s["value"]
            assert r.timestamp == datetime.fromtimestamp(s["ts"] / 1000, UTC).replace(tzinfo=None)
            assert r.timestampType == 0
            got_headers = [(h.key, bytes(h.value) if h.value is not None else None) for h in r.headers]
            assert got_headers == s["headers"]


def test_schema_matches_spark_kafka_source(spark: Any, bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    df = spark.read.format("rill").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,timestampType:int>"
    )
    assert df.count() == 0


def test_offset_ranges_filters_and_assign(spark: Any, bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=3)
    produce(bootstrap, topic, 90, partitions=3)

    def base() -> Any:  # DataFrameReader.option mutates the reader: take a fresh one each time
        return spark.read.format("rill").option("kafka.bootstrap.servers", bootstrap)

    rows = (
        base().option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {"0": 10, "1": -2, "2": 30}}))
        .option("endingOffsets", json.dumps({topic: {"0": 20, "1": 5, "2": -1}}))
        .load()
        .collect()
    )
    got = sorted((r.partition, r.offset) for r in rows)
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)]

    df = base().option("assign", json.dumps({topic: [1, 2]})).option("pushFilters", "true").load()
    assert df.count() == 60
    assert df.where("partition = 2 AND offset >= 25").count() == 5
    assert df.where("partition IN (1) AND offset < 3").count() == 3
    ts = datetime.fromtimestamp((BASE_TS + 80 * 1000) / 1000, UTC)
    assert df.where(df.timestamp >= ts).count() == sum(1 for i in range(80, 90) if i % 3 in (1, 2))

    many = base().option("subscribe", topic).option("minPartitions", "9").load()
    assert many.rdd.getNumPartitions() >= 9
    assert many.count() == 90
    assert sorted(r.offset for r in many.where("partition = 0").collect()) == list(range(30))


def test_starting_timestamp(spark: Any, bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    produce(bootstrap, topic, 20, partitions=1)
    rows = read_all(spark, bootstrap, topic, startingTimestamp=str(BASE_TS + 15 * 1000))
    assert sorted(r.offset for r in rows) == [15, 16, 17, 18, 19]


def test_bad_options_give_clear_errors(spark: Any, bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    with pytest.raises(Exception, match="exactly one of subscribe"):
        spark.read.format("rill").option("kafka.bootstrap.servers", bootstrap).load().collect()
    with pytest.raises(Exception, match="startingOffsets"):
        read_all(spark, bootstrap, topic, startingOffsets="{not json")
    with pytest.raises(Exception, match="does not exist"):
        read_all(spark, bootstrap, "no-such-topic-here")
