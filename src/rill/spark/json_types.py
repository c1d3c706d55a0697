"""JSON Schema to Spark types, and decoded JSON documents to the values Arrow takes for them.

The mapping (after what Spark's ``from_json`` needs: a fixed shape per column)::

    JSON Schema                                      Spark
    object with properties                           struct (one field per property, each nullable)
    object without properties (additionalProperties  map<string, string> (values as JSON text when not
      a schema or absent)                              strings)
    array (items)                                    array
    string (format date-time)                        string (timestamp)
    integer / number / boolean                       long / double / boolean
    ["T", "null"]                                    T, nullable
    anything else (several types, oneOf, anyOf,      string (the value's JSON text)
      no type)
    $ref                                             the referenced schema's type (local definitions or a
                                                       referenced subject's schema, by the reference name)

A value that does not fit its type is an error (``decodeMode`` says what happens); a property the reader's
schema does not name is dropped.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import types as T

Convert = Callable[[Any], Any]
_MAX_DEPTH = 32


class JsonTypeError(ValueError):
    """A JSON schema Rill cannot give a Spark type (a recursive one, say)."""


class JsonSchemaWalker:
    """Follows ``$ref`` within a document (``#/definitions/...``, ``#/$defs/...``) and into referenced schemas
    (``referenced``: reference name or ``$id`` -> document)."""

    def __init__(self, document: Any, referenced: Mapping[str, Any]) -> None:
        self.document = document
        self.referenced = dict(referenced)

    def resolve(self, node: Any, root: Any) -> tuple[Any, Any]:
        for _ in range(_MAX_DEPTH):
            if not isinstance(node, dict) or not isinstance(node.get("$ref"), str):
                return node, root
            ref: str = node["$ref"]
            target, _, pointer = ref.partition("#")
            if target:
                if target not in self.referenced:
                    raise JsonTypeError(f"$ref {ref!r} names no referenced schema")
                root = self.referenced[target]
            node = root
            for part in [p for p in pointer.split("/") if p]:
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(node, dict) or part not in node:
                    raise JsonTypeError(f"$ref {ref!r} does not resolve")
                node = node[part]
        raise JsonTypeError("$ref chains too long")

    def spark_type(self) -> Any:
        return self._type(self.document, self.document, 0)[0]

    def _type(self, node: Any, root: Any, depth: int) -> tuple[Any, bool]:
        if depth > _MAX_DEPTH:
            raise JsonTypeError("the schema nests too deep (a recursive schema?)")
        node, root = self.resolve(node, root)
        if not isinstance(node, dict):
            return T.StringType(), True
        types = node.get("type")
        kinds = [types] if isinstance(types, str) else list(types) if isinstance(types, list) else []
        nullable = "null" in kinds or not kinds
        kinds = [k for k in kinds if k != "null"]
        if len(kinds) != 1:
            return T.StringType(), True
        kind = kinds[0]
        if kind == "object":
            props = node.get("properties")
            if isinstance(props, dict) and props:
                fields = [T.StructField(name, self._type(sub, root, depth + 1)[0], True) for name, sub in props.items()]
                return T.StructType(fields), nullable
            return T.MapType(T.StringType(), T.StringType(), True), nullable
        if kind == "array":
            items = node.get("items", {})
            return T.ArrayType(self._type(items, root, depth + 1)[0], True), nullable
        simple = {"string": T.StringType(), "integer": T.LongType(), "number": T.DoubleType(),
                  "boolean": T.BooleanType()}  # fmt: skip
        return simple.get(kind, T.StringType()), nullable


def converter(spark_type: Any) -> Convert:
    """Turns a decoded JSON value into what Arrow takes for ``spark_type`` (ValueError when it does not fit)."""
    if isinstance(spark_type, T.StructType):
        fields = [(f.name, converter(f.dataType)) for f in spark_type.fields]

        def struct(v: Any) -> Any:
            if v is None:
                return None
            if not isinstance(v, dict):
                raise ValueError(f"expected an object, got {type(v).__name__}")
            return {name: convert(v.get(name)) for name, convert in fields}

        return struct
    if isinstance(spark_type, T.ArrayType):
        element = converter(spark_type.elementType)

        def array(v: Any) -> Any:
            if v is None:
                return None
            if not isinstance(v, list):
                raise ValueError(f"expected an array, got {type(v).__name__}")
            return [element(x) for x in v]

        return array
    if isinstance(spark_type, T.MapType):
        return lambda v: None if v is None else [(str(k), _text(x)) for k, x in _object(v).items()]
    if isinstance(spark_type, T.LongType):
        return lambda v: None if v is None else _integer(v)
    if isinstance(spark_type, T.DoubleType):
        return lambda v: None if v is None else _number(v)
    if isinstance(spark_type, T.BooleanType):
        return lambda v: None if v is None else _boolean(v)
    return _text


def _object(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise ValueError(f"expected an object, got {type(v).__name__}")
    return v


def _integer(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int | float) or (isinstance(v, float) and not v.is_integer()):
        raise ValueError(f"expected an integer, got {v!r}")
    return int(v)


def _number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"expected a number, got {v!r}")
    return float(v)


def _boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"expected a boolean, got {v!r}")
    return v


def _text(v: Any) -> Any:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, datetime.datetime):
        return v.isoformat()
    return json.dumps(v, separators=(",", ":"))
