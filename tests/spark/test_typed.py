"""Typed columns: Avro records written by confluent-kafka's AvroSerializer through the schema registry, the
schema evolved twice, read by the rill source (batch and stream) and loaded into typed Parquet."""

from __future__ import annotations

import datetime
import decimal
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from rill.client import IdempotentProducer, KafkaClient
from rill.registry.server import RegistryThread
from rill.spark.audit import AuditCounter, run_audit
from rill.spark.loader import published_manifests, run_load
from rill.spark.session import worker_env
from rill.testing.registry import registry

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(300)]

MINUTE = 60_000
BASE = 1_700_000_040_000 - 1_700_000_040_000 % MINUTE

V1_FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "age", "type": "int"},
    {"name": "signup", "type": {"type": "int", "logicalType": "date"}},
    {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["FREE", "PAID"]}},
    {"name": "nickname", "type": ["null", "string"], "default": None},
    {
        "name": "address",
        "type": {
            "type": "record",
            "name": "Address",
            "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"], "default": None}],
        },
    },
    {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
]
V2_FIELDS = [*V1_FIELDS, {"name": "country", "type": "string", "default": "unknown"}]
V3_FIELDS = [*V2_FIELDS, {"name": "level", "type": "int", "default": 1}]
KEY_SCHEMA = json.dumps({"type": "record", "name": "UserKey", "fields": [{"name": "id", "type": "long"}]})
PER_VERSION = 40


def schema(fields: list[dict[str, Any]]) -> str:
    return json.dumps({"type": "record", "name": "User", "namespace": "rill.test", "fields": fields})


def user(i: int, version: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": i,
        "name": f"user-{i}",
        "age": 20 + i % 50,
        "signup": datetime.date(2020, 1, 1) + datetime.timedelta(days=i),
        "seen": datetime.datetime.fromtimestamp((BASE + i * 1000) / 1000, datetime.UTC),
        "amount": decimal.Decimal(i * 101) / 100,
        "tags": [f"t{j}" for j in range(i % 3)],
        "attrs": {f"a{j}": i * j for j in range(i % 2 + 1)},
        "kind": "PAID" if i % 2 else "FREE",
        "nickname": None if i % 3 else f"nick-{i}",
        "address": {"city": f"city-{i % 5}", "zip": None if i % 4 else 1000 + i},
        "digest": i.to_bytes(4, "big"),
    }
    if version >= 2:
        out["country"] = f"c{i % 7}"
    if version >= 3:
        out["level"] = 10 + i % 3
    return out


def as_v3(record: dict[str, Any]) -> dict[str, Any]:
    """What a reader with the latest schema sees: the defaults for the fields the writer did not have."""
    return {"country": "unknown", "level": 1, **record}


@pytest.fixture(scope="module")
def reg(broker: Any) -> Iterator[RegistryThread]:
    with registry(broker.bootstrap_servers) as r:
        yield r


@pytest.fixture(scope="module")
def evolved(broker: Any, reg: RegistryThread) -> dict[str, Any]:
    """A two-partition topic holding records of three schema versions (keys Avro too), each record counted
    by an audit counter; the counts are in the audit topic."""
    bootstrap = broker.bootstrap_servers
    topic, audit_topic = f"users-{uuid.uuid4().hex[:8]}", f"audit-{uuid.uuid4().hex[:8]}"
    with KafkaClient(bootstrap, timeout_s=20) as client:
        client.create_topic(topic, 2)
        sr = SchemaRegistryClient({"url": reg.url})
        assert sr.get_compatibility() == "BACKWARD"  # each new version is checked against the previous one
        counter = AuditCounter(window_ms=MINUTE, host="web-1")
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        keys = AvroSerializer(sr, KEY_SCHEMA)
        expected: dict[int, dict[str, Any]] = {}
        for version, fields in ((1, V1_FIELDS), (2, V2_FIELDS), (3, V3_FIELDS)):
            values = AvroSerializer(sr, schema(fields))
            for i in range((version - 1) * PER_VERSION, version * PER_VERSION):
                record = user(i, version)
                ts, headers = counter.stamp(topic, now_ms=BASE + (i % 4) * MINUTE + i)
                producer.produce(
                    topic,
                    key=keys({"id": i}, SerializationContext(topic, MessageField.KEY)),
                    value=values(record, SerializationContext(topic, MessageField.VALUE)),
                    partition=i % 2,
                    timestamp=ts,
                    headers=headers,
                )
                expected[i] = as_v3(record)
            assert producer.flush(30) == 0
        assert sr.get_latest_version(f"{topic}-value").version == 3
        with IdempotentProducer(client) as audit_producer:
            counter.publish(audit_producer, audit_topic)
    return {"topic": topic, "audit": audit_topic, "expected": expected, "registry": reg.url}


