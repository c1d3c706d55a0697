"""Writing DataFrames into topics, the offline loader (exactly once across failed runs) and the audit."""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from rill.client import IdempotentProducer, KafkaClient
from rill.spark.audit import AuditCounter, NothingToAudit, run_audit
from rill.spark.loader import loaded_positions, published_manifests, read_published, run_load
from rill.testing import broker as rill_broker

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


def produce_values(bootstrap: str, topic: str, values: list[bytes], *, partitions: int, ts: int | None = None) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    for i, v in enumerate(values):
        kwargs: dict[str, Any] = {"partition": i % partitions}
        if ts is not None:
            kwargs["timestamp"] = ts
        p.produce(topic, value=v, **kwargs)
    assert p.flush(30) == 0


def read_topic(spark: Any, bootstrap: str, topic: str) -> list[Any]:
    return list(
        spark.read.format("rill")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
        .collect()
    )


def test_write_round_trips_a_dataframe(spark: Any, bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=3)
    rows = [
        (f"k{i}" if i % 5 else None, f"value {i}".encode(), i % 3, [("h", str(i).encode())] if i % 2 else [])
        for i in range(500)
    ]
    df = spark.createDataFrame(
        rows, "key string, value binary, partition int, headers array<struct<key:string,value:binary>>"
    )
    df.write.format("rill").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).mode("append").save()
    got = read_topic(spark, bootstrap, topic)
    assert len(got) == 500
    seen = {
        (
            bytes(r.value),
            r.partition,
            bytes(r.key).decode() if r.key is not None else None,
            tuple((h.key, bytes(h.value)) for h in r.headers),
        )
        for r in got
    }
    want = {(v, p, k, tuple(h)) for k, v, p, h in rows}
    assert seen == want
    # keyed rows without a partition column go where Kafka's default partitioner puts them
    topic2 = new_topic(partitions=4)
    spark.createDataFrame([(f"key-{i}", f"v{i}") for i in range(50)], "key string, value string").write.format(
        "rill"
    ).option("kafka.bootstrap.servers", bootstrap).option("topic", topic2).option("kafka.acks", "all").option(
        "kafka.client.id", "profile-writer"
    ).option("kafka.compression.type", "zstd").mode("append").save()
    from rill.client import default_partition

    for r in read_topic(spark, bootstrap, topic2):
        assert r.partition == default_partition(bytes(r.key), 4)


def test_write_creates_a_missing_topic_as_the_docs_show(spark: Any, bootstrap: str) -> None:
    """The docs' example writes into a topic nobody created: the writer's Metadata requests let the broker
    create it (auto.create.topics.enable, true by default), as Kafka producers do."""
    topic = f"profiles-{uuid.uuid4().hex[:10]}"
    df = spark.createDataFrame([("ann", 3), ("bob", 5)], "user string, visits int")
    df.selectExpr("CAST(user AS STRING) AS key", "to_json(struct(*)) AS value") \
      .write.format("rill").option("kafka.bootstrap.servers", bootstrap) \
      .option("topic", topic).mode("append").save()  # fmt: skip
    got = {bytes(r.key).decode(): json.loads(bytes(r.value)) for r in read_topic(spark, bootstrap, topic)}
    assert got == {"ann": {"user": "ann", "visits": 3}, "bob": {"user": "bob", "visits": 5}}


def test_write_to_a_missing_topic_names_the_broker_setting_when_it_creates_none(spark: Any) -> None:
    with rill_broker({"auto.create.topics.enable": "false"}) as b:
        df = spark.createDataFrame([("v",)], "value string")
        with pytest.raises(Exception, match=r"auto\.create\.topics\.enable is false"):
            df.write.format("rill").option("kafka.bootstrap.servers", b.bootstrap_servers).option(
                "topic", "nowhere"
            ).mode("append").save()
        with KafkaClient(b.bootstrap_servers) as c:
            assert "nowhere" not in c.list_topics()


def test_write_needs_value_and_topic(spark: Any, bootstrap: str) -> None:
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="topic"):
        df.write.format("rill").option("kafka.bootstrap.servers", bootstrap).mode("append").save()


