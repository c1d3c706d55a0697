"""Schema parsing and compatibility for the three types Confluent's registry serves: Avro through the
``avro`` library (the Apache Avro project's own reader/writer compatibility checker), JSON Schema
(:mod:`rill.registry.json_schema`) and Protobuf (:mod:`rill.registry.protobuf_schema`).

A schema's identity is its type, its canonical text and its references: two registrations of the same
identity share one global id. The canonical text of Avro and JSON schemas is their compact JSON
(whitespace and key spacing do not matter); a Protobuf schema's is the base64 of its normalized
``FileDescriptorProto``, whether it was given as ``.proto`` text or as a descriptor.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import avro.errors
import avro.name
import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from rill.registry import json_schema, protobuf_schema
from rill.registry.errors import INVALID_COMPATIBILITY_LEVEL, RegistryError, invalid_schema

AVRO = "AVRO"
JSON = "JSON"
PROTOBUF = "PROTOBUF"
SCHEMA_TYPES = (AVRO, JSON, PROTOBUF)

COMPATIBILITY_LEVELS = (
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
    "NONE",
)
DEFAULT_COMPATIBILITY = "BACKWARD"


@dataclass(frozen=True, slots=True)
class Reference:
    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True, slots=True)
class SchemaText:
    """A schema as stored: its type, compact text and references (the identity of a global id)."""

    schema_type: str
    text: str
    references: tuple[Reference, ...] = field(default=())

    @property
    def identity(self) -> tuple[str, str, tuple[Reference, ...]]:
        return (self.schema_type, self.text, self.references)


def check_level(level: Any) -> str:
    if not isinstance(level, str) or level.upper() not in COMPATIBILITY_LEVELS:
        raise RegistryError(
            INVALID_COMPATIBILITY_LEVEL,
            f"Invalid compatibility level. Valid values are {', '.join(COMPATIBILITY_LEVELS)}",
        )
    return level.upper()


def schema_from_request(body: Any) -> SchemaText:
    """The ``schema``, ``schemaType`` and ``references`` of a registration, lookup or check body."""
    if not isinstance(body, dict):
        raise invalid_schema("the request body must be a JSON object")
    text = body.get("schema")
    if not isinstance(text, str) or not text.strip():
        raise invalid_schema("'schema' must be a non-empty string")
    schema_type = body.get("schemaType") or AVRO
    if not isinstance(schema_type, str) or schema_type.upper() not in SCHEMA_TYPES:
        raise invalid_schema(f"unsupported schemaType {schema_type!r} (supported: {', '.join(SCHEMA_TYPES)})")
    refs_in = body.get("references") or []
    if not isinstance(refs_in, list):
        raise invalid_schema("'references' must be a list")
    refs: list[Reference] = []
    for r in refs_in:
        if not (
            isinstance(r, dict)
            and isinstance(r.get("name"), str)
            and isinstance(r.get("subject"), str)
            and isinstance(r.get("version"), int)
            and not isinstance(r.get("version"), bool)
        ):
            raise invalid_schema("each reference needs a string 'name' and 'subject' and an integer 'version'")
        refs.append(Reference(r["name"], r["subject"], r["version"]))
    kind = schema_type.upper()
    if kind == PROTOBUF:  # .proto text or a base64 descriptor: made canonical once compiled (prepare)
        return SchemaText(kind, text, tuple(refs))
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError) as e:  # RecursionError: nested past the parser's depth
        raise invalid_schema(f"not JSON: {e}") from None
    compact = json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)
    return SchemaText(kind, compact, tuple(refs))


async def prepare(schema: SchemaText, referenced: Sequence[tuple[str, SchemaText]]) -> tuple[SchemaText, Any]:
    """The canonical form of ``schema`` and its parsed form; ``referenced`` is (reference name, schema) of every
    schema it references, directly or not, dependencies first. 42201 if it is not a valid schema."""
    if schema.schema_type == AVRO:
        return schema, parse_avro(schema, [s for _, s in referenced])
    if schema.schema_type == JSON:
        return schema, json_schema.parse(schema.text, [(name, s.text) for name, s in referenced])
    deps = []
    for name, s in referenced:
        fdp = protobuf_schema.decode(s.text)
        if fdp is None:
            raise invalid_schema(f"reference {name!r} is not a Protobuf schema")
        deps.append((name, fdp))
    fdp = await protobuf_schema.compile_schema(schema.text, deps)
    return SchemaText(PROTOBUF, protobuf_schema.encode(fdp), schema.references), fdp


def parse_canonical(schema: SchemaText, referenced: Sequence[tuple[str, SchemaText]]) -> Any:
    """The parsed form of a stored (canonical) schema, without compiling anything."""
    if schema.schema_type == AVRO:
        return parse_avro(schema, [s for _, s in referenced])
    if schema.schema_type == JSON:
        return json_schema.parse(schema.text, [(name, s.text) for name, s in referenced])
    fdp = protobuf_schema.decode(schema.text)
    if fdp is None:
        raise invalid_schema("a stored Protobuf schema is not a descriptor")
    return fdp


def render(schema: SchemaText, fmt: str | None = None) -> str:
    """The schema text an answer carries: a Protobuf schema as ``.proto`` text, or (``format=serialized``) as its
    base64 descriptor; Avro and JSON as stored."""
    if schema.schema_type != PROTOBUF or (fmt or "").lower() == "serialized":
        return schema.text
    fdp = protobuf_schema.decode(schema.text)
    return protobuf_schema.to_proto_text(fdp) if fdp is not None else schema.text


def parse_avro(schema: SchemaText, referenced: Sequence[SchemaText] = ()) -> avro.schema.Schema:
    """Parse ``schema`` after the schemas it references (whose named types it may use); 42201 if invalid."""
    names = avro.name.Names(validate_names=True)
    try:
        for ref in referenced:
            avro.schema.make_avsc_object(json.loads(ref.text), names)
        return avro.schema.make_avsc_object(json.loads(schema.text), names)
    except (avro.errors.AvroException, ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
        raise invalid_schema(str(e) or type(e).__name__) from None


def _describe(result: Any) -> list[str]:
    kinds = ", ".join(sorted(str(i.value).upper() for i in result.incompatibilities)) or "INCOMPATIBLE"
    where = ", ".join(sorted(result.locations))
    what = ", ".join(sorted(str(m) for m in result.messages))
    return [f"{{errorType:'{kinds}', description:'at {where}: {what}'}}"]


def _avro_problems(reader: Any, writer: Any) -> list[str]:
    checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]
    result = checker.get_compatibility(reader, writer)
    return [] if result.compatibility is SchemaCompatibilityType.compatible else _describe(result)


def _text_of(parsed: Any) -> str:
    """A parsed schema as one line of text, for messages."""
    if isinstance(parsed, json_schema.ParsedJsonSchema):
        return json.dumps(parsed.document, separators=(",", ":"))
    if isinstance(parsed, protobuf_schema.FDP):
        return " ".join(protobuf_schema.to_proto_text(parsed).split())
    return str(parsed)


_CHECKERS = {AVRO: _avro_problems, JSON: json_schema.incompatibilities, PROTOBUF: protobuf_schema.incompatibilities}


def incompatibilities(
    new: Any, previous: Sequence[tuple[int, Any]], level: str, schema_type: str = AVRO
) -> list[str]:
    """Messages describing why ``new`` breaks ``level`` against ``previous`` (oldest first, each
    ``(version, parsed schema)``); empty when compatible. Non-transitive levels look at the last one only.
    An earlier version of another schema type cannot be compared: it counts as incompatible, as in
    Confluent's registry."""
    if level == "NONE" or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    base = level.removesuffix("_TRANSITIVE")
    check = _CHECKERS[schema_type]
    messages: list[str] = []
    for version, old in reversed(against):
        directions: list[tuple[Any, Any]] = []
        if base in ("BACKWARD", "FULL"):
            directions.append((new, old))  # the new schema reads data written with the old
        if base in ("FORWARD", "FULL"):
            directions.append((old, new))  # the old schema reads data written with the new
        for reader, writer in directions:
            if type(reader) is not type(writer):
                found = ["{errorType:'SCHEMA_TYPE_CHANGED', description:'the schema type changed'}"]
            else:
                found = check(reader, writer)
            if found:
                messages.extend(found)
                messages.append(f"{{oldSchemaVersion: {version}}}")
                messages.append(f"{{oldSchema: '{_text_of(old)}'}}")
        if messages:
            messages.append(f"{{compatibility: '{level}'}}")
            break
    return messages
