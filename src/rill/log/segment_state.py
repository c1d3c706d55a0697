"""The write-side state of a segment and of its two indexes, and the append that updates it.

``LogSegment`` and ``AbstractIndex`` are built on these two classes. A produce request's batch (one per
partition, the usual case) ends in ``SegmentState.try_append``: write one batch at the segment's end,
add the index entries that ``index.interval.bytes`` calls for, move the next offset and the max
timestamp. With 16 KiB batches every append adds an offset index entry, and that bookkeeping in Python
cost as much as the write itself, so it also exists compiled.

Two implementations with the same attributes, methods and results: ``rill.log._segment`` (C, built
when the package is installed with a compiler at hand) and the pure-Python twin below, used when the
extension is missing. ``ACCELERATED`` says which one the names ``SegmentState`` and ``IndexState``
are. The compiled one handles the common case and calls ``_add_index_entries_slow`` (written in
Python, in ``LogSegment``) for every other: an index whose last entry is not known, one that needs
disk blocks reserved or is full, values that do not fit the entry. The tests drive both on the same
operations and compare the files and the state.

The attributes (all ``int`` unless said):

``SegmentState``: ``base_offset``; ``size`` (bytes in the ``.log`` file); ``next_offset``;
``max_timestamp`` and ``offset_of_max_timestamp`` (-1 when none); ``bytes_since_last_index_entry``;
``index_interval_bytes``; ``created_ms``; ``roll_jitter_ms`` (drawn when the segment is made, see
``LogConfig.random_segment_jitter``); ``index_full`` (bool); ``rolling_based_timestamp`` (the
first batch's max timestamp, None when empty); ``_fd``; ``offset_index`` and ``time_index``.

``IndexState``: ``base_offset``; ``entry_size``; ``_entries`` (used slots); ``_max_entries``;
``_reserved`` (bytes of the file with disk blocks reserved, all inside the map); ``_mm`` (the
``mmap`` or None); ``_last`` (the last entry's fields once read or written, else None).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rill.records.batch import Buffer

if TYPE_CHECKING:
    from rill.log.offset_index import OffsetIndex
    from rill.log.time_index import TimeIndex

INT32_MAX = 2**31 - 1
_IOV_MAX = 1024
_BASE_OFFSET = struct.Struct(">q")  # at byte 0 of a record batch (rill.records.batch)
_LEADER_EPOCH = struct.Struct(">i")  # partitionLeaderEpoch, at byte 12


def write_all(fd: int, bufs: Sequence[Buffer], position: int) -> int:
    """pwritev every buffer at ``position`` (``_IOV_MAX`` at a time, again after a partial write);
    returns bytes written. Raises OSError on failure, a call that writes nothing included."""
    total = sum(map(len, bufs))
    n = 0
    if len(bufs) <= _IOV_MAX:
        n = os.pwritev(fd, bufs, position)
        if n == total:
            return n
    views = [memoryview(b).cast("B") for b in bufs]
    written = 0
    i = 0
    while True:
        written += n
        # skip what the last call wrote: whole buffers, then the start of the next one
        while n > 0:
            if n >= len(views[i]):
                n -= len(views[i])
                i += 1
            else:
                views[i] = views[i][n:]
                n = 0
        if written == total:
            return written
        n = os.pwritev(fd, views[i : i + _IOV_MAX], position + written)
        if n <= 0:
            raise OSError("pwritev wrote nothing")


def cut_back(fd: int, size: int) -> None:
    """After a failed write: drop whatever part of it reached the file."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, size)


class PyIndexState:
    base_offset: int
    entry_size: int
    _entries: int
    _max_entries: int
    _reserved: int
    _mm: mmap.mmap | None
    _last: tuple[int, ...] | None


class PySegmentState:
    base_offset: int
    size: int
    next_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    bytes_since_last_index_entry: int
    index_interval_bytes: int
    created_ms: int
    roll_jitter_ms: int
    index_full: bool
    rolling_based_timestamp: int | None
    _fd: int
    offset_index: OffsetIndex
    time_index: TimeIndex

    def try_append(self, buf: Buffer, first_offset: int, last_offset: int, max_ts: int, leader_epoch: int,
                   now_ms: int, segment_bytes: int, segment_ms: int) -> bool:
        """Append one whole batch from a producer: False, with nothing done, when it must go into a new
        segment (``should_roll``); else stamp its base offset and partition leader epoch into ``buf``,
        write it at the end, index it and return True. On OSError the file is cut back to its
        previous size and the error re-raised."""
        size = len(buf)
        if size < 16:
            raise ValueError("try_append: not a record batch")
        if self.size and self.should_roll(size, max_ts, last_offset, now_ms, segment_bytes, segment_ms):
            return False
        _BASE_OFFSET.pack_into(buf, 0, first_offset)
        _LEADER_EPOCH.pack_into(buf, 12, leader_epoch)
        start = self.size
        try:
            write_all(self._fd, [buf], start)
        except OSError:
            cut_back(self._fd, start)
            raise
        self.size = start + size
        if self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = max_ts
        self._index_batch(start, last_offset, max_ts, size)
        return True

    def _index_batch(self, position: int, last_offset: int, max_ts: int, size: int) -> None:
        """Account for a batch of ``size`` bytes written at ``position``."""
        if max_ts > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_ts, last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self._add_index_entries_slow(last_offset, position)
        self.bytes_since_last_index_entry += size
        self.next_offset = last_offset + 1

    def _add_index_entries_slow(self, last_offset: int, position: int) -> None:
        """The index entries of one batch, in Python: ``LogSegment`` defines it (it needs the
        index classes, which are built on ``IndexState``)."""
        raise NotImplementedError

    def should_roll(self, size: int, max_ts: int, last_offset: int, now_ms: int, segment_bytes: int,
                    segment_ms: int) -> bool:
        """Must a batch of ``size`` bytes go into a new segment? By time: once its records span more
        than ``segment_ms`` less the segment's ``roll_jitter_ms`` (or it was created that long ago)."""
        if self.size > segment_bytes - size or self.index_full or last_offset - self.base_offset > INT32_MAX:
            return True
        rolling_ts = self.rolling_based_timestamp
        waited = max_ts - rolling_ts if rolling_ts is not None and rolling_ts >= 0 else now_ms - self.created_ms
        return waited > segment_ms - self.roll_jitter_ms


if TYPE_CHECKING:
    SegmentState = PySegmentState
    IndexState = PyIndexState
    ACCELERATED: bool
else:
    try:
        from rill.log._segment import IndexState, SegmentState
    except ImportError:  # built without a compiler: the twins do the same, slower
        ACCELERATED = False
        SegmentState, IndexState = PySegmentState, PyIndexState
    else:
        ACCELERATED = True
