"""Avro schemas as Spark types, and fastavro's decoded values made ready for Arrow.

The mapping follows Spark's own ``from_avro``:

=====================================  ===============================================================
Avro                                   Spark (Arrow)
=====================================  ===============================================================
boolean, int, long, float, double      boolean, int, long, float, double
string (also ``uuid``), enum           string
bytes, fixed                           binary
record                                 struct (fields in the record's order)
array, map                             array, map<string, ...>
``[null, T]`` (either order)           T, nullable
union of several non-null types        struct<member0, member1, ...>, one member set (Spark's layout)
date                                   date
timestamp-millis / -micros             timestamp (UTC instant)
local-timestamp-millis / -micros       timestamp_ntz
decimal (bytes or fixed)               decimal(precision, scale)
time-millis / time-micros              int (ms) / long (us) since midnight
=====================================  ===============================================================

A field is nullable only when its Avro type is a union with null. Recursive records have no Spark type and
are refused.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import types as T

AvroSchema = Any  # parsed JSON: a str (a primitive or a named type's name), a dict or a list (a union)
Convert = Callable[[Any], Any]

PRIMITIVES: dict[str, Any] = {
    "boolean": T.BooleanType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "float": T.FloatType(),
    "double": T.DoubleType(),
    "bytes": T.BinaryType(),
    "string": T.StringType(),
}
MAX_DECIMAL_PRECISION = 38  # Spark's DecimalType limit


class AvroTypeError(ValueError):
    """An Avro schema that has no Spark type (the message names the part)."""


def _fullname(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


class _Walker:
    """Walks a schema once, resolving named types; ``visiting`` catches recursion."""

    def __init__(self) -> None:
        self.named: dict[str, dict[str, Any]] = {}
        self.visiting: set[str] = set()

    def resolve(self, schema: AvroSchema, namespace: str | None) -> tuple[AvroSchema, str | None]:
        """A named type's reference replaced by its definition; also the namespace inside it."""
        if isinstance(schema, str) and schema not in PRIMITIVES and schema != "null":
            full = _fullname(schema, namespace)
            target = self.named.get(full) or self.named.get(schema)
            if target is None:
                raise AvroTypeError(f"unknown Avro type {schema!r}")
            return target, target.get("namespace") or namespace
        if isinstance(schema, dict) and schema.get("type") in ("record", "error", "enum", "fixed"):
            ns = schema.get("namespace") or (schema["name"].rpartition(".")[0] if "." in schema["name"] else namespace)
            self.named[_fullname(schema["name"], ns)] = {**schema, "namespace": ns}
            return schema, ns
        return schema, namespace

    def spark_type(self, schema: AvroSchema, namespace: str | None = None) -> tuple[Any, bool]:
        """``(Spark type, nullable)``."""
        schema, namespace = self.resolve(schema, namespace)
        if isinstance(schema, list):
            branches = [b for b in schema if b != "null" and b != {"type": "null"}]
            nullable = len(branches) < len(schema)
            if len(branches) == 1:
                return self.spark_type(branches[0], namespace)[0], nullable
            if not branches:
                raise AvroTypeError("a union of null alone has no Spark type")
            members = [
                T.StructField(f"member{i}", self.spark_type(b, namespace)[0], True) for i, b in enumerate(branches)
            ]
            return T.StructType(members), nullable
        if isinstance(schema, str):
            if schema == "null":
                raise AvroTypeError("the Avro type null alone has no Spark type")
            return PRIMITIVES[schema], False
        kind = schema.get("type")
        logical = schema.get("logicalType")
        if isinstance(kind, (list, dict)) or (isinstance(kind, str) and kind not in _COMPLEX and logical is None):
            return self.spark_type(kind, namespace)
        if logical is not None:
            found = _logical_type(schema, kind, logical)
            if found is not None:
                return found, False
        if kind in ("record", "error"):
            full = _fullname(schema["name"], namespace)
            if full in self.visiting:
                raise AvroTypeError(f"the recursive Avro record {full} has no Spark type")
            self.visiting.add(full)
            fields = []
            for f in schema.get("fields", []):
                ftype, fnull = self.spark_type(f["type"], namespace)
                fields.append(T.StructField(f["name"], ftype, fnull))
            self.visiting.discard(full)
            return T.StructType(fields), False
        if kind == "enum":
            return T.StringType(), False
        if kind == "fixed":
            return T.BinaryType(), False
        if kind == "array":
            item, item_null = self.spark_type(schema["items"], namespace)
            return T.ArrayType(item, item_null), False
        if kind == "map":
            value, value_null = self.spark_type(schema["values"], namespace)
            return T.MapType(T.StringType(), value, value_null), False
        if kind in PRIMITIVES:
            return PRIMITIVES[kind], False
        raise AvroTypeError(f"unknown Avro type {kind!r}")


