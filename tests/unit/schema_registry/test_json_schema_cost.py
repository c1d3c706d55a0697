"""What one registered JSON schema can make the registry compute: comparing two recursive schemas (``$ref``
back to the root under several properties, or ``anyOf`` nested deep) must take time bounded by the schemas'
size, not exponential in the nesting, and still tell a compatible change from an incompatible one.

Each comparison runs in a child process with a time bound, so a comparison that does not end fails the test
instead of holding the suite."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

_RUN = """
import json, sys
from rill.registry import json_schema
reader, writer = json.loads(sys.stdin.read())
print(json.dumps(json_schema.incompatibilities(json_schema.parse(json.dumps(reader), []),
                                               json_schema.parse(json.dumps(writer), []))))
"""


def _problems(reader: Any, writer: Any) -> list[str]:
    done = subprocess.run([sys.executable, "-c", _RUN], input=json.dumps([reader, writer]), capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    result: list[str] = json.loads(done.stdout)
    return result


def _tree(title: str, leaf: dict[str, Any]) -> dict[str, Any]:
    """An object whose four properties each refer back to the root: a tree of unbounded depth."""
    props: dict[str, Any] = {name: {"$ref": "#"} for name in "abcd"}
    props["leaf"] = leaf
    return {"title": title, "type": "object", "properties": props}


def test_recursive_schemas_compare_in_bounded_time() -> None:
    old = _tree("v1", {"type": "integer"})
    assert _problems(_tree("v2", {"type": "number"}), old) == []  # widened: compatible
    narrowed = _problems(_tree("v2", {"type": "string"}), old)
    assert any("TYPE_NARROWED" in p for p in narrowed), narrowed


def _lattice(levels: int, leaf: str) -> dict[str, Any]:
    """Definitions where each level refers to the one below twice: a few lines of text, 2**levels paths."""
    defs: dict[str, Any] = {"d0": {"type": leaf}}
    for n in range(1, levels + 1):
        below = {"$ref": f"#/definitions/d{n - 1}"}
        defs[f"d{n}"] = {"anyOf": [below, {"type": "object", "properties": {"x": below, "y": below}}]}
    return {"definitions": defs, "$ref": f"#/definitions/d{levels}"}


def test_schemas_whose_refs_form_a_graph_compare_in_bounded_time() -> None:
    problems = _problems(_lattice(40, "number"), _lattice(40, "integer"))
    assert isinstance(problems, list)


def test_a_change_behind_a_local_ref_is_seen() -> None:
    def schema(leaf: str) -> dict[str, Any]:
        return {"type": "object", "properties": {"a": {"$ref": "#/definitions/A"}},
                "definitions": {"A": {"type": leaf}}}  # fmt: skip

    assert any("TYPE_NARROWED" in p for p in _problems(schema("string"), schema("integer")))
    assert _problems(schema("number"), schema("integer")) == []
