"""Batch read options as Spark's Kafka source takes them: subscriptions are sets, the precedence of the
timestamp options, ending offsets by timestamp, a deleted range with failOnDataLoss=false, and the options
Spark refuses."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest
from tests.spark.test_read import BASE_TS, produce

from rill.spark.options import SourceOptions

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def _reader(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("rill").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_topics_and_partitions_named_twice_are_read_once(
    spark: Any, bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=2)
    produce(bootstrap, topic, 40, partitions=2)
    # Spark's Kafka options the source honours, in any case (Spark lowercases option names).
    client_options = {
        "KAFKA.SECURITY.PROTOCOL": "plaintext",
        "kafka.client.id": "warehouse-reader",
        "kafka.request.timeout.ms": "20000",
        "groupIdPrefix": "reports",
    }
    for options in (
        {"subscribe": f"{topic},{topic}", **client_options},
        {"assign": json.dumps({topic: [0, 0, 1]}), "kafka.group.id": "reports-1"},
    ):
        rows = _reader(spark, bootstrap, **options).select("partition", "offset").collect()
        keys = sorted((r.partition, r.offset) for r in rows)
        assert keys == [(p, o) for p in (0, 1) for o in range(20)], options


def _indexes(df: Any) -> list[int]:
    """Which of ``produce``'s records a read returned (record i is stamped BASE_TS + i seconds)."""
    rows = df.selectExpr(f"CAST((unix_millis(timestamp) - {BASE_TS}) / 1000 AS INT) AS i").collect()
    return sorted(r.i for r in rows)


def test_timestamp_options_precedence_and_ending_timestamps(
    spark: Any, bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=2)
    produce(bootstrap, topic, 20, partitions=2)  # record i: partition i % 2, BASE_TS + i s

    def at(i: int) -> str:
        return str(BASE_TS + i * 1000)

    def per_partition(value: int | str) -> str:
        return json.dumps({topic: {"0": int(value), "1": int(value)}})

    def read(**options: str) -> list[int]:
        return _indexes(_reader(spark, bootstrap, subscribe=topic, **options))

    # Start: startingTimestamp > startingOffsetsByTimestamp > startingOffsets.
    assert read(startingTimestamp=at(15), startingOffsetsByTimestamp=per_partition(at(5))) == list(range(15, 20))
    assert read(startingTimestamp=at(15), startingOffsets=per_partition(2)) == list(range(15, 20))
    assert read(startingOffsetsByTimestamp=per_partition(at(5)), startingOffsets=per_partition(8)) == list(range(5, 20))
    # End (exclusive): the first offset whose timestamp is >= the time, else the latest offset.
    assert read(endingTimestamp=at(5)) == list(range(5))
    assert read(endingTimestamp=at(99)) == list(range(20))
    assert read(endingOffsetsByTimestamp=per_partition(at(8))) == list(range(8))
    assert read(endingTimestamp=at(5), endingOffsetsByTimestamp=per_partition(at(8)), endingOffsets="latest") == list(
        range(5)
    )
    assert read(endingOffsetsByTimestamp=per_partition(at(8)), endingOffsets=per_partition(2)) == list(range(8))
    assert read(startingTimestamp=at(4), endingTimestamp=at(12)) == list(range(4, 12))


