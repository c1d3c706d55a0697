"""The JSON Schema and Protobuf pieces of the registry on their own: Confluent's compatibility rules one by one,
and Protobuf schemas printed as .proto text that compiles back to the same descriptor."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from rill.registry import json_schema, protobuf_schema
from rill.registry.errors import RegistryError


def _json_problems(reader: dict[str, Any], writer: dict[str, Any]) -> list[str]:
    return json_schema.incompatibilities(json_schema.parse(json.dumps(reader), []),
                                         json_schema.parse(json.dumps(writer), []))  # fmt: skip


OBJ = {"type": "object", "properties": {"a": {"type": "string"}, "n": {"type": "integer", "maximum": 10}}}


@pytest.mark.parametrize(("reader", "rule"), [
    ({**OBJ, "properties": {**OBJ["properties"], "a": {"type": "integer"}}}, "TYPE_NARROWED"),
    ({**OBJ, "required": ["a"]}, "REQUIRED_PROPERTY_ADDED"),
    ({**OBJ, "properties": {**OBJ["properties"], "b": {"type": "string"}}}, "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"),
    ({**OBJ, "additionalProperties": False}, "ADDITIONAL_PROPERTIES_REMOVED"),
    ({**OBJ, "properties": {**OBJ["properties"], "n": {"type": "integer", "maximum": 5}}}, "MAXIMUM_CHANGED"),
    ({**OBJ, "properties": {**OBJ["properties"], "a": {"type": "string", "enum": ["x"]}}}, "ENUM_ARRAY_NARROWED"),
])  # fmt: skip
def test_json_rules_that_break_a_reader(reader: dict[str, Any], rule: str) -> None:
    assert any(rule in p for p in _json_problems(reader, OBJ))


@pytest.mark.parametrize("reader", [
    OBJ,
    {**OBJ, "properties": {**OBJ["properties"], "n": {"type": "number"}}},  # widened
    {**OBJ, "properties": {"a": {"type": "string"}}},  # removed from an open model
    {**OBJ, "properties": {**OBJ["properties"], "n": {"type": "integer", "maximum": 20}}},  # looser bound
])  # fmt: skip
def test_json_changes_a_reader_accepts(reader: dict[str, Any]) -> None:
    assert _json_problems(reader, OBJ) == []


def test_closed_content_model_evolves_by_adding_properties() -> None:
    closed = {**OBJ, "additionalProperties": False}
    added = {**closed, "properties": {**OBJ["properties"], "b": {"type": "string"}}}
    assert _json_problems(added, closed) == []  # BACKWARD: the new schema reads old data
    assert any("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL" in p for p in _json_problems(closed, added))


def test_invalid_json_schemas_are_42201() -> None:
    for text in ('{"type": 5}', "[1]", "not json"):
        with pytest.raises(RegistryError) as info:
            json_schema.parse(text, [])
        assert info.value.code == 42201


PROTO2 = """syntax = "proto2";
package p.q;
import "google/protobuf/duration.proto";
option java_package = "com.example";
message Outer {
  required string id = 1;
  optional int32 n = 2 [default = 7];
  repeated Inner inners = 3;
  optional Kind kind = 4;
  map<int32, string> names = 5;
  optional google.protobuf.Duration wait = 6;
  reserved 9 to 11;
  reserved "gone";
  message Inner { optional bytes b = 1; }
  enum Kind { A = 0; B = 1; }
}
"""


def _compile(text: str) -> Any:
    return asyncio.run(protobuf_schema.compile_schema(text, []))


def test_printed_proto_text_compiles_to_the_same_descriptor() -> None:
    fdp = _compile(PROTO2)
    printed = protobuf_schema.to_proto_text(fdp)
    assert _compile(printed) == fdp
    assert protobuf_schema.decode(protobuf_schema.encode(fdp)) == fdp
    assert protobuf_schema.decode(PROTO2) is None


@pytest.mark.parametrize(("change", "rule"), [
    (("optional int32 n = 2 [default = 7]", "optional string n = 2"), "FIELD_SCALAR_KIND_CHANGED"),
    (("optional int32 n = 2 [default = 7]", "repeated int32 n = 2"), "FIELD_KIND_CHANGED"),
    (("optional Kind kind = 4", "optional Inner kind = 4"), "FIELD_KIND_CHANGED"),
    (("package p.q;", "package p.r;"), "PACKAGE_CHANGED"),
    (("  required string id = 1;\n", ""), "REQUIRED_FIELD_REMOVED"),
    (("  optional int32 n = 2 [default = 7];\n", "  optional int32 n = 2 [default = 7];\n  required int32 m = 13;\n"),
     "REQUIRED_FIELD_ADDED"),
])  # fmt: skip
def test_protobuf_rules(change: tuple[str, str], rule: str) -> None:
    old, new = _compile(PROTO2), _compile(PROTO2.replace(*change))
    problems = protobuf_schema.incompatibilities(new, old)
    assert any(rule in p for p in problems), problems


def test_protobuf_compatible_changes() -> None:
    old = _compile(PROTO2)
    for new_text in (PROTO2.replace("optional int32 n = 2", "optional uint64 n = 2"),  # one wire group
                     PROTO2.replace("  reserved 9 to 11;", "  optional string note = 12;\n  reserved 9 to 11;"),
                     PROTO2.replace("  optional google.protobuf.Duration wait = 6;\n", "")):  # fmt: skip
        assert protobuf_schema.incompatibilities(_compile(new_text), old) == []
