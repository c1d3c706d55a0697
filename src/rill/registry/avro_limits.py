"""What Avro's binary encoding leaves unbounded. An array is written as a count and then its items; an item
of a type that takes no byte (``null``, a record with no field or only such fields, a ``fixed`` of size 0)
costs nothing, so ten bytes can claim 2**62 of them and a reader spends its memory and time building them.
A decoder of records it did not write checks the writer schema first (``has_free_items``)."""

from __future__ import annotations

from typing import Any

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def has_free_items(schema: Any) -> bool:
    """True when ``schema`` (Avro's JSON form) holds an array whose items take no byte."""
    named: dict[str, Any] = {}
    _collect(schema, "", named)
    return _has_free_array(schema, "", named, set())


def _full(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _collect(schema: Any, namespace: str, named: dict[str, Any]) -> None:
    if isinstance(schema, list):
        for branch in schema:
            _collect(branch, namespace, named)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed") and isinstance(schema.get("name"), str):
            full = _full(schema["name"], str(schema.get("namespace") or namespace))
            named[full] = schema
            namespace = full.rpartition(".")[0]
        for field in schema.get("fields") or []:
            if isinstance(field, dict):
                _collect(field.get("type"), namespace, named)
        for key in ("items", "values"):
            if key in schema:
                _collect(schema[key], namespace, named)
        if isinstance(kind, dict | list):
            _collect(kind, namespace, named)


def _resolve(schema: Any, namespace: str, named: dict[str, Any]) -> Any:
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        return named.get(_full(schema, namespace), named.get(schema, schema))
    return schema


def _free(schema: Any, namespace: str, named: dict[str, Any], open_records: set[int]) -> bool:
    """True when a value of ``schema`` takes no byte."""
    schema = _resolve(schema, namespace, named)
    if isinstance(schema, str):
        return schema == "null"
    if not isinstance(schema, dict):
        return False  # a union writes its branch's index
    kind = schema.get("type")
    if isinstance(kind, str) and kind in _PRIMITIVES:
        return kind == "null"
    if kind == "fixed":
        return schema.get("size") == 0
    if kind in ("record", "error"):
        if id(schema) in open_records:  # a record inside itself: never a finite value that takes no byte
            return False
        open_records.add(id(schema))
        ns = _full(str(schema.get("name", "")), str(schema.get("namespace") or namespace)).rpartition(".")[0]
        try:
            return all(_free(f.get("type"), ns, named, open_records) for f in schema.get("fields") or []
                       if isinstance(f, dict))  # fmt: skip
        finally:
            open_records.discard(id(schema))
    if isinstance(kind, dict | list):
        return _free(kind, namespace, named, open_records)
    return False  # enum (its index), array and map (their counts)


def _has_free_array(schema: Any, namespace: str, named: dict[str, Any], visited: set[int]) -> bool:
    schema = _resolve(schema, namespace, named)
    if isinstance(schema, list):
        return any(_has_free_array(b, namespace, named, visited) for b in schema)
    if not isinstance(schema, dict) or id(schema) in visited:
        return False
    visited.add(id(schema))
    kind = schema.get("type")
    if kind in ("record", "error"):
        ns = _full(str(schema.get("name", "")), str(schema.get("namespace") or namespace)).rpartition(".")[0]
        return any(_has_free_array(f.get("type"), ns, named, visited) for f in schema.get("fields") or []
                   if isinstance(f, dict))  # fmt: skip
    if kind == "array":
        return _free(schema.get("items"), namespace, named, set()) or _has_free_array(
            schema.get("items"), namespace, named, visited)
    if kind == "map":
        return _has_free_array(schema.get("values"), namespace, named, visited)
    if isinstance(kind, dict | list):
        return _has_free_array(kind, namespace, named, visited)
    return False
