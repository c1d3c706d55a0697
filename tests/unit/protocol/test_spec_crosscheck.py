"""Every Rill declaration agrees with Kafka's official JSON message specs, version by version.

The specs themselves are not part of the repository: ``spec_facts.json`` beside this file holds the facts
derived from them (api key, valid and flexible versions, and per field its name, type, versions, nullable and
tagged versions, tag and default), written by ``scripts/derive_spec_facts.py``. Two checks:

- Rill's declarations against the table (always runs): for each version Rill declares, the fields present at
  that version agree on name, type, nullability, tag and default, and the flexible versions agree;
- the table against every copy of the specs found: the one inside kafka-python's package (a test dependency)
  and the directory named by ``RILL_KAFKA_SPECS`` when set. Every version both cover has the same facts, and
  every version a copy gives of a message Rill declares is in the table.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rill.protocol.api import DATA, MESSAGES
from rill.protocol.compiler import default_source
from rill.protocol.schema import Field, Message, VersionRange, in_range

REPO = Path(__file__).resolve().parents[3]
FACTS_FILE = Path(__file__).with_name("spec_facts.json")
FACTS: dict[str, list[dict[str, Any]]] = json.loads(FACTS_FILE.read_text(encoding="utf-8"))


def _derive_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("derive_spec_facts", REPO / "scripts" / "derive_spec_facts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kafka_python_dir() -> Path:
    spec = importlib.util.find_spec("kafka")
    assert spec is not None and spec.origin is not None, "kafka-python (a test dependency) is not installed"
    return Path(spec.origin).parent / "protocol" / "schemas" / "resources"


def _copies() -> list[tuple[str, Path | None]]:
    copies: list[tuple[str, Path | None]] = [("kafka-python", None)]
    named = os.environ.get("RILL_KAFKA_SPECS")
    if named:
        copies.append(("RILL_KAFKA_SPECS", Path(named)))
    return copies


def _range(s: str) -> VersionRange | None:
    return VersionRange.parse(s)


def _versions(facts: dict[str, Any]) -> set[int]:
    valid = _range(facts["validVersions"])
    assert valid is not None
    return set(range(valid.low, valid.high + 1))


def _spec_default(f: dict[str, Any]) -> str | None:
    """The spec's default rendered like ``default_source`` (None when the spec gives none)."""
    if "default" not in f:
        return None
    d = f["default"]
    t = f["type"]
    if d is None or d == "null":
        return "None"
    if t == "bool":
        return "True" if d in (True, "true") else "False"
    if t == "string":
        return repr(str(d))
    if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return repr(int(str(d), 0))
    if t == "float64":
        return repr(float(d))
    return None


def _view_spec(fields: list[dict[str, Any]], v: int) -> list[tuple[Any, ...]]:
    out = []
    for f in fields:
        vr = _range(f["versions"])
        if not in_range(vr, v):
            continue
        nullable = in_range(_range(f["nullableVersions"]), v) if "nullableVersions" in f else False
        tagged = in_range(_range(f["taggedVersions"]), v) if "taggedVersions" in f else False
        out.append(
            (
                f["name"],
                f["type"],
                nullable,
                f.get("tag") if tagged else None,
                _spec_default(f),
                tuple(_view_spec(f.get("fields", []), v)),
            )
        )
    return out


