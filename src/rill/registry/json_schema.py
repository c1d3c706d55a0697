"""JSON Schema (``schemaType: JSON``): parsing with the ``jsonschema`` library, references as ``$ref`` to
other subjects' schemas, and compatibility after Confluent's rules for JSON Schema.

A schema is checked against its draft's meta-schema (``$schema``; draft 7 when absent, as Confluent assumes).
A reference's ``name`` is the URI that ``$ref`` uses for it (``"$ref": "customer.json"``); the referenced
schemas are registered in a ``referencing`` registry under those names, so validation resolves them.

Compatibility compares a reader schema with a writer schema: the reader must accept every document the
writer accepts. BACKWARD reads the old schema's data with the new one, FORWARD the other way, FULL both. The
rules are Confluent's, for what JSON Schema can express in the keywords below: a narrowed ``type``; an
``enum`` or ``const`` that lost values; a property removed from a closed content model
(``additionalProperties: false``) or added to an open one with a schema that does not accept everything; a
property's schema made stricter; a ``required`` property added; ``additionalProperties`` closed; tighter
numeric, string and array bounds; ``items`` made stricter; a removed ``oneOf``/``anyOf`` branch. What it does
not look into (``if``/``then``, ``patternProperties``, ``not``, ``dependentSchemas``) must be equal in both
schemas, else it counts as a change (Confluent treats unknown differences the same way).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import jsonschema
import jsonschema.validators
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from rill.registry.errors import invalid_schema

_NUMERIC_WIDER = {"integer": {"number"}}  # a reader of "number" accepts what a writer of "integer" wrote
_CHECKED = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems", "pattern",
    "oneOf", "anyOf", "allOf", "$ref", "multipleOf", "minProperties", "maxProperties", "uniqueItems", "format",
}  # fmt: skip
_DESCRIPTIVE = {"title", "description", "$schema", "$id", "$comment", "default", "examples", "definitions",
                "$defs", "readOnly", "writeOnly", "deprecated"}  # fmt: skip


_ROOT_URI = "urn:rill:registry:schema"
"""The base URI of a schema without an ``$id``, so that its local ``$ref`` (``#/definitions/...``) resolve."""
MAX_COMPARE_STEPS = 20_000
"""The most schema pairs one compatibility check looks at: a schema whose ``$ref`` form a graph can describe
exponentially many paths in a few lines, and a comparison past this many counts as a change (fails closed)."""
MAX_COMPARE_DEPTH = 64


class ParsedJsonSchema:
    """A validated JSON schema with the referenced schemas it may ``$ref``."""

    def __init__(self, document: Any, registry: Registry[Any]) -> None:
        self.document = document
        self.registry = registry
        self.base_uri = _base(document) or _ROOT_URI

    def validator(self) -> Any:
        cls = jsonschema.validators.validator_for(self.document, default=jsonschema.Draft7Validator)
        return cls(self.document, registry=self.registry)

    def root(self) -> _Side:
        return _Side(self.registry.resolver(base_uri=self.base_uri))


class _Side:
    """Where a node of one schema sits: the resolver its ``$ref`` are resolved with (a ``$ref`` inside a
    referenced schema is relative to that schema)."""

    __slots__ = ("resolver",)

    def __init__(self, resolver: Any) -> None:
        self.resolver = resolver

    def resolve(self, node: Any) -> tuple[Any, _Side]:
        """``node`` with its ``$ref`` followed (a chain of at most 32; an unresolvable one is left as it is)."""
        side = self
        seen = 0
        while isinstance(node, dict) and isinstance(node.get("$ref"), str) and seen < 32:
            try:
                resolved = side.resolver.lookup(node["$ref"])
            except Exception:
                return node, side
            node, side = resolved.contents, _Side(resolved.resolver)
            seen += 1
        return node, side


class _Walk:
    """One compatibility check's state: the pairs being compared up the stack (met again through a ``$ref``
    cycle, a pair counts as compatible: the rest of the walk decides), and the steps taken."""

    def __init__(self) -> None:
        self.active: set[tuple[int, int]] = set()
        self.steps = 0
        self.exhausted = False


def _base(document: Any) -> str:
    return str(document.get("$id", "")) if isinstance(document, dict) else ""


def canonical(text: str) -> str:
    """The schema as compact JSON (its identity); 42201 if it is not JSON."""
    try:
        return json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
    except (ValueError, RecursionError) as e:  # RecursionError: nested past the parser's depth
        raise invalid_schema(f"not JSON: {e}") from None


def parse(text: str, referenced: Sequence[tuple[str, str]]) -> ParsedJsonSchema:
    """Parse and check a JSON schema; ``referenced`` is (reference name, schema text) of each reference."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as e:  # RecursionError: nested past the parser's depth
        raise invalid_schema(f"not JSON: {e}") from None
    if not isinstance(document, dict | bool):
        raise invalid_schema("a JSON schema is an object or a boolean")
    resources = []
    for name, ref_text in referenced:
        try:
            ref_doc = json.loads(ref_text)
        except (ValueError, RecursionError) as e:  # RecursionError: nested past the parser's depth
            raise invalid_schema(f"reference {name!r} is not JSON: {e}") from None
        resources.append((name, Resource.from_contents(ref_doc, default_specification=DRAFT7)))
        if isinstance(ref_doc, dict) and isinstance(ref_doc.get("$id"), str):
            resources.append((ref_doc["$id"], Resource.from_contents(ref_doc, default_specification=DRAFT7)))
    if isinstance(document, dict):
        resources.append((_base(document) or _ROOT_URI, Resource.from_contents(document, default_specification=DRAFT7)))
    registry: Registry[Any] = Registry().with_resources(resources)
    parsed = ParsedJsonSchema(document, registry)
    cls = jsonschema.validators.validator_for(document, default=jsonschema.Draft7Validator)
    try:
        cls.check_schema(document)
    except jsonschema.SchemaError as e:
        raise invalid_schema(f"not a valid JSON schema: {e.message}") from None
    except RecursionError:
        raise invalid_schema("not a valid JSON schema: nested too deep") from None
    return parsed


def incompatibilities(reader: ParsedJsonSchema, writer: ParsedJsonSchema) -> list[str]:
    """Why ``reader`` does not accept every document ``writer`` accepts (empty: it does)."""
    out: list[str] = []
    walk = _Walk()
    _compare(reader.root(), reader.document, writer.root(), writer.document, "#", out, 0, walk)
    if walk.exhausted:
        out.append(
            "{errorType:'SCHEMA_TOO_COMPLEX', description:'at #: the schemas have more than "
            f"{MAX_COMPARE_STEPS} pairs of subschemas to compare'}}"
        )
    return out


def _types(node: Any) -> set[str] | None:
    t = node.get("type") if isinstance(node, dict) else None
    if t is None:
        return None
    return {t} if isinstance(t, str) else {str(x) for x in t}


def _open(node: dict[str, Any]) -> bool:
    extra = node.get("additionalProperties", True)
    return extra is not False


def _accepts_all(node: Any) -> bool:
    return node is True or node == {}


def _compare(rs: _Side, r: Any, ws: _Side, w: Any, at: str, out: list[str], depth: int, walk: _Walk) -> None:
    walk.steps += 1
    if walk.steps > MAX_COMPARE_STEPS:
        walk.exhausted = True
        return
    if depth > MAX_COMPARE_DEPTH:
        out.append(f"{{errorType:'SCHEMA_TOO_COMPLEX', description:'at {at}: nested too deep to compare'}}")
        return
    (r, rs), (w, ws) = rs.resolve(r), ws.resolve(w)
    if r is w or _accepts_all(r) or w is False:
        return
    pair = (id(r), id(w))
    if pair in walk.active:
        return
    walk.active.add(pair)
    try:
        _compare_nodes(rs, r, ws, w, at, out, depth, walk)
    finally:
        walk.active.discard(pair)


def _compare_nodes(rs: _Side, r: Any, ws: _Side, w: Any, at: str, out: list[str], depth: int, walk: _Walk) -> None:
    if r is False or not isinstance(r, dict) or not isinstance(w, dict):
        if r != w:
            out.append(f"{{errorType:'TYPE_CHANGED', description:'at {at}: the schema changed'}}")
        return
    rt, wt = _types(r), _types(w)
    if rt is not None:
        writer_types = wt if wt is not None else {"any"}
        for t in writer_types:
            if t not in rt and not (_NUMERIC_WIDER.get(t, set()) & rt):
                out.append(f"{{errorType:'TYPE_NARROWED', description:'at {at}: type {t} no longer accepted'}}")
    for key in ("enum",):
        if key in r:
            lost = [v for v in w.get(key, [None]) if v not in r[key]] if key in w else ["(any value)"]
            if lost:
                out.append(f"{{errorType:'ENUM_ARRAY_NARROWED', description:'at {at}: {lost} no longer accepted'}}")
    if "const" in r and w.get("const", object()) != r["const"]:
        out.append(f"{{errorType:'CONST_CHANGED', description:'at {at}: const changed'}}")
    _bounds(r, w, at, out)
    _properties(rs, r, ws, w, at, out, depth, walk)
    if "items" in r and isinstance(r["items"], dict | bool):
        _compare(rs, r["items"], ws, w.get("items", True) if isinstance(w.get("items", True), dict | bool) else True,
                 f"{at}/items", out, depth + 1, walk)  # fmt: skip
    for key in ("oneOf", "anyOf"):
        if key in r:
            branches = w.get(key, [w])
            for i, branch in enumerate(branches):
                if not any(not _sub(rs, rb, ws, branch, depth, walk) for rb in r[key]):
                    out.append(f"{{errorType:'COMBINED_TYPE_SUBSCHEMAS_CHANGED', description:'at {at}/{key}: "
                               f"branch {i} of the old schema matches no branch'}}")  # fmt: skip
    if "allOf" in r:
        for i, rb in enumerate(r["allOf"]):
            _compare(rs, rb, ws, w, f"{at}/allOf/{i}", out, depth + 1, walk)
    for key in set(r) - _CHECKED - _DESCRIPTIVE:
        if r.get(key) != w.get(key):
            out.append(f"{{errorType:'SCHEMA_CHANGED', description:'at {at}: {key} changed'}}")


def _sub(rs: _Side, r: Any, ws: _Side, w: Any, depth: int, walk: _Walk) -> list[str]:
    found: list[str] = []
    _compare(rs, r, ws, w, "#", found, depth + 1, walk)
    return found


_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")


def _stricter(key: str, reader: Any, writer: Any) -> bool:
    try:
        return bool(reader > writer) if key in _LOWER_BOUNDS else bool(reader < writer)
    except TypeError:
        return bool(reader != writer)


def _bounds(r: dict[str, Any], w: dict[str, Any], at: str, out: list[str]) -> None:
    for key in _LOWER_BOUNDS + _UPPER_BOUNDS:
        if key in r and (key not in w or _stricter(key, r[key], w[key])):
            out.append(f"{{errorType:'{key.upper()}_CHANGED', description:'at {at}: {key} is stricter'}}")
    for key in ("pattern", "multipleOf", "format"):
        if key in r and r[key] != w.get(key):
            out.append(f"{{errorType:'{key.upper()}_CHANGED', description:'at {at}: {key} changed'}}")
    if r.get("uniqueItems") and not w.get("uniqueItems"):
        out.append(f"{{errorType:'UNIQUE_ITEMS_ADDED', description:'at {at}: uniqueItems added'}}")


def _properties(rs: _Side, r: dict[str, Any], ws: _Side, w: dict[str, Any], at: str, out: list[str], depth: int,
                walk: _Walk) -> None:  # fmt: skip
    rp: dict[str, Any] = r.get("properties", {}) if isinstance(r.get("properties"), dict) else {}
    wp: dict[str, Any] = w.get("properties", {}) if isinstance(w.get("properties"), dict) else {}
    for name in sorted(set(r.get("required", [])) - set(w.get("required", []))):
        out.append(f"{{errorType:'REQUIRED_PROPERTY_ADDED', description:'at {at}/properties/{name}: "
                   "a property is now required'}")  # fmt: skip
    if not _open(r) and _open(w):
        out.append(f"{{errorType:'ADDITIONAL_PROPERTIES_REMOVED', description:'at {at}: additionalProperties "
                   "closed'}")  # fmt: skip
    for name in sorted(set(wp) | set(rp)):
        where = f"{at}/properties/{name}"
        if name in rp and name in wp:
            _compare(rs, rp[name], ws, wp[name], where, out, depth + 1, walk)
        elif name in wp:  # the reader dropped it: old documents may carry it
            extra = r.get("additionalProperties", True)
            if extra is False:
                out.append(f"{{errorType:'PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL', description:'at {where}'}}")
            elif isinstance(extra, dict):
                _compare(rs, extra, ws, wp[name], where, out, depth + 1, walk)
        elif _open(w) and not _accepts_all(rp[name]):  # the writer allowed anything under that name
            writer_extra = w.get("additionalProperties", True)
            if writer_extra is True:
                out.append(f"{{errorType:'PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL', description:'at {where}'}}")
            else:
                _compare(rs, rp[name], ws, writer_extra, where, out, depth + 1, walk)
