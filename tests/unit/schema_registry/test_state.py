"""The registry's state is a function of the latest value of each key, so compaction cannot change it."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from rill.registry.schemas import SchemaText
from rill.registry.store import (
    Record,
    RegistryState,
    Version,
    config_record,
    mode_record,
    schema_record,
    schema_tombstone,
)


def text(n: int) -> SchemaText:
    return SchemaText("AVRO", json.dumps({"type": "record", "name": f"R{n}", "fields": []}, separators=(",", ":")))


def snapshot(state: RegistryState) -> object:
    return (
        {s: dict(v) for s, v in state.subjects.items()},
        dict(state.schemas),
        dict(state.ids),
        dict(state.configs),
        dict(state.modes),
    )


def compacted(records: list[Record]) -> list[tuple[int, Record]]:
    """What the log cleaner may leave: the last record of each key, in offset order."""
    last: dict[bytes, int] = {}
    for offset, (key, _value) in enumerate(records):
        last[key] = offset
    return [(o, records[o]) for o in sorted(last.values())]


ops = st.lists(
    st.tuples(
        st.sampled_from(["schema", "delete", "tombstone", "config", "mode"]),
        st.sampled_from(["a", "b", "c"]),
        st.integers(1, 3),
        st.integers(1, 4),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_compaction_leaves_the_same_state(steps: list[tuple[str, str, int, int]]) -> None:
    records: list[Record] = []
    for op, subject, version, n in steps:
        if op == "schema":
            records.append(schema_record(Version(subject, version, n, text(n), False)))
        elif op == "delete":
            records.append(schema_record(Version(subject, version, n, text(n), True)))
        elif op == "tombstone":
            records.append(schema_tombstone(subject, version))
        elif op == "config":
            records.append(config_record(subject if n % 2 else None, None if n == 4 else "FULL"))
        else:
            records.append(mode_record(subject, None if n == 4 else "READONLY"))
    full, kept = RegistryState(), RegistryState()
    for offset, (key, value) in enumerate(records):
        full.apply(offset, key, value)
    for offset, (key, value) in compacted(records):
        kept.apply(offset, key, value)
    assert snapshot(full) == snapshot(kept)


def test_unreadable_records_are_skipped() -> None:
    state = RegistryState()
    state.apply(0, b"not json", b"{}")
    state.apply(1, b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}', b"{broken")
    state.apply(2, b'{"keytype":"NOOP","magic":0}', None)
    state.apply(3, None, b"x")
    state.apply(4, *schema_record(Version("s", 1, 7, text(1), False)))
    assert state.next_offset == 5
    assert [v.schema_id for v in state.versions("s")] == [7]