def test_write_refuses_what_spark_refuses(spark: Any, bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    refused = [
        ("value int", (300,), "column value has type int; value must be string or binary"),
        ("key bigint, value string", (7, "v"), "column key has type bigint; key must be string or binary"),
        ("value double", (1.5,), "column value has type double"),
        ("value struct<a:int>", ((1,),), "column value has type struct<a:int>"),
        ("value string, partition string", ("v", "0"), "column partition has type string; partition must be int"),
        ("value string, partition bigint", ("v", 0), "column partition has type bigint"),
    ]
    for ddl, row, message in refused:
        df = spark.createDataFrame([row], ddl)
        with pytest.raises(Exception, match=message):
            df.write.format("rill").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).mode(
                "append"
            ).save()
    with pytest.raises(Exception, match="column topic has type int; topic must be string"):
        spark.createDataFrame([(1, "v")], "topic int, value string").write.format("rill").option(
            "kafka.bootstrap.servers", bootstrap
        ).mode("append").save()
    # Write options the writer does not take are refused, never ignored.
    for name, value, message in (
        ("subscribe", topic, "option subscribe is for reading"),
        ("topik", topic, "unknown option topik .*did you mean topic\\?"),
        ("kafka.linger.ms", "5", "Kafka client option kafka.linger.ms is not supported"),
        ("kafka.acks", "1", "kafka.acks 1 is not supported: the writer is an idempotent producer"),
        ("kafka.value.serializer", "x", "value.serializer is not supported"),
        ("kafka.ssl.keystore.type", "JKS", "kafka.ssl.keystore.type JKS is not supported"),
    ):
        with pytest.raises(Exception, match=message):
            spark.createDataFrame([("v",)], "value string").write.format("rill").option(
                "kafka.bootstrap.servers", bootstrap
            ).option("topic", topic).option(name, value).mode("append").save()
    with pytest.raises(Exception, match="save mode overwrite is not supported"):
        spark.createDataFrame([("v",)], "value string").write.format("rill").option(
            "kafka.bootstrap.servers", bootstrap
        ).option("topic", topic).mode("overwrite").save()
    assert read_topic(spark, bootstrap, topic) == []  # nothing was written


def _published_rows(output: Path) -> list[tuple[str, int, int]]:
    table = ds.dataset(str(output), format="parquet", partitioning="hive").to_table(
        columns=["topic", "partition", "offset"]
    )
    return list(
        zip(
            table.column("topic").to_pylist(),
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            strict=True,
        )
    )


def test_loader_reruns_publish_every_record_exactly_once(
    spark: Any, bootstrap: str, new_topic: Callable[..., str], client: KafkaClient, tmp_path: Path
) -> None:
    a, b = new_topic(partitions=2), new_topic(partitions=1)
    out = tmp_path / "warehouse"
    produce_values(bootstrap, a, [b"a%d" % i for i in range(100)], partitions=2)
    produce_values(bootstrap, b, [b"b%d" % i for i in range(30)], partitions=1)
    lines: list[str] = []
    m1 = run_load(spark, bootstrap, [a, b], out, say=lines.append, group_id="loader-test")
    assert m1 is not None and m1.batch == 1
    # Standard Parquet timestamps (TIMESTAMP_MICROS, adjusted to UTC), not Spark's legacy INT96.
    for file in out.glob("batch=*/topic=*/date=*/*.parquet"):
        assert pq.read_schema(file).field("timestamp").type == pa.timestamp("us", tz="UTC"), file
    assert spark.conf.get("spark.sql.parquet.outputTimestampType") == "INT96"  # the session's setting is back
    assert any(f"{a}-0: loaded offsets 0..50 (50 records)" in line for line in lines)

    # A run that dies after writing its data but before publishing leaves nothing visible.
    produce_values(bootstrap, a, [b"a%d" % i for i in range(100, 160)], partitions=2)

    def crash(_staging: Path) -> None:
        raise RuntimeError("killed before publishing")

    with pytest.raises(RuntimeError):
        run_load(spark, bootstrap, [a, b], out, before_publish=crash, say=lines.append)
    assert not (out / "_loader.lock").exists()  # released on the failure path too
    assert len(published_manifests(out)) == 1
    # A live loader blocks the next one, naming its pid; a lock file left by a dead one does not block.
    lock_fd = os.open(out / "_loader.lock", os.O_RDWR | os.O_CREAT)
    try:
        os.write(lock_fd, b"4242\n")
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        with pytest.raises(RuntimeError, match=r"another loader \(pid 4242\) is running"):
            run_load(spark, bootstrap, [a, b], out, say=lines.append)
        assert (out / "_loader.lock").exists()  # not removed by the run that was refused
    finally:
        os.close(lock_fd)
    assert len(_published_rows(out)) == 130  # pyarrow sees only the published batch

    produce_values(bootstrap, b, [b"b%d" % i for i in range(30, 40)], partitions=1)
    # A topic named twice is loaded once.
    m2 = run_load(spark, bootstrap, [a, b, a], out, say=lines.append, group_id="loader-test")
    assert m2 is not None and m2.batch == 2
    assert {(r.topic, r.partition): r.records for r in m2.ranges} == {(a, 0): 30, (a, 1): 30, (b, 0): 10}
    assert len(m2.ranges) == 3
    assert run_load(spark, bootstrap, [a, b], out, say=lines.append) is None  # nothing new

    rows = _published_rows(out)
    assert len(rows) == len(set(rows)) == 200
    for topic, parts, n in ((a, 2, 160), (b, 1, 40)):
        for p in range(parts):
            offsets = sorted(o for t, pp, o in rows if t == topic and pp == p)
            assert offsets == list(range(len(offsets)))
        assert sum(1 for t, _, _ in rows if t == topic) == n
    positions = loaded_positions(out)
    assert client.fetch_committed("loader-test", positions) == {tp: o for tp, o in positions.items()}
    assert not (out / "_staging").exists() or not any((out / "_staging").iterdir())


