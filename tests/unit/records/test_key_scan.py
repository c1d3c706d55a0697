"""The log cleaner's key reads: the compiled ``rill.records._key_scan`` and its pure-Python twin
(``rill.records.key_scan``) agree on every input, well formed or not: the key digests, the key table, the
keys a batch puts in the map and the records a cleaning keeps."""

from __future__ import annotations

import hashlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rill.records import _key_scan, key_scan
from rill.records.record import encode_record

pytestmark = pytest.mark.timeout(120)

SHORT_KEYS = [b"", b"a", b"b", b"key-1", b"fifteen-bytes!!"]
LONG_KEYS = [b"sixteen-bytes!!!", b"a key of more than sixteen bytes", bytes(range(200))]


def outcome(fn, *args):  # type: ignore[no-untyped-def]
    """What a call returns, or the type and message of the error it raises."""
    try:
        return fn(*args)
    except (ValueError, OverflowError) as e:
        return (type(e).__name__, str(e))


def test_the_extension_is_built_and_used() -> None:
    # CI installs with a compiler: the cleaner must run the compiled key reads.
    assert key_scan.ACCELERATED
    assert key_scan.map_keys is _key_scan.map_keys and key_scan.KeyTable is _key_scan.KeyTable


@given(st.binary(max_size=300))
def test_the_digest_is_a_short_key_itself_or_its_md5(key: bytes) -> None:
    expected = key if len(key) < 16 else hashlib.md5(key).digest()
    assert _key_scan.key_digest(key) == key_scan.py_key_digest(key) == expected


def test_md5_over_every_length_around_its_blocks() -> None:
    rng = random.Random(7)
    for n in [*range(16, 200), 1000, 4096, 65537]:
        key = rng.randbytes(n)
        assert _key_scan.key_digest(memoryview(key)) == hashlib.md5(key).digest()


record_st = st.tuples(
    st.integers(-(2**40), 2**40),  # timestamp delta
    st.one_of(st.none(), st.sampled_from(SHORT_KEYS + LONG_KEYS)),  # key
    st.one_of(st.none(), st.binary(max_size=40)),  # value (None: a tombstone)
    st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=8))), max_size=2),
)


def section(records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
            deltas: list[int]) -> bytes:  # fmt: skip
    out = bytearray()
    for (ts, key, value, headers), delta in zip(records, deltas, strict=True):
        encode_record(out, delta, ts, key, value, headers)
    return bytes(out)


def tables(slots: int, prefill: list[tuple[bytes, int]]) -> tuple[key_scan.Table, key_scan.Table]:
    c, py = _key_scan.KeyTable(slots), key_scan.PyKeyTable(slots)
    for key, offset in prefill:
        digest = key_scan.py_key_digest(key)
        assert outcome(c.put, digest, offset) == outcome(py.put, digest, offset)  # OverflowError once full
    return c, py


def same_tables(c: key_scan.Table, py: key_scan.Table) -> None:
    assert len(c) == len(py)
    for key in SHORT_KEYS + LONG_KEYS:
        d = key_scan.py_key_digest(key)
        assert c.get(d) == py.get(d)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(record_st, max_size=12),
    st.data(),
    st.integers(1, 10),
    st.lists(st.tuples(st.sampled_from(SHORT_KEYS + LONG_KEYS), st.integers(0, 200)), max_size=6),
    st.integers(0, 150),
    st.integers(0, 150),
    st.booleans(),
)
def test_map_keys_and_kept_records_agree_with_their_twins(
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    data: st.DataObject,
    slots: int,
    prefill: list[tuple[bytes, int]],
    base: int,
    first_dirty: int,
    retain_deletes: bool,
) -> None:
    deltas = data.draw(st.lists(st.integers(-3, 15), min_size=len(records), max_size=len(records)))
    body = section(records, deltas)
    count = data.draw(st.integers(0, len(records) + 1))
    c, py = tables(slots, prefill)
    put = outcome(_key_scan.map_keys, c, body, count, base, first_dirty)
    assert put == outcome(key_scan.py_map_keys, py, body, count, base, first_dirty)
    same_tables(c, py)
    map_end = data.draw(st.integers(0, 200))
    kept = outcome(_key_scan.kept_records, c, body, count, base, map_end, retain_deletes)
    assert kept == outcome(key_scan.py_kept_records, py, body, count, base, map_end, retain_deletes)
    if count <= len(records) and isinstance(put, int):
        # what the map then holds: each key's last offset at or after first_dirty (when it fit)
        expected: dict[bytes, int] = {}
        for (_, key, _, _), delta in zip(records[:count], deltas, strict=False):
            if key is not None and base + delta >= first_dirty:
                expected[key] = base + delta
        for key, offset in expected.items():
            if put >= 0:
                assert c.get(key_scan.py_key_digest(key)) == offset
        # the spans hold exactly the kept records, in order
        assert isinstance(kept, tuple)
        n, spans, _, _ = kept
        assert len(spans) % 2 == 0 and spans == sorted(spans) and n <= count


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80), st.integers(0, 12), st.integers(0, 100), st.booleans())
def test_malformed_records_give_the_same_error(junk: bytes, count: int, base: int, retain: bool) -> None:
    c, py = tables(4, [])
    put = outcome(_key_scan.map_keys, c, junk, count, base, 0)
    assert put == outcome(key_scan.py_map_keys, py, junk, count, base, 0)
    same_tables(c, py)
    assert outcome(_key_scan.kept_records, c, junk, count, base, 50, retain) == outcome(
        key_scan.py_kept_records, py, junk, count, base, 50, retain
    )


