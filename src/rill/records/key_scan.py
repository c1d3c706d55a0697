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


class _Record:
    __slots__ = ("end", "key", "offset_delta", "start", "tombstone", "ts_delta")

    def __init__(self) -> None:
        self.start = self.end = self.ts_delta = self.offset_delta = 0
        self.key: memoryview | None = None
        self.tombstone = False


def _records(data: Buffer, count: int) -> list[_Record]:
    b = memoryview(data).cast("B")
    end = len(b)
    out: list[_Record] = []
    p = 0
    for index in range(count):
        try:
            length, q = _varint(b, p, end, 5, index)
        except _Incomplete:
            raise ValueError(f"record {index}: the records end inside it") from None
        if length < _MIN_RECORD_BODY:
            raise ValueError(f"record {index}: invalid record length {length}")
        if length > end - q:
            raise ValueError(f"record {index}: the records end inside it")
        rec_end = q + length
        r = _Record()
        r.start, r.end = p, rec_end
        try:
            r.ts_delta, q = _varint(b, q + 1, rec_end, 10, index)
            r.offset_delta, q = _varint(b, q, rec_end, 5, index)
            n, q = _varint(b, q, rec_end, 5, index)
            if n >= 0:
                if n > rec_end - q:
                    raise _Incomplete
                r.key = b[q : q + n]
                q += n
            n, q = _varint(b, q, rec_end, 5, index)
        except _Incomplete:
            raise ValueError(f"record {index}: fields run past the record's length {length}") from None
        r.tombstone = n < 0
        out.append(r)
        p = rec_end
    return out


def py_map_keys(table: Table, data: Buffer, count: int, base_offset: int, first_dirty: int) -> int:
    """The pure-Python ``map_keys``: put in ``table`` (key digest -> offset) the offset of each of the
    ``count`` records of ``data`` (a records section, decompressed, its first record at ``base_offset``)
    that has a key and an offset at or after ``first_dirty`` (and 0), when all their digests fit in the table's
    ``slots``. The number of records put, or -1 when they would not fit (the table unchanged).
    ValueError on a malformed record (the table unchanged)."""
    pairs = [
        (py_key_digest(r.key), base_offset + r.offset_delta)
        for r in _records(data, count)
        if r.key is not None and base_offset + r.offset_delta >= max(first_dirty, 0)
    ]
    if len(table) + len(pairs) > table.slots:
        fresh = {d for d, _ in pairs if table.get(d) < 0}
        if len(table) + len(fresh) > table.slots:
            return -1
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
    for r in _records(data, count):
        if r.key is None:
            continue
        offset = base_offset + r.offset_delta
        if offset < map_end:
            if r.tombstone and not retain_deletes:
                continue
            if table.get(py_key_digest(r.key)) > offset:
                continue
        kept += 1
        tombstones |= r.tombstone
        max_ts = r.ts_delta if max_ts is None else max(max_ts, r.ts_delta)
        if spans and spans[-1] == r.start:
            spans[-1] = r.end
        else:
            spans += (r.start, r.end)
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
