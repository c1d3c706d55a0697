"""Derive the table of message facts the protocol cross-check compares Rill's declarations with.

Usage: python scripts/derive_spec_facts.py DIR [DIR ...] > tests/unit/protocol/spec_facts.json

Each DIR is a copy of Apache Kafka's JSON message specs (the ``clients/src/main/resources/common/message``
directory, kafka-python's ``kafka/protocol/schemas/resources``, ...); ``*.json`` files are found under it at
any depth. Only facts are kept, for the messages Rill declares: api key, valid and flexible versions, and per
field its name, type, versions, nullable versions, tagged versions, tag and default, with common structs
expanded in place. No description, comment or other text of the specs is kept.

Two releases of Kafka can cover different versions of one message (Kafka 4.0 dropped old versions); each
distinct set of facts is kept as one variant of the message. A version that two variants both cover has one
layout (Kafka never changes a released version), which the test of the table against a copy checks.

The share-group APIs (KIP-932) are served at the versions of Kafka 4.1 and later (ShareFetch v1, ...), which a
Kafka 4.0 copy of the specs does not have: pass a copy of Kafka 4.1's or a later release's specs too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

FIELD_KEYS = ("name", "type", "versions", "nullableVersions", "taggedVersions", "tag", "default")
MESSAGE_KEYS = ("apiKey", "type", "validVersions", "flexibleVersions")


def read_spec(path: Path) -> dict[str, Any]:
    """A spec file parsed as JSON (the files carry ``//`` line comments, which are dropped)."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if not line.strip().startswith("//")]
    loaded: dict[str, Any] = json.loads("\n".join(lines))
    return loaded


def spec_files(dirs: list[Path]) -> dict[str, Path]:
    """Message name -> spec file, the first directory that has one winning."""
    found: dict[str, Path] = {}
    for d in dirs:
        for p in sorted(d.rglob("*.json")):
            found.setdefault(p.stem, p)
    return found


def _fields(fields: list[dict[str, Any]], common: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in fields:
        fact = {k: f[k] for k in FIELD_KEYS if k in f}
        children = f.get("fields")
        base = f["type"][2:] if f["type"].startswith("[]") else f["type"]
        if children is None and base in common:
            children = common[base]
        if children:
            fact["fields"] = _fields(children, common)
        out.append(fact)
    return out


def message_facts(spec: dict[str, Any]) -> dict[str, Any]:
    """The facts of one parsed spec."""
    common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
    facts = {k: spec[k] for k in MESSAGE_KEYS if k in spec}
    facts["fields"] = _fields(spec["fields"], common)
    return facts


def derive(dirs: list[Path], names: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Message name -> its distinct variants of facts, over every directory that has the message."""
    table: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        variants: list[dict[str, Any]] = []
        for d in dirs:
            path = spec_files([d]).get(name)
            if path is None:
                continue
            facts = message_facts(read_spec(path))
            if facts not in variants:
                variants.append(facts)
        if variants:
            table[name] = variants
    return table


def rill_message_names() -> list[str]:
    from rill.protocol.api import DATA, MESSAGES

    names = [m.name for s in MESSAGES.values() for m in (s.request, s.response)] + [m.name for m in DATA.values()]
    return sorted(names)


def render(table: dict[str, list[dict[str, Any]]]) -> str:
    """The table as JSON: one line per message variant, so a re-derivation diffs by message."""
    lines = ["{"]
    items = sorted(table.items())
    for i, (name, variants) in enumerate(items):
        inner = ",\n".join("  " + json.dumps(v, separators=(",", ":")) for v in variants)
        lines.append(f"{json.dumps(name)}: [\n{inner}\n]" + ("," if i < len(items) - 1 else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if not argv or any(a.startswith("-") for a in argv):
        print("usage: derive_spec_facts.py DIR [DIR ...]  (writes the table to stdout)", file=sys.stderr)
        return 2
    dirs = [Path(a) for a in argv]
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:
        print(f"derive_spec_facts.py: no such directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    names = rill_message_names()
    table = derive(dirs, names)
    absent = [n for n in names if n not in table]
    if absent:
        print(f"derive_spec_facts.py: no spec for {', '.join(absent)}", file=sys.stderr)
        return 1
    sys.stdout.write(render(table))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
