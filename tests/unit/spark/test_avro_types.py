"""Avro schemas as Spark types, and values written by fastavro made into Arrow arrays of those types
(what the rill source's typed columns hold), without a Spark session."""

from __future__ import annotations

import datetime
import decimal
import io
import uuid
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_type

from rill.spark.avro_types import AvroTypeError, converter, has_record_union, spark_type


def arrow_values(schema: Any, values: list[Any], reader: Any = None) -> tuple[str, list[Any]]:
    """Each value written with ``schema``, read back (resolved to ``reader``), converted and put in an Arrow
    array of the Spark type: ``(Spark type, the array as Python values)``."""
    target = schema if reader is None else reader
    stype, _nullable = spark_type(target)
    fix = converter(target)
    by_name = has_record_union(target)
    out = []
    for v in values:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), v)
        kwargs = {"return_record_name": True, "return_record_name_override": True} if by_name else {}
        decoded = fastavro.schemaless_reader(
            io.BytesIO(buf.getvalue()), fastavro.parse_schema(schema), fastavro.parse_schema(target), **kwargs
        )
        out.append(fix(decoded) if fix else decoded)
    return stype.simpleString(), pa.array(out, to_arrow_type(stype, timezone="UTC")).to_pylist()


def test_primitives_and_logical_types() -> None:
    fields = [
        {"name": "b", "type": "boolean"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {
            "name": "dec",
            "type": {"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 12, "scale": 3},
        },
        {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "odd", "type": {"type": "long", "logicalType": "not-a-logical-type"}},
    ]
    schema = {"type": "record", "name": "R", "fields": fields}
    u = uuid.UUID(int=42)
    value = {
        "b": True,
        "f": 1.5,
        "d": datetime.date(2024, 2, 29),
        "ts": datetime.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC),
        "local": datetime.datetime(2024, 1, 2, 3, 4, 5, 678000),
        "dec": decimal.Decimal("123456.789"),
        "t": datetime.time(1, 2, 3, 4000),
        "u": u,
        "odd": 7,
    }
    stype, [got] = arrow_values(schema, [value])
    assert stype == (
        "struct<b:boolean,f:float,d:date,ts:timestamp,local:timestamp_ntz,dec:decimal(12,3),t:int,u:string,odd:bigint>"
    )
    assert got == {**value, "t": 3_723_004, "u": str(u)}


def test_unions_nullability_and_named_types() -> None:
    point = {"type": "record", "name": "Point", "namespace": "geo", "fields": [{"name": "x", "type": "int"}]}
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "maybe", "type": ["null", "long"]},
            {"name": "either", "type": ["string", point, "null"]},
            {"name": "again", "type": ["null", "geo.Point"]},
            {"name": "when", "type": ["null", "int", "string"]},
        ],
    }
    stype, nullable = spark_type(schema)
    assert not nullable
    assert [(f.name, f.nullable) for f in stype.fields] == [
        ("maybe", True),
        ("either", True),
        ("again", True),
        ("when", True),
    ]
    values = [
        {"maybe": None, "either": {"x": 1}, "again": {"x": 2}, "when": 7},
        {"maybe": 5, "either": "text", "again": None, "when": "soon"},
        {"maybe": 6, "either": None, "again": None, "when": None},
    ]
    text, got = arrow_values(schema, values)
    assert text == (
        "struct<maybe:bigint,either:struct<member0:string,member1:struct<x:int>>,again:struct<x:int>,"
        "when:struct<member0:int,member1:string>>"
    )
    assert got == [
        {
            "maybe": None,
            "either": {"member0": None, "member1": {"x": 1}},
            "again": {"x": 2},
            "when": {"member0": 7, "member1": None},
        },
        {
            "maybe": 5,
            "either": {"member0": "text", "member1": None},
            "again": None,
            "when": {"member0": None, "member1": "soon"},
        },
        {"maybe": 6, "either": None, "again": None, "when": None},
    ]


def test_resolution_defaults_and_promotion_reach_the_arrow_values() -> None:
    writer = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "n", "type": "int"}, {"name": "gone", "type": "string"}],
    }
    reader = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "n", "type": "long"},
            {
                "name": "tags",
                "type": {"type": "array", "items": {"type": "string", "logicalType": "uuid"}},
                "default": [],
            },
            {"name": "m", "type": {"type": "map", "values": ["null", "double"]}, "default": {"a": None}},
        ],
    }
    text, got = arrow_values(writer, [{"n": 3, "gone": "x"}], reader)
    assert text == "struct<n:bigint,tags:array<string>,m:map<string,double>>"
    assert got == [{"n": 3, "tags": [], "m": [("a", None)]}]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}, "recursive"),
        ("null", "null alone"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2}, r"decimal\(40, 2\)"),
        ({"type": "record", "name": "R", "fields": [{"name": "x", "type": "Missing"}]}, "unknown Avro type 'Missing'"),
    ],
)
def test_schemas_without_a_spark_type_are_refused(schema: Any, message: str) -> None:
    with pytest.raises(AvroTypeError, match=message):
        spark_type(schema)