def test_audit_flags_a_dropped_window_and_passes_a_clean_run(
    spark: Any, bootstrap: str, new_topic: Callable[..., str], client: KafkaClient, tmp_path: Path
) -> None:
    events, audit_topic = new_topic(partitions=2), new_topic(prefix="audit")
    window = 60_000
    base = 1_700_000_040_000 - 1_700_000_040_000 % window
    counter = AuditCounter(window_ms=window, host="web-1")
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    dropped_window = base + 2 * window
    for i in range(120):
        ts, headers = counter.stamp(events, now_ms=base + (i % 4) * window + i)
        if ts - ts % window == dropped_window and i % 8 == 2:
            continue  # lost on the way: counted by the producer, never written
        p.produce(events, value=b"e%d" % i, timestamp=ts, headers=headers)
    assert p.flush(30) == 0
    with IdempotentProducer(client) as audit_producer:
        assert counter.publish(audit_producer, audit_topic) == 4

    out = tmp_path / "out"
    with pytest.raises(NothingToAudit, match=r"output directory .* does not exist"):
        run_audit(client, audit_topic, out)
    run_load(spark, bootstrap, [events], out, say=lambda _l: None)
    # An audit that compares nothing is not a pass.
    with pytest.raises(NothingToAudit, match="holds no counts: nothing was checked"):
        run_audit(client, new_topic(prefix="audit"), out)
    with pytest.raises(NothingToAudit, match="does not exist: nothing was checked"):
        run_audit(client, f"audit-{uuid.uuid4().hex[:10]}", out)
    diffs = run_audit(client, audit_topic, out)
    assert [(d.topic, d.window_start_ms) for d in diffs] == [(events, dropped_window)]
    assert diffs[0].produced == 30 and diffs[0].loaded == 30 - 15

    clean, clean_audit = new_topic(), new_topic(prefix="audit")
    c2 = AuditCounter(window_ms=window, host="web-2")
    p2 = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(50):
        ts, headers = c2.stamp(clean, now_ms=base + i * 3000)
        p2.produce(clean, value=json.dumps({"i": i}).encode(), timestamp=ts, headers=headers)
    assert p2.flush(30) == 0
    with IdempotentProducer(client) as ap:
        c2.publish(ap, clean_audit)
    out2 = tmp_path / "out2"
    run_load(spark, bootstrap, [clean], out2, say=lambda _l: None)
    assert run_audit(client, clean_audit, out2) == []


def test_loader_reloads_a_recreated_topic_from_its_start(
    spark: Any,
    bootstrap: str,
    new_topic: Callable[..., str],
    recreate_topic: Callable[..., None],
    tmp_path: Path,
) -> None:
    topic, out = new_topic(), tmp_path / "out"
    produce_values(bootstrap, topic, [b"old%d" % i for i in range(50)], partitions=1)
    run_load(spark, bootstrap, [topic], out, say=lambda _l: None)
    # Deleted and recreated between two runs: the log (0..29) ends before the loaded position 50.
    recreate_topic(topic)
    produce_values(bootstrap, topic, [b"new%d" % i for i in range(30)], partitions=1)
    lines: list[str] = []
    m = run_load(spark, bootstrap, [topic], out, say=lines.append)
    assert any(
        line.startswith(f"WARNING {topic}-0: the log ends at 30, before the loaded position 50") for line in lines
    ), lines
    assert m is not None and [(r.start, r.end, r.records) for r in m.ranges] == [(0, 30, 30)]
    values = read_published(out, columns=["value"]).column("value").to_pylist()
    assert sorted(values) == sorted([b"old%d" % i for i in range(50)] + [b"new%d" % i for i in range(30)])


def test_loader_and_audit_with_a_numeric_topic_name_and_another_session_time_zone(
    spark: Any, bootstrap: str, client: KafkaClient, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = "0" + str(uuid.uuid4().int)[:12]  # looks like a number: partition inference would make it one
    client.create_topic(topic, 1)
    audit_topic = new_topic(prefix="audit")
    midnight = 1_700_006_400_000  # 2023-11-15T00:00:00Z, 2023-11-14 19:00 in New York
    counter = AuditCounter(window_ms=60_000, host="web-1")
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(40):
        ts, headers = counter.stamp(topic, now_ms=midnight + i * 1000)
        p.produce(topic, value=b"n%d" % i, timestamp=ts, headers=headers)
    assert p.flush(30) == 0
    with IdempotentProducer(client) as audit_producer:
        counter.publish(audit_producer, audit_topic)
    out = tmp_path / "out"
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        m = run_load(spark, bootstrap, [topic], out, say=lambda _l: None)
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    assert m is not None and [(r.topic, r.records) for r in m.ranges] == [(topic, 40)]
    assert sorted(d.name for d in out.glob("batch=*/topic=*/date=*")) == ["date=2023-11-15"]  # the UTC date
    assert run_audit(client, audit_topic, out) == []
