"""A memory-mapped file of fixed-size, sorted index entries (base of OffsetIndex and TimeIndex).

A writable (active) index is preallocated to ``segment.index.bytes`` rounded down to a whole
number of entries, as a sparse file (like Kafka's ``setLength``). Ahead of the entries, blocks
are reserved ``RESERVE_CHUNK`` bytes at a time by writing zeros with ``pwrite`` (the first chunk
when the index is created): a full disk then surfaces as an ``OSError`` when the segment is
created, or as a full index later (the segment then rolls), never as a SIGBUS on a store into
the map; and the pages are in the page cache before the map touches them (a first store into
an uncached page of a mapped file costs milliseconds here). A thousand partitions thus reserve
a few megabytes instead of 2 x 10 MiB each.
Unused slots are zero. When the segment rolls or the log closes, the file is trimmed to its
entries, so a trimmed file's length is exactly ``entries * entry_size``. On open, trailing
all-zero slots are treated as unused: no valid entry is all zero but the time index's first one,
``(0, base offset)`` (see the subclasses), which counts when later slots are used or when the file
holds that one slot alone (trimmed to it); only the blocks before the file's first hole are searched,
as no entry lies in a hole.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

RESERVE_CHUNK = 16 * 1024


class IndexFullError(Exception):
    pass


def _data_end(fd: int, length: int) -> int:
    """Where the file's first hole starts (its length when it has none). Entries are only written
    into reserved blocks, which grow from the start, so none lies beyond; and reading a hole
    through the map costs a page fault and a zeroed page each (tens of milliseconds for an
    untrimmed index after a crash, were the search to probe them)."""
    try:
        return min(os.lseek(fd, 0, os.SEEK_HOLE), length)
    except OSError:  # a file system without SEEK_HOLE
        return length


class AbstractIndex:
    ENTRY: struct.Struct  # set by subclasses
    FIRST_MAY_BE_ZERO = False  # whether an all-zero first slot can be a valid entry (subclasses)

    def __init__(self, path: Path, base_offset: int, max_index_size: int, writable: bool) -> None:
        self.path = path
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self._max_entries = max(1, max_index_size // self.entry_size)
        self._entries = 0  # used slots
        self._reserved = 0  # bytes of the file with disk blocks reserved, all inside the map
        self._length = 0  # the file's length, which the map (when there is one) covers
        self._mm: mmap.mmap | None = None
        self._last: tuple[int, ...] | None = None  # the last entry, once read or written
        self._unsynced = False  # entries written or removed since the last flush
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            length = os.fstat(fd).st_size
            if length % self.entry_size:
                length -= length % self.entry_size
                os.ftruncate(fd, length)
            self._length = length
            self._map(fd)
            self._entries = self._count_used(_data_end(fd, length) // self.entry_size)
            if self._entries == 0 and self.FIRST_MAY_BE_ZERO and length == self.entry_size:
                self._entries = 1  # trimmed to a single all-zero entry
            self._reserved = self._entries * self.entry_size
            if self._entries > 0:
                self._last = self.entry(self._entries - 1)
            if writable:
                self._resize(fd, self._max_entries * self.entry_size)
            self._unmap()  # mapped again by the first lookup or entry written
        except BaseException:
            self.close()
            raise
        finally:
            os.close(fd)

    # ---- mapping ---------------------------------------------------------------------------
    # The file's own descriptor is closed once the file is mapped (Python's map keeps a duplicate
    # of its own), and an index is mapped only by its first lookup or entry written (opening it
    # reads its last entry, then lets the map go): a partition whose indexes nothing has searched
    # or written since the broker started keeps one descriptor, its ``.log``. Growing, trimming
    # and syncing open the file by its path for the time they take.

    def _map(self, fd: int) -> None:
        self._unmap()
        if self._length > 0:
            self._mm = mmap.mmap(fd, self._length)

    def _unmap(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def release_map(self) -> None:
        """Let the map go (and its descriptor) until the next lookup or entry written."""
        self._unmap()

    def _mapped(self) -> mmap.mmap | None:
        """The map, made when the index has none yet (None for an empty file)."""
        mm = self._mm
        if mm is None and self._length > 0:
            fd = os.open(self.path, os.O_RDWR)
            try:
                self._map(fd)
            finally:
                os.close(fd)
            mm = self._mm
        return mm

    def _count_used(self, slots: int) -> int:
        """Number of slots up to the last non-zero one (unused slots of a preallocated file are zero;
        a used one is not, but for a first slot that ``FIRST_MAY_BE_ZERO``)."""
        if slots == 0 or self._mm is None:
            return 0
        zero = bytes(self.entry_size)
        mm = self._mm
        size = self.entry_size
        if mm[(slots - 1) * size : slots * size] != zero:
            return slots
        lo = 1 if self.FIRST_MAY_BE_ZERO else 0
        if lo >= slots:
            return 0
        hi = slots - 1  # answer in [lo, hi]; slot hi is zero
        while lo < hi:
            mid = (lo + hi) // 2
            if mm[mid * size : (mid + 1) * size] == zero:
                hi = mid
            else:
                lo = mid + 1
        if lo == 1 and mm[:size] == zero:
            return 0  # slot 0 may be a zero entry, but with nothing after it, it is not known to be one
        return lo

    def resize(self, new_length: int) -> None:
        """Set the file length (whole entries); growing reserves the blocks on disk."""
        fd = os.open(self.path, os.O_RDWR)
        try:
            self._resize(fd, new_length)
        finally:
            os.close(fd)

    def _resize(self, fd: int, new_length: int) -> None:
        new_length -= new_length % self.entry_size
        new_length = max(new_length, self._entries * self.entry_size)
        current = os.fstat(fd).st_size
        if new_length == current and (self._mm is not None or new_length == 0 or self._entries == 0):
            self._length = current
            return
        self._unmap()
        os.ftruncate(fd, new_length)
        self._length = new_length
        self._reserved = min(self._reserved, new_length)
        if self._entries > 0:
            self._map(fd)
        self._max_entries = max(self._max_entries, new_length // self.entry_size)
        if new_length > current:
            self._reserve(fd, (self._entries + 1) * self.entry_size)

    def _reserve(self, fd: int, end: int) -> None:
        """Allocate disk blocks up to at least ``end`` (a chunk at a time). Raises OSError (ENOSPC)."""
        start = self._reserved
        stop = min(self._length, max(end, start + RESERVE_CHUNK))
        if stop <= start:
            return
        zeros = bytes(stop - start)
        written = 0
        while written < len(zeros):
            written += os.pwrite(fd, memoryview(zeros)[written:], start + written)
        self._reserved = stop

    def trim(self) -> None:
        """Shrink the file to its entries (the segment is no longer written)."""
        self.resize(self._entries * self.entry_size)

    # ---- state -----------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def is_full(self) -> bool:
        return self._entries >= self._max_entries

    @property
    def mapped(self) -> bool:
        """Whether the file is mapped (a map holds a descriptor)."""
        return self._mm is not None

    def entry(self, n: int) -> tuple[int, ...]:
        mm = self._mapped()
        assert mm is not None
        return self.ENTRY.unpack_from(mm, n * self.entry_size)

    def last_values(self) -> tuple[int, ...] | None:
        """The fields of the last entry, or None when the index is empty."""
        if self._entries == 0:
            return None
        last = self._last
        if last is None:
            last = self._last = self.entry(self._entries - 1)
        return last

    def _write_entry(self, first: int, second: int) -> bool:
        """Store the next entry; returns whether the index is now full. Raises IndexFullError."""
        position = self._entries * self.entry_size
        mm = self._mm
        if self._entries >= self._max_entries or position + self.entry_size > self._reserved or mm is None:
            mm = self._make_room(position + self.entry_size)
        self.ENTRY.pack_into(mm, position, first, second)
        self._entries += 1
        self._last = (first, second)
        self._unsynced = True
        return self._entries >= self._max_entries

    def _make_room(self, end: int) -> mmap.mmap:
        """Make the slot ending at ``end`` writable (reserving disk blocks) and return the map, or raise
        IndexFullError. Blocks up to ``_reserved`` are always inside the map, so below it no check is needed."""
        if self._entries >= self._max_entries or self._length == 0:
            raise IndexFullError(f"index {self.path.name} is full ({self._entries} entries)")
        if end > self._length:
            raise IndexFullError(f"index {self.path.name} is not writable")
        try:
            if end > self._reserved:
                fd = os.open(self.path, os.O_RDWR)
                try:
                    self._reserve(fd, end)
                finally:
                    os.close(fd)
            mm = self._mapped()
        except OSError as e:  # no disk space for the index: it is full, and the segment will roll
            self._max_entries = self._entries
            raise IndexFullError(f"index {self.path.name}: cannot reserve space: {e}") from e
        assert mm is not None
        return mm

    def _largest_lower_bound(self, key: int, field: int) -> int:
        """Slot of the last entry whose ``field`` is <= key, or -1."""
        if self._entries == 0:
            return -1
        mm = self._mapped()
        if mm is None:
            return -1
        unpack = self.ENTRY.unpack_from
        size = self.entry_size
        lo, hi = 0, self._entries - 1
        if unpack(mm, 0)[field] > key:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if unpack(mm, mid * size)[field] <= key:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _truncate_entries(self, n: int) -> None:
        """Keep the first ``n`` entries, zeroing the rest of the used slots."""
        n = max(0, min(n, self._entries))
        mm = self._mapped() if n < self._entries else None
        if mm is not None:
            mm[n * self.entry_size : self._entries * self.entry_size] = bytes((self._entries - n) * self.entry_size)
        if n != self._entries:
            self._unsynced = True
        self._entries = n
        self._last = None

    def reset(self) -> None:
        self._truncate_entries(0)

    def flush(self) -> None:
        """fsync the file (pages stored through the map belong to the page cache of this file), when entries were
        written or removed since the last flush: an index whose entries a crash loses is rebuilt or searched
        less precisely, never wrong, so its length alone (a trim) is not worth a sync."""
        if not self._unsynced:
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._unsynced = False

    def close(self) -> None:
        self._reserved = 0
        self._unmap()

    def rename(self, new_path: Path) -> None:
        os.rename(self.path, new_path)
        self.path = new_path
