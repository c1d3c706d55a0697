"""The log cleaner's reads of record keys and offsets: the key map over a batch's records, and which of
a batch's records a cleaning keeps (their bytes, to be copied as they are).

Two implementations with the same arguments, results and error messages: the compiled one in
``rill.records._key_scan`` (C, built when the package is installed with a compiler at hand) and the
pure-Python twin below, used when the extension is missing. ``ACCELERATED`` says which one the
names ``KeyTable``, ``key_digest``, ``map_keys`` and ``kept_records`` are (the compiled functions take
only the compiled table).

The offset map's table (``KeyTable``): key digest -> the offset of the key's latest record, at most
``slots`` entries. The compiled one is a flat open-addressing table of 24-byte slots (offset, 16-byte
digest: a short key padded), at most half full, growing as keys come, its hash seeded at random; the
twin a dict.

A record (layout in ``rill.records.record``) is read up to the start of its value: its length (a varint
of at most 5 bytes, at least 6), attributes, timestamp delta (a varlong of at most 10 bytes), offset
delta, key length (negative: no key), key, value length (negative: a tombstone). Malformed: a varint
too long, a length below 6, a record the data ends inside, a field past the record's length.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Protocol

from rill.records.scan import Buffer, _Incomplete, _varint

DIGEST_SIZE = 16
_MIN_RECORD_BODY = 6

KeptRecords = tuple[int, list[int], bool, int | None]
"""(how many records are kept, their bytes as [start, end, start, end, ...] with adjacent records in one
span, whether a kept record is a tombstone, the largest timestamp delta of the kept ones or None)"""


class Table(Protocol):
    """What the cleaner uses of a key table."""

    @property
    def slots(self) -> int: ...
    def __len__(self) -> int: ...
    def put(self, digest: bytes, offset: int, /) -> None: ...
    def get(self, digest: bytes, /) -> int: ...
    def clear(self) -> None: ...


class PyKeyTable:
    """The pure-Python ``KeyTable``: key digest -> latest offset, at most ``slots`` entries."""

    __slots__ = ("_entries", "_slots")

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("an offset map needs at least one slot")
        self._slots = slots
        self._entries: dict[bytes, int] = {}

    @property
    def slots(self) -> int:
        return self._slots

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, digest: bytes, offset: int, /) -> None:
        """Set the key's latest offset (OverflowError when it is new and the table is full)."""
        if len(digest) > DIGEST_SIZE:
            raise ValueError("a key digest has at most 16 bytes")
        if offset < 0:
            raise ValueError("an offset is at least 0")
        if digest not in self._entries and len(self._entries) >= self._slots:
            raise OverflowError("the offset map is full")
        self._entries[bytes(digest)] = offset

    def get(self, digest: bytes, /) -> int:
        """The key's latest offset, -1 when not held."""
        if len(digest) > DIGEST_SIZE:
            raise ValueError("a key digest has at most 16 bytes")
        return self._entries.get(bytes(digest), -1)

    def clear(self) -> None:
        self._entries.clear()


def py_key_digest(key: Buffer) -> bytes:
    """The offset map's key for a record key: the key itself when shorter than a digest (no hashing, and
    no collision: a digest is always 16 bytes), else its MD5 digest."""
    if len(key) < DIGEST_SIZE:
        return bytes(key)
    return hashlib.md5(key, usedforsecurity=False).digest()


_Rec = tuple[int, int, int, int, bytes | None, bool]
"""A record as ``_records`` reads it: (start, end, timestamp delta, offset delta, key, tombstone)."""


def _records(data: Buffer, count: int) -> list[_Rec]:
    """The first ``count`` records of ``data`` (one-byte varints read inline: this runs for every record a
    cleaning reads, twice, where the extension is missing)."""
    b = data if isinstance(data, bytes) else bytes(data)
    end = len(b)
    out: list[_Rec] = []
    append = out.append
    p = 0
    for index in range(count):
        x = b[p] if p < end else 0x80
        if x < 0x80:
            length, q = (x >> 1) ^ -(x & 1), p + 1
        else:
            try:
                length, q = _varint(b, p, end, 5, index)
            except _Incomplete:
                raise ValueError(f"record {index}: the records end inside it") from None
        if length < _MIN_RECORD_BODY:
            raise ValueError(f"record {index}: invalid record length {length}")
        if length > end - q:
            raise ValueError(f"record {index}: the records end inside it")
        rec_end = q + length
        try:
            q += 1  # attributes
            x = b[q]
            ts, q = ((x >> 1) ^ -(x & 1), q + 1) if x < 0x80 else _varint(b, q, rec_end, 10, index)
            x = b[q] if q < rec_end else 0x80
            delta, q = ((x >> 1) ^ -(x & 1), q + 1) if x < 0x80 else _varint(b, q, rec_end, 5, index)
            x = b[q] if q < rec_end else 0x80
            n, q = ((x >> 1) ^ -(x & 1), q + 1) if x < 0x80 else _varint(b, q, rec_end, 5, index)
            key = None
            if n >= 0:
                if n > rec_end - q:
                    raise _Incomplete
                key = b[q : q + n]
                q += n
            x = b[q] if q < rec_end else 0x80
            n, q = ((x >> 1) ^ -(x & 1), q + 1) if x < 0x80 else _varint(b, q, rec_end, 5, index)
        except _Incomplete:
            raise ValueError(f"record {index}: fields run past the record's length {length}") from None
        append((p, rec_end, ts, delta, key, n < 0))
        p = rec_end
    return out