def test_a_range_deleted_whole_is_data_loss(spark: Any, bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    produce(bootstrap, topic, 100, partitions=1)
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.delete_records([confluent_kafka.TopicPartition(topic, 0, 50)]).values():
        f.result(30)

    def read(start: int, end: int, **options: str) -> Any:
        return _reader(
            spark,
            bootstrap,
            subscribe=topic,
            startingOffsets=json.dumps({topic: {"0": start}}),
            endingOffsets=json.dumps({topic: {"0": end}}),
            **options,
        )

    with pytest.raises(Exception, match="the log starts at 50"):
        read(10, 40).collect()
    # failOnDataLoss=false: what is left of the range, which may be nothing.
    assert read(10, 40, failOnDataLoss="false").count() == 0
    assert sorted(r.offset for r in read(10, 60, failOnDataLoss="false").collect()) == list(range(50, 60))


def test_options_spark_refuses_are_refused(spark: Any, bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic, other = new_topic(partitions=2), new_topic()
    both = {"0": 0, "1": 0}
    refused = [
        ({"startingOffsets": json.dumps({topic: {"0": 0}})}, "startingOffsets must name exactly.*missing"),
        ({"startingOffsets": json.dumps({topic: both, other: {"0": 0}})}, "startingOffsets .*not read by this source"),
        ({"endingOffsets": json.dumps({topic: {"1": -1}})}, "endingOffsets must name exactly"),
        ({"startingOffsetsByTimestamp": json.dumps({topic: {"0": 1}})}, "startingOffsetsByTimestamp must name"),
        ({"startingOffsets": "latest"}, "startingOffsets cannot be latest for a batch query"),
        ({"startingOffsets": json.dumps({topic: {"0": 0, "1": -1}})}, "cannot start at -1 \\(latest\\)"),
        ({"endingOffsets": "earliest"}, "endingOffsets cannot be earliest for a batch query"),
        ({"endingOffsets": json.dumps({topic: {"0": -2, "1": -1}})}, "cannot end at -2 \\(earliest\\)"),
        ({"startingTimestamp": "-1"}, "startingTimestamp must be a timestamp"),
        ({"endingTimestamp": "-5"}, "endingTimestamp must be a timestamp"),
        ({"endingOffsetsByTimestamp": json.dumps({topic: {"0": -1, "1": 5}})}, "timestamp -1 .* is not valid"),
        ({"maxRecordsPerPartition": "0"}, "maxRecordsPerPartition must be positive"),
        ({"minPartitions": "-3"}, "minPartitions must be positive"),
        # Options the source does not take are refused, never ignored: the nearest known name, or the reason.
        ({"startingOffset": "earliest"}, "unknown option startingoffset .*did you mean startingOffsets\\?"),
        ({"failOnDataLose": "false"}, "did you mean failOnDataLoss\\?"),
        ({"kafka.bootstrap.server": "x"}, "kafka.bootstrap.server is not supported.*did you mean kafka.bootstrap"),
        ({"kafka.security.protocol": "SASL_SSL"}, "kafka.sasl.mechanism is required"),
        ({"kafka.security.protocol": "TLS"}, "kafka.security.protocol TLS is not one of"),
        ({"kafka.security.protocol": "SSL", "kafka.ssl.keystore.type": "PKCS12"}, "keystore.type PKCS12 is not"),
        ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "GSSAPI"}, "mechanism GSSAPI is not"),
        ({"kafka.ssl.truststore.certificates": "x"}, "truststore.certificates is not supported: the rill client"),
        ({"kafka.max.poll.records": "5"}, "Kafka client option kafka.max.poll.records is not supported"),
        ({"kafka.auto.offset.reset": "earliest"}, "auto.offset.reset is not supported: set .*startingOffsets"),
        ({"kafka.value.deserializer": "x"}, "value.deserializer is not supported"),
        ({"topic": topic}, "option topic is for writing"),
        ({"maxTriggerDelay": "soon"}, "maxTriggerDelay must be a duration"),
        ({"minOffsetsPerTrigger": "0"}, "minOffsetsPerTrigger must be positive"),
        ({"minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "higher than maxOffsetsPerTrigger \\(5\\)"),
    ]
    for options, message in refused:
        with pytest.raises(Exception, match=message):
            _reader(spark, bootstrap, subscribe=topic, **options).collect()
    # The client is named by kafka.client.id, else by the group id options (the source joins no group).
    named = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}
    assert SourceOptions.parse({**named, "groupidprefix": "reports"}).client().client_id == "reports"
    assert SourceOptions.parse({**named, "kafka.group.id": "g", "kafka.client.id": "c"}).client().client_id == "c"
    # A stream has no end.
    query = (
        spark.readStream.format("rill")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("endingOffsets", "latest")
        .load()
        .writeStream.format("memory")
        .queryName("ending_offsets_on_a_stream")
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    except Exception as e:
        assert "endingOffsets is not valid in streaming queries" in str(e)
    else:
        raise AssertionError("a stream with endingOffsets ran")
    finally:
        query.stop()