def _view_rill(fields: tuple[Field, ...], v: int, spec_fields: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    by_name = {f["name"]: f for f in spec_fields}
    out = []
    for f in fields:
        if v not in f.versions:
            continue
        sf = by_name.get(f.name, {})
        # a default is compared for scalars, arrays and nullable structs (a spec's "null" default), never for the
        # values of other structs
        compared = f.is_array or not f.is_struct or sf.get("default", "") in (None, "null")
        default = default_source(f) if "default" in sf and compared else None
        if default == "_ZU":
            default = None
        out.append(
            (
                f.name,
                f.type,
                f.is_nullable(v),
                f.tag if f.is_tagged(v) else None,
                default,
                tuple(_view_rill(f.fields, v, sf.get("fields", []))),
            )
        )
    return out


ALL: list[Message] = [m for s in MESSAGES.values() for m in (s.request, s.response)] + list(DATA.values())


@pytest.mark.parametrize("msg", ALL, ids=lambda m: m.name)
def test_declaration_matches_spec_facts(msg: Message) -> None:
    assert msg.name in FACTS, f"{msg.name} is not in {FACTS_FILE.name}: re-derive it (scripts/derive_spec_facts.py)"
    covered: set[int] = set()
    for i, facts in enumerate(FACTS[msg.name]):
        if msg.api_key is not None:
            assert facts["apiKey"] == msg.api_key
        flexible = _range(facts["flexibleVersions"])
        for v in sorted(_versions(facts) & set(range(msg.versions.low, msg.versions.high + 1))):
            covered.add(v)
            assert msg.is_flexible(v) == in_range(flexible, v), f"{msg.name} v{v} flexible (variant {i})"
            want = _view_spec(facts["fields"], v)
            got = _view_rill(msg.fields, v, facts["fields"])
            assert got == want, f"{msg.name} v{v} (variant {i})"
    declared = set(range(msg.versions.low, msg.versions.high + 1))
    assert covered == declared, f"{msg.name}: versions {sorted(declared - covered)} match no spec"


@pytest.mark.parametrize(("label", "named"), _copies(), ids=[label for label, _ in _copies()])
def test_spec_facts_match_a_copy_of_the_specs(label: str, named: Path | None) -> None:
    """The committed table says what the specs say, for every version a copy and the table both cover."""
    directory = _kafka_python_dir() if named is None else named
    assert directory.is_dir(), f"{label}: {directory} is not a directory"
    derive = _derive_module()
    copy = derive.derive([directory], sorted(FACTS))
    assert copy, f"{label}: no spec of a message Rill declares under {directory}"
    declared = {m.name: set(range(m.versions.low, m.versions.high + 1)) for m in ALL}
    for name, (facts,) in copy.items():
        table_versions: set[int] = set()
        for i, known in enumerate(FACTS[name]):
            table_versions |= _versions(known)
            assert known.get("apiKey") == facts.get("apiKey"), f"{label} {name} api key"
            for v in sorted(_versions(known) & _versions(facts)):
                where = f"{label} {name} v{v} (table variant {i})"
                assert in_range(_range(known["flexibleVersions"]), v) == in_range(
                    _range(facts["flexibleVersions"]), v
                ), f"{where}: flexible"
                assert _view_spec(known["fields"], v) == _view_spec(facts["fields"], v), where
        missing = (_versions(facts) & declared[name]) - table_versions
        assert not missing, f"{label} {name}: versions {sorted(missing)} are not in the table; re-derive it"


def test_required_apis_are_declared() -> None:
    required = [18, 3, 0, 1, 2, 23, 19, 20, 37, 32, 33, 44, 21, 60, 35, 22, 10, 11, 14, 12, 13, 8, 9, 16, 15,
                42, 47, 17]
    assert set(required) <= set(MESSAGES)
    for key in required:
        variants = FACTS[MESSAGES[key].request.name]
        # every version Kafka 4.x declares is declared by Rill
        newest = max(variants, key=lambda f: max(_versions(f)))
        assert MESSAGES[key].min_version <= min(_versions(newest))
        assert MESSAGES[key].max_version >= max(_versions(newest))


def test_snake_case_names_are_unique_per_struct() -> None:
    def walk(fields: tuple[Field, ...]) -> None:
        keys = [f.key for f in fields]
        assert len(keys) == len(set(keys)), keys
        assert all(re.fullmatch(r"[a-z][a-z0-9_]*", k) for k in keys)
        for f in fields:
            walk(f.fields)

    for m in ALL:
        walk(m.fields)
