"""Schema parsing and compatibility: Avro through the ``avro`` library (the Apache Avro project's own
reader/writer compatibility checker), nothing by hand.

A schema's identity is its type, its text as compact JSON (whitespace and key spacing do not matter)
and its references: two registrations of the same identity share one global id.
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

from rill.registry.errors import INVALID_COMPATIBILITY_LEVEL, RegistryError, invalid_schema

AVRO = "AVRO"
SCHEMA_TYPES = (AVRO,)

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
    try:
        parsed = json.loads(text)
    except ValueError as e:
        raise invalid_schema(f"not JSON: {e}") from None
    compact = json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)
    return SchemaText(schema_type.upper(), compact, tuple(refs))


def parse_avro(schema: SchemaText, referenced: Sequence[SchemaText] = ()) -> avro.schema.Schema:
    """Parse ``schema`` after the schemas it references (whose named types it may use); 42201 if invalid."""
    names = avro.name.Names(validate_names=True)
    try:
        for ref in referenced:
            avro.schema.make_avsc_object(json.loads(ref.text), names)
        return avro.schema.make_avsc_object(json.loads(schema.text), names)
    except (avro.errors.AvroException, ValueError, TypeError, KeyError, AttributeError) as e:
        raise invalid_schema(str(e) or type(e).__name__) from None


def _describe(result: Any) -> list[str]:
    kinds = ", ".join(sorted(str(i.value).upper() for i in result.incompatibilities)) or "INCOMPATIBLE"
    where = ", ".join(sorted(result.locations))
    what = ", ".join(sorted(str(m) for m in result.messages))
    return [f"{{errorType:'{kinds}', description:'at {where}: {what}'}}"]


def incompatibilities(
    new: avro.schema.Schema, previous: Sequence[tuple[int, avro.schema.Schema]], level: str
) -> list[str]:
    """Messages describing why ``new`` breaks ``level`` against ``previous`` (oldest first, each
    ``(version, schema)``); empty when compatible. Non-transitive levels look at the last one only."""
    if level == "NONE" or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    base = level.removesuffix("_TRANSITIVE")
    checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]
    messages: list[str] = []
    for version, old in reversed(against):
        directions: list[tuple[avro.schema.Schema, avro.schema.Schema]] = []
        if base in ("BACKWARD", "FULL"):
            directions.append((new, old))  # the new schema reads data written with the old
        if base in ("FORWARD", "FULL"):
            directions.append((old, new))  # the old schema reads data written with the new
        for reader, writer in directions:
            result = checker.get_compatibility(reader, writer)
            if result.compatibility is not SchemaCompatibilityType.compatible:
                messages.extend(_describe(result))
                messages.append(f"{{oldSchemaVersion: {version}}}")
                messages.append(f"{{oldSchema: '{old}'}}")
        if messages:
            messages.append(f"{{compatibility: '{level}'}}")
            break
    return messages