_COMPLEX = ("record", "error", "enum", "fixed", "array", "map")


def _logical_type(schema: Mapping[str, Any], kind: str, logical: str) -> Any | None:
    """The Spark type of a logical type, or None where Avro says to ignore it (a wrong base type)."""
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema.get("precision", 0)), int(schema.get("scale", 0))
        if not 0 < precision <= MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
            raise AvroTypeError(f"decimal({precision}, {scale}) has no Spark type (precision 1..38, scale <= it)")
        return T.DecimalType(precision, scale)
    table = {
        ("int", "date"): T.DateType(),
        ("long", "timestamp-millis"): T.TimestampType(),
        ("long", "timestamp-micros"): T.TimestampType(),
        ("long", "local-timestamp-millis"): T.TimestampNTZType(),
        ("long", "local-timestamp-micros"): T.TimestampNTZType(),
        ("int", "time-millis"): T.IntegerType(),
        ("long", "time-micros"): T.LongType(),
        ("string", "uuid"): T.StringType(),
    }
    return table.get((kind, logical))


def spark_type(schema: AvroSchema) -> tuple[Any, bool]:
    """The Spark type of a parsed Avro schema, and whether its values may be null."""
    return _Walker().spark_type(schema)


# -- values ------------------------------------------------------------------------------------------------


def _time_ms(t: Any) -> Any:
    if isinstance(t, datetime.time):
        return ((t.hour * 60 + t.minute) * 60 + t.second) * 1000 + t.microsecond // 1000
    return t


def _time_us(t: Any) -> Any:
    if isinstance(t, datetime.time):
        return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond
    return t


def _text(v: Any) -> Any:
    return str(v) if isinstance(v, uuid.UUID) else v


