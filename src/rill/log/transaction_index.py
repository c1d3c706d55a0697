"""The aborted transaction index of one segment: ``<20-digit base offset>.txnindex`` (Kafka's TransactionIndex).

One entry per transaction whose ABORT marker lies in the segment, in the order the markers were
appended (so ``lastOffset`` increases through the file). Layout of an entry (big-endian, 34 bytes,
no file header)::

    offset  size  field
         0     2  version          int16  0
         2     8  producerId       int64
        10     8  firstOffset      int64  offset of the transaction's first batch in this partition
        18     8  lastOffset       int64  offset of the ABORT marker
        26     8  lastStableOffset int64  the partition's last stable offset once the marker was appended

A read_committed Fetch collects the entries whose range ``[firstOffset, lastOffset]`` overlaps the
fetched offsets (``collect_aborted``), scanning from the segment holding the fetch offset until an
entry's ``lastStableOffset`` passes the fetched range: no transaction still open at that point can
have begun before it, so later segments hold nothing more for it.

The file is made when the first entry is appended; a segment without aborted transactions has none.
It is renamed, truncated and deleted with its segment. Its entries are held in memory as well (a
segment has few); ``load`` refuses a file whose size is no multiple of 34 or with an entry of an
unknown version or inverted offsets (the segment is then recovered and its index rebuilt).
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from pathlib import Path
from typing import NamedTuple

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size
assert ENTRY_SIZE == 34
CURRENT_VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class CorruptIndexError(ValueError):
    """A ``.txnindex`` file that does not parse."""


def encode_entry(txn: AbortedTxn) -> bytes:
    return ENTRY.pack(CURRENT_VERSION, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)


def decode_entries(data: bytes | bytearray | memoryview, name: str = "txnindex") -> list[AbortedTxn]:
    """The entries of a whole file; CorruptIndexError when it is not one."""
    if len(data) % ENTRY_SIZE:
        raise CorruptIndexError(f"{name}: size {len(data)} is no multiple of {ENTRY_SIZE}")
    out: list[AbortedTxn] = []
    last = -1
    for pos in range(0, len(data), ENTRY_SIZE):
        version, pid, first, last_offset, lso = ENTRY.unpack_from(data, pos)
        if version != CURRENT_VERSION:
            raise CorruptIndexError(f"{name}: entry at {pos} has version {version}")
        if first < 0 or last_offset < first or last_offset < last:
            raise CorruptIndexError(f"{name}: entry at {pos} has offsets {first}..{last_offset} after {last}")
        last = last_offset
        out.append(AbortedTxn(pid, first, last_offset, lso))
    return out


class TransactionIndex:
    """A segment's aborted transactions (not thread safe, except ``flush``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._fd = -1
        self._lock = threading.Lock()
        self._unflushed = False

    def load(self) -> None:
        """Read the file, if any. Raises CorruptIndexError (and keeps no entry) when it does not parse."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            self.entries = []
            return
        self.entries = []
        self.entries = decode_entries(data, self.path.name)

    @property
    def last_offset(self) -> int:
        return self.entries[-1].last_offset if self.entries else -1

    def append(self, txn: AbortedTxn) -> None:
        if txn.last_offset < self.last_offset:
            raise ValueError(
                f"{self.path.name}: aborted transaction ending at {txn.last_offset} after {self.last_offset}"
            )
        entry = encode_entry(txn)
        fd = self._open()
        size = len(self.entries) * ENTRY_SIZE
        try:
            if os.pwrite(fd, entry, size) != ENTRY_SIZE:
                raise OSError(f"short write to {self.path}")
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
        self.entries.append(txn)
        self._unflushed = True

    def _open(self) -> int:
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """The entries overlapping ``[fetch_offset, upper_bound_offset)``, and whether the search is complete
        (an entry's last stable offset reached ``upper_bound_offset``: later segments add nothing)."""
        out: list[AbortedTxn] = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return out, True
        return out, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at or above ``offset``."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) == len(self.entries):
            return
        self.entries = keep
        if self._fd >= 0 or self.path.exists():
            os.ftruncate(self._open(), len(keep) * ENTRY_SIZE)
            self._unflushed = True

    def reset(self) -> None:
        """Empty the index (before it is rebuilt by a segment's recovery)."""
        self.entries = []
        if self._fd >= 0 or self.path.exists():
            os.ftruncate(self._open(), 0)
            self._unflushed = True

    def flush(self) -> None:
        with self._lock:
            if self._fd >= 0 and self._unflushed:
                self._unflushed = False
                os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = -1

    def rename(self, new_path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.rename(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


__all__ = [
    "ENTRY_SIZE",
    "TXN_INDEX_SUFFIX",
    "AbortedTxn",
    "CorruptIndexError",
    "TransactionIndex",
    "decode_entries",
    "encode_entry",
]