def _digest(key: bytes) -> bytes:
    return key if len(key) < DIGEST_SIZE else hashlib.md5(key, usedforsecurity=False).digest()


def py_map_keys(table: Table, data: Buffer, count: int, base_offset: int, first_dirty: int) -> int:
    """The pure-Python ``map_keys``: put in ``table`` (key digest -> offset) the offset of each of the
    ``count`` records of ``data`` (a records section, decompressed, its first record at ``base_offset``)
    that has a key and an offset at or after ``first_dirty`` (and 0), when all their digests fit in the
    table's ``slots``. The number of records put, or -1 when they would not fit (the table unchanged).
    ValueError on a malformed record (the table unchanged)."""
    low = max(first_dirty, 0)
    pairs = [
        (_digest(key), base_offset + delta)
        for _, _, _, delta, key, _ in _records(data, count)
        if key is not None and base_offset + delta >= low
    ]
    if len(table) + len(pairs) > table.slots:
        fresh = {d for d, _ in pairs if table.get(d) < 0}
        if len(table) + len(fresh) > table.slots:
            return -1
    if isinstance(table, PyKeyTable):  # they fit: straight into its dict
        table._entries.update(pairs)
    else:
        for d, offset in pairs:
            table.put(d, offset)
    return len(pairs)


def py_kept_records(table: Table, data: Buffer, count: int, base_offset: int, map_end: int,
                    retain_deletes: bool) -> KeptRecords:  # fmt: skip
    """The pure-Python ``kept_records``: which of the ``count`` records of ``data`` (a records section,
    decompressed, its first record at ``base_offset``) a cleaning keeps: a record with a key whose offset
    is at or after ``map_end``, or whose digest ``table`` does not hold with a later offset, unless it is a
    tombstone and ``retain_deletes`` is false (``KeptRecords``). ValueError on a malformed record."""
    kept = 0
    spans: list[int] = []
    tombstones = False
    max_ts: int | None = None
    entries = table._entries if isinstance(table, PyKeyTable) else None
    for start, end, ts, delta, key, tombstone in _records(data, count):
        if key is None:
            continue
        offset = base_offset + delta
        if offset < map_end:
            if tombstone and not retain_deletes:
                continue
            d = _digest(key)
            if (entries.get(d, -1) if entries is not None else table.get(d)) > offset:
                continue
        kept += 1
        tombstones |= tombstone
        max_ts = ts if max_ts is None or ts > max_ts else max_ts
        if spans and spans[-1] == start:
            spans[-1] = end
        else:
            spans += (start, end)
    return kept, spans, tombstones, max_ts


KeyTable: Callable[[int], Table]
"""``PyKeyTable``, compiled when the extension is built."""
key_digest: Callable[[Buffer], bytes]
"""``py_key_digest``, compiled when the extension is built."""
map_keys: Callable[[Table, Buffer, int, int, int], int]
"""``py_map_keys``, compiled when the extension is built (it then takes only the compiled table)."""
kept_records: Callable[[Table, Buffer, int, int, int, bool], KeptRecords]
"""``py_kept_records``, compiled when the extension is built (it then takes only the compiled table)."""

try:
    from rill.records import _key_scan
except ImportError:  # built without a compiler: the twins do the same, slower
    ACCELERATED = False
    KeyTable, key_digest, map_keys, kept_records = PyKeyTable, py_key_digest, py_map_keys, py_kept_records
else:
    ACCELERATED = True
    KeyTable, key_digest = _key_scan.KeyTable, _key_scan.key_digest
    map_keys, kept_records = _key_scan.map_keys, _key_scan.kept_records  # type: ignore[assignment]
