"""Every Rill declaration agrees with Kafka's official JSON message specs, version by version.

Two copies of the specs are read (never imported into the codec): the one shipped inside kafka-python's
package (always present), and ``../shared/kafka-protocol/`` next to the repository when it exists.
For each version Rill declares and a spec covers, the fields present at that version must agree on name,
type, nullability, tag and default, and the flexible versions must agree.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from rill.protocol.api import DATA, MESSAGES
from rill.protocol.compiler import default_source
from rill.protocol.schema import Field, Message, VersionRange, in_range

REPO = Path(__file__).resolve().parents[3]


def _kafka_python_dir() -> Path:
    spec = importlib.util.find_spec("kafka")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "protocol" / "schemas" / "resources"


SOURCES: list[tuple[str, list[Path]]] = [("kafka-python", [_kafka_python_dir()])]
_shared = REPO.parent / "shared" / "kafka-protocol"
if (_shared / "messages").is_dir():
    SOURCES.append(("shared", [_shared / "messages", _shared / "internal-records"]))


def _load(dirs: list[Path], name: str) -> dict[str, Any] | None:
    for d in dirs:
        p = d / f"{name}.json"
        if p.exists():
            text = "\n".join(line for line in p.read_text().splitlines() if not line.strip().startswith("//"))
            loaded: dict[str, Any] = json.loads(text)
            return loaded
    return None


def _range(s: str) -> VersionRange | None:
    return VersionRange.parse(s)


def _expand(fields: list[dict[str, Any]], common: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for f in fields:
        f = dict(f)
        base = f["type"][2:] if f["type"].startswith("[]") else f["type"]
        if "fields" not in f and base in common:
            f["fields"] = common[base]
        if "fields" in f:
            f["fields"] = _expand(f["fields"], common)
        out.append(f)
    return out


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
        # a default is compared for scalars and for arrays (a spec's "null" default), never for structs
        default = default_source(f) if "default" in sf and (f.is_array or not f.is_struct) else None
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
def test_declaration_matches_official_specs(msg: Message) -> None:
    covered: set[int] = set()
    for source, dirs in SOURCES:
        spec = _load(dirs, msg.name)
        if spec is None:
            continue
        if msg.api_key is not None:
            assert spec["apiKey"] == msg.api_key
        valid = _range(spec["validVersions"])
        assert valid is not None
        common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
        fields = _expand(spec["fields"], common)
        flexible = _range(spec["flexibleVersions"])
        for v in range(max(valid.low, msg.versions.low), min(valid.high, msg.versions.high) + 1):
            covered.add(v)
            assert msg.is_flexible(v) == in_range(flexible, v), f"{source} {msg.name} v{v} flexible"
            want = _view_spec(fields, v)
            got = _view_rill(msg.fields, v, fields)
            assert got == want, f"{source} {msg.name} v{v}"
    declared = set(range(msg.versions.low, msg.versions.high + 1))
    assert covered == declared, f"{msg.name}: versions {sorted(declared - covered)} match no spec"


def test_required_apis_are_declared() -> None:
    required = [18, 3, 0, 1, 2, 23, 19, 20, 37, 32, 33, 44, 21, 60, 35, 22, 10, 11, 14, 12, 13, 8, 9, 16, 15,
                42, 47, 17]
    assert set(required) <= set(MESSAGES)
    kp = SOURCES[0][1]
    for key in required:
        spec = _load(kp, MESSAGES[key].request.name)
        assert spec is not None
        valid = _range(spec["validVersions"])
        assert valid is not None
        # every version Kafka 4.x declares is declared by Rill
        assert MESSAGES[key].min_version <= valid.low and MESSAGES[key].max_version >= valid.high


def test_snake_case_names_are_unique_per_struct() -> None:
    def walk(fields: tuple[Field, ...]) -> None:
        keys = [f.key for f in fields]
        assert len(keys) == len(set(keys)), keys
        assert all(re.fullmatch(r"[a-z][a-z0-9_]*", k) for k in keys)
        for f in fields:
            walk(f.fields)

    for m in ALL:
        walk(m.fields)