class _Converters(_Walker):
    """Functions that turn fastavro's values into what ``pyarrow.array`` takes for the Spark type; None
    where the values are right as they come (most schemas need no pass over the values at all)."""

    def convert(self, schema: AvroSchema, namespace: str | None = None) -> Convert | None:
        schema, namespace = self.resolve(schema, namespace)
        if isinstance(schema, list):
            branches = [b for b in schema if b != "null" and b != {"type": "null"}]
            if len(branches) == 1:
                return self.convert(branches[0], namespace)
            return self._union(branches, namespace)
        if isinstance(schema, str):
            return None  # fastavro reads plain strings as str
        kind = schema.get("type")
        logical = schema.get("logicalType")
        if isinstance(kind, (list, dict)) or (isinstance(kind, str) and kind not in _COMPLEX and logical is None):
            return self.convert(kind, namespace)
        if logical in ("time-millis", "time-micros") and _logical_type(schema, kind, logical) is not None:
            return _time_ms if logical == "time-millis" else _time_us
        if kind == "string" and logical == "uuid":
            return _text  # fastavro gives uuid.UUID
        if kind in ("record", "error"):
            full = _fullname(schema["name"], namespace)
            if full in self.visiting:
                raise AvroTypeError(f"the recursive Avro record {full} has no Spark type")
            self.visiting.add(full)
            fields = [(f["name"], self.convert(f["type"], namespace)) for f in schema.get("fields", [])]
            self.visiting.discard(full)
            todo = [(name, fn) for name, fn in fields if fn is not None]
            if not todo:
                return None

            def record(v: Any) -> Any:
                if v is None:
                    return None
                for name, fn in todo:
                    v[name] = fn(v[name])
                return v

            return record
        if kind == "array":
            item = self.convert(schema["items"], namespace)
            if item is None:
                return None
            return lambda v: None if v is None else [item(x) for x in v]
        if kind == "map":
            value = self.convert(schema["values"], namespace)
            if value is None:
                return None
            return lambda v: None if v is None else {k: value(x) for k, x in v.items()}
        return None

    def _union(self, branches: list[AvroSchema], namespace: str | None) -> Convert:
        """Spark's layout of a union of several types: a struct with one member per branch, the one the value
        was written with set. fastavro reports the branch of records by name (``return_record_name``); other
        branches are told apart by the Python type of the value."""
        checks: list[tuple[str, Callable[[Any], bool], Convert | None]] = []
        for i, b in enumerate(branches):
            resolved, ns = self.resolve(b, namespace)
            checks.append((f"member{i}", _branch_test(resolved, ns), self.convert(resolved, ns)))

        def union(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str):  # (record name, record)
                name, v = v
                for member, _test, fn in checks:
                    if getattr(_test, "record_name", None) == name:
                        return {member: fn(v) if fn else v}
            for member, test, fn in checks:
                if test(v):
                    return {member: fn(v) if fn else v}
            raise AvroTypeError(f"value {v!r} matches no branch of the union")

        return union


def _branch_test(schema: AvroSchema, namespace: str | None) -> Callable[[Any], bool]:
    kind = schema if isinstance(schema, str) else schema.get("type") if isinstance(schema, dict) else None
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    if logical == "decimal":
        return lambda v: isinstance(v, decimal.Decimal)
    if logical == "date":
        return lambda v: isinstance(v, datetime.date) and not isinstance(v, datetime.datetime)
    if logical is not None and "timestamp" in logical:
        return lambda v: isinstance(v, datetime.datetime)
    if logical == "uuid":
        return lambda v: isinstance(v, (uuid.UUID, str))
    tests: dict[str, Callable[[Any], bool]] = {
        "boolean": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, float),
        "double": lambda v: isinstance(v, float),
        "bytes": lambda v: isinstance(v, bytes),
        "fixed": lambda v: isinstance(v, bytes),
        "string": lambda v: isinstance(v, (str, uuid.UUID)),
        "enum": lambda v: isinstance(v, str),
        "array": lambda v: isinstance(v, list),
        "map": lambda v: isinstance(v, dict),
    }
    if kind in ("record", "error"):
        name = _fullname(schema["name"], namespace)

        def is_record(v: Any) -> bool:
            return isinstance(v, dict)

        is_record.record_name = name  # type: ignore[attr-defined]
        return is_record
    return tests.get(str(kind), lambda v: False)


def converter(schema: AvroSchema) -> Convert | None:
    """What to apply to each decoded value before it goes into Arrow; None when nothing needs doing."""
    return _Converters().convert(schema)


def has_record_union(schema: AvroSchema) -> bool:
    """Whether a union of several types holds a record (fastavro then reports the branch by name)."""
    found = False

    def walk(s: AvroSchema, in_union: bool, seen: set[int]) -> None:
        nonlocal found
        if id(s) in seen:
            return
        if isinstance(s, list):
            many = len([b for b in s if b != "null"]) > 1
            for b in s:
                walk(b, many, seen)
        elif isinstance(s, dict):
            seen = seen | {id(s)}
            if s.get("type") in ("record", "error") and in_union:
                found = True
            for f in s.get("fields", []):
                walk(f["type"], False, seen)
            for key in ("items", "values"):
                if key in s:
                    walk(s[key], False, seen)
            if isinstance(s.get("type"), (list, dict)):
                walk(s["type"], in_union, seen)

    walk(schema, False, set())
    return found


__all__ = ["AvroTypeError", "converter", "has_record_union", "spark_type"]