def typed_options(evolved: dict[str, Any], bootstrap: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": evolved["topic"],
        "schemaRegistryUrl": evolved["registry"],
        "valueFormat": "avro",
        "keyFormat": "avro",
        "startingOffsets": "earliest",
    }


def normalise(value: Any) -> Any:
    """Spark's Python values made comparable with the produced ones (binary comes back as bytearray, and
    timestamps as naive local datetimes)."""
    if isinstance(value, dict):
        return {k: normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    return value


def expected_rows(evolved: dict[str, Any]) -> dict[int, Any]:
    return {i: normalise(v) for i, v in evolved["expected"].items()}


def test_batch_and_stream_read_one_typed_table(
    spark: Any, bootstrap: str, evolved: dict[str, Any], tmp_path: Path
) -> None:
    options = typed_options(evolved, bootstrap)
    df = spark.read.format("rill").options(**options).load()
    value_type = df.schema["value"].dataType
    assert value_type.simpleString() == (
        "struct<id:bigint,name:string,age:int,signup:date,seen:timestamp,amount:decimal(10,2),tags:array<string>,"
        "attrs:map<string,bigint>,kind:string,nickname:string,address:struct<city:string,zip:int>,digest:binary,"
        "country:string,level:int>"
    )
    assert not value_type["id"].nullable and value_type["nickname"].nullable  # a union with null: nullable
    assert df.schema["key"].dataType.simpleString() == "struct<id:bigint>"
    rows = df.select("key", "value", "partition", "offset").collect()
    want = expected_rows(evolved)
    assert len(rows) == 3 * PER_VERSION
    got = {r.key.id: normalise(r.value.asDict(recursive=True)) for r in rows}
    assert got == want
    # v1 records read with the defaults of the fields added later
    assert got[0]["country"] == "unknown" and got[0]["level"] == 1 and got[PER_VERSION]["level"] == 1
    assert all(r.partition == r.key.id % 2 for r in rows)

    # An older version as the reader schema: the newer writers' fields are dropped.
    v1 = spark.read.format("rill").options(**options, valueSchemaVersion="1").load()
    assert v1.schema["value"].dataType.fieldNames()[-1] == "digest"
    v1_rows = {r.value.id: r.value.name for r in v1.select("value").collect()}
    assert v1_rows == {i: f"user-{i}" for i in range(3 * PER_VERSION)}

    # Structured Streaming (AvailableNow) into Parquet: the same typed table.
    stream_options = {k: v for k, v in options.items() if k != "startingOffsets"}
    query = (
        spark.readStream.format("rill")
        .options(**stream_options, startingOffsets="earliest", maxOffsetsPerTrigger="50")
        .load()
        .select("key", "value")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    streamed = spark.read.parquet(str(tmp_path / "out")).collect()
    assert {r.key.id: normalise(r.value.asDict(recursive=True)) for r in streamed} == want
    assert len(streamed) == 3 * PER_VERSION


def test_records_that_do_not_decode(
    spark: Any, bootstrap: str, evolved: dict[str, Any], client: KafkaClient, tmp_path: Path
) -> None:
    topic = f"mixed-{uuid.uuid4().hex[:8]}"
    client.create_topic(topic, 1)
    sr = SchemaRegistryClient({"url": evolved["registry"]})
    values = AvroSerializer(sr, schema(V1_FIELDS))
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, value=values(user(1, 1), SerializationContext(topic, MessageField.VALUE)))
    producer.produce(topic, value=b"plain text, not Avro")
    producer.produce(topic, value=None)  # a tombstone stays null, and is no error
    producer.produce(topic, value=values(user(2, 1), SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0
    base = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "schemaRegistryUrl": evolved["registry"]}
    with pytest.raises(
        Exception, match=rf"cannot decode the value of {topic}-0 at offset 1 with subject {topic}-value"
    ):
        spark.read.format("rill").options(**base, valueFormat="avro").load().collect()
    rows = (
        spark.read.format("rill")
        .options(**base, valueFormat="avro", decodeMode="PERMISSIVE")
        .load()
        .select("offset", "value.name", "decodeError")
        .orderBy("offset")
        .collect()
    )
    assert [(r.offset, r.name) for r in rows] == [(0, "user-1"), (1, None), (2, None), (3, "user-2")]
    assert [r.decodeError is None for r in rows] == [True, False, True, True]
    assert "unknown magic byte" in rows[1].decodeError
    # The loader fails on such a record before it publishes anything, and releases its lock.
    out = tmp_path / "out"
    with pytest.raises(Exception, match=rf"cannot decode the value of {topic}-0 at offset 1"):
        run_load(spark, bootstrap, [topic], out, schema_registry=evolved["registry"], say=lambda _l: None)
    assert published_manifests(out) == [] and not (out / "_loader.lock").exists()
    # What cannot be set up is refused before anything is read.
    with pytest.raises(Exception, match="option schemaRegistryUrl is required"):
        spark.read.format("rill").options(
            subscribe=topic, valueFormat="avro", **{"kafka.bootstrap.servers": bootstrap}
        ).load()
    with pytest.raises(Exception, match=r"option valueSubject is required when the source reads more than one topic"):
        spark.read.format("rill").options(
            **{**base, "subscribe": f"{topic},{evolved['topic']}"}, valueFormat="avro"
        ).load()
    binary = (
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
    )
    with pytest.raises(Exception, match=rf"the query's schema is not the typed schema of {topic}-value version 1"):
        spark.read.format("rill").schema(binary).options(**base, valueFormat="avro").load().collect()
    with pytest.raises(Exception, match=r"error 40401"):
        spark.read.format("rill").options(**base, keyFormat="avro").load()


def _typed_parquet(out: Path, topic: str) -> pa.Table:
    files = sorted(str(f) for f in out.glob(f"batch=*/topic={topic}/date=*/*.parquet"))
    return ds.dataset(files, format="parquet").to_table()


def test_loader_writes_typed_parquet_and_the_audit_passes(
    spark: Any,
    bootstrap: str,
    evolved: dict[str, Any],
    client: KafkaClient,
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic, out = evolved["topic"], tmp_path / "warehouse"
    plain = new_topic()  # a topic without a subject loads as bytes beside the typed one
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        producer.produce(plain, value=b"raw%d" % i, timestamp=BASE + i)
    assert producer.flush(30) == 0
    env = {**os.environ, **worker_env()}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rill",
            "pipeline",
            "load",
            "--bootstrap-server",
            bootstrap,
            "--master",
            "local[1]",
            "--topics",
            f"{topic},{plain}",
            "--output",
            str(out),
            "--schema-registry",
            evolved["registry"],
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [manifest] = published_manifests(out)
    assert manifest.schemas[topic]["value"]["version"] == 3 and manifest.schemas[topic]["key"]["version"] == 1
    assert plain not in manifest.schemas

    table = _typed_parquet(out, topic)
    value = table.schema.field("value").type
    assert value.field("signup").type == pa.date32()
    assert value.field("seen").type == pa.timestamp("us", tz="UTC")
    assert value.field("amount").type == pa.decimal128(10, 2)
    assert value.field("tags").type.value_type == pa.string()
    attrs = value.field("attrs").type
    assert pa.types.is_map(attrs) and (attrs.key_type, attrs.item_type) == (pa.string(), pa.int64())
    assert value.field("address").type.field("zip").type == pa.int32()
    assert value.field("digest").type == pa.binary()
    assert value.field("level").type == pa.int32()
    got = {
        row["key"]["id"]: normalise({**row["value"], "attrs": dict(row["value"]["attrs"])})
        for row in table.select(["key", "value"]).to_pylist()
    }
    assert got == expected_rows(evolved)
    plain_rows = _typed_parquet(out, plain).column("value").to_pylist()
    assert sorted(plain_rows) == [b"raw%d" % i for i in range(5)]
    # The audit reads the typed output (beside the bytes of the plain topic): every audited window complete.
    assert run_audit(client, evolved["audit"], out) == []

    # Records of a fourth run land in a second batch, from where the first ended, once.
    sr = SchemaRegistryClient({"url": evolved["registry"]})
    values, keys = AvroSerializer(sr, schema(V3_FIELDS)), AvroSerializer(sr, KEY_SCHEMA)
    for i in range(1000, 1010):
        producer.produce(
            topic,
            key=keys({"id": i}, SerializationContext(topic, MessageField.KEY)),
            value=values(user(i, 3), SerializationContext(topic, MessageField.VALUE)),
            partition=i % 2,
            timestamp=BASE,
        )
    assert producer.flush(30) == 0
    second = run_load(spark, bootstrap, [topic], out, schema_registry=evolved["registry"], say=lambda _l: None)
    assert second is not None and sum(r.records for r in second.ranges) == 10
    ids = _typed_parquet(out, topic).column("key").combine_chunks().field("id").to_pylist()
    assert sorted(ids) == [*range(3 * PER_VERSION), *range(1000, 1010)]