@settings(max_examples=100, deadline=None)
@given(st.lists(record_st, min_size=1, max_size=10), st.binary(min_size=1, max_size=6))
def test_a_cut_or_corrupted_section_gives_the_same_answer(
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]], junk: bytes
) -> None:
    body = section(records, list(range(len(records))))
    for variant in (body[: len(body) // 2], body[:-1], junk + body, body[:3] + junk + body[3:]):
        c, py = tables(100, [])
        assert outcome(_key_scan.map_keys, c, variant, len(records), 0, 0) == outcome(
            key_scan.py_map_keys, py, variant, len(records), 0, 0
        )
        same_tables(c, py)


def test_keys_that_do_not_fit_leave_the_table_unchanged() -> None:
    body = section([(0, b"a", b"1", []), (0, b"b", b"2", []), (0, b"a", b"3", [])], [0, 1, 2])
    for table in (_key_scan.KeyTable(1), key_scan.PyKeyTable(1)):
        fn = key_scan.py_map_keys if isinstance(table, key_scan.PyKeyTable) else _key_scan.map_keys
        assert fn(table, body, 3, 10, 0) == -1 and len(table) == 0
        assert fn(table, body, 3, 10, 12) == 1 and table.get(b"a") == 12  # only the last record is dirty
    two = (_key_scan.KeyTable(2), key_scan.PyKeyTable(2))
    for table in two:  # a key repeated within the batch counts once
        fn = key_scan.py_map_keys if isinstance(table, key_scan.PyKeyTable) else _key_scan.map_keys
        table.put(b"a", 1)
        assert fn(table, body, 3, 10, 0) == 3 and len(table) == 2 and table.get(b"a") == 12


def test_the_compiled_table_grows_and_gives_its_memory_back() -> None:
    c, py = _key_scan.KeyTable(50_000), key_scan.PyKeyTable(50_000)
    rng = random.Random(3)
    keys = [rng.randbytes(rng.randrange(0, 40)) for _ in range(30_000)]
    for i, key in enumerate(keys):
        for t in (c, py):
            t.put(key_scan.py_key_digest(key), i)
    assert len(c) == len(py)
    assert all(c.get(key_scan.py_key_digest(k)) == py.get(key_scan.py_key_digest(k)) for k in keys)
    assert c.get(b"never put") == py.get(b"never put") == -1
    c.clear()
    assert len(c) == 0 and c.get(key_scan.py_key_digest(keys[0])) == -1
    c.put(b"x", 5)
    assert c.get(b"x") == 5


def test_table_arguments_are_checked_alike() -> None:
    for t in (_key_scan.KeyTable(1), key_scan.PyKeyTable(1)):
        assert outcome(t.put, b"x" * 17, 1) == ("ValueError", "a key digest has at most 16 bytes")
        assert outcome(t.get, b"x" * 17) == ("ValueError", "a key digest has at most 16 bytes")
        t.put(b"x", 1)
        assert outcome(t.put, b"y", 2) == ("OverflowError", "the offset map is full")
        t.put(b"x", 2)
        assert t.get(b"x") == 2 and t.slots == 1
        assert outcome(t.put, b"x", -1) == ("ValueError", "an offset is at least 0")
    for cls in (_key_scan.KeyTable, key_scan.PyKeyTable):
        assert outcome(cls, 0) == ("ValueError", "an offset map needs at least one slot")
