"""One segment of a partition log: the ``.log`` file of record batches and its two indexes.

Files, named by the segment's base offset as 20 zero-padded digits::

    00000000000000000000.log        record batches exactly as appended (see rill.records.batch)
    00000000000000000000.index      OffsetIndex, 8-byte entries (see rill.log.offset_index)
    00000000000000000000.timeindex  TimeIndex, 12-byte entries (see rill.log.time_index)
    00000000000000000000.txnindex   aborted transactions, 34-byte entries (see rill.log.transaction_index),
                                    only once the segment holds an ABORT marker

Every batch in a segment has offsets in ``[base_offset, base_offset + 2**31 - 1]`` and base
offsets strictly increase through the file. The segment writes with ``pwrite(v)`` at its known
size, so a failed write is cut off again with ``ftruncate`` and the file never holds a partial
batch while the process runs; after a crash, ``recover`` re-validates every batch and truncates
at the first bad byte.

The ``.log`` file's descriptor belongs to a ``SegmentFile``, which the segment and every ``FileRegion``
cut from it (``region``) refer to; it is closed when the last of them lets go. A Fetch response still
being sent when its segment is closed (the topic deleted, the segment deleted by retention with
``file.delete.delay.ms`` = 0, the log truncated) thus keeps reading the file it was cut from, unlinked
or not, and the descriptor's number is not given to another file meanwhile (Kafka keeps a segment open
until no reader holds it, too).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import threading
from collections.abc import Sequence
from pathlib import Path

from rill.common import FileRegion
from rill.log.abstract_index import IndexFullError
from rill.log.offset_index import OffsetIndex
from rill.log.time_index import TimeIndex
from rill.log.transaction_index import TXN_INDEX_SUFFIX, CorruptIndexError, TransactionIndex
from rill.records.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
    Buffer,
    crc_ok,
    parse_header,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"  # a segment the log cleaner is writing (deleted when found at start)
SWAP_SUFFIX = ".swap"  # a cleaned segment, complete, about to replace the segments it was made from
# Beside a cleaned segment's ``.log.swap`` file: the end (exclusive) of the offsets of the segments it replaces,
# as ASCII decimal. The swap's own records may end earlier (the last segments it replaces can be cleaned empty),
# so a crash recovery that went by them alone would keep such a segment, and bring its removed records back.
SWAP_END_SUFFIX = ".swap-end"
INT32_MAX = 2**31 - 1
_SCAN_CHUNK = 64 * 1024
_IOV_MAX = 1024
_BASE_OFFSET = struct.Struct(">q")  # at byte 0 of a record batch (rill.records.batch)
_LEADER_EPOCH = struct.Struct(">i")  # partitionLeaderEpoch, at byte 12


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


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


class SegmentFile:
    """An open file descriptor, closed when nothing refers to this object any more (CPython frees an
    object, and so closes its descriptor, the moment its last reference goes)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class LogSegment:
    """A segment (not thread safe, except ``flush`` which a worker thread may call)."""

    def __init__(
        self,
        dir: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        now_ms: int,
        roll_jitter_ms: int,
        active: bool,
        suffix: str = "",
    ) -> None:
        self.dir = dir
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.suffix = suffix  # "" for a live segment; CLEANED_SUFFIX / SWAP_SUFFIX while the cleaner makes one
        self.log_path = dir / (segment_file_name(base_offset, LOG_SUFFIX) + suffix)
        self.lock = threading.Lock()
        self.closed = False
        self.created_ms = now_ms
        self.roll_jitter_ms = roll_jitter_ms
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._file: SegmentFile | None = SegmentFile(self._fd)  # closes the descriptor when the last holder goes
        try:
            self.offset_index = OffsetIndex(
                dir / (segment_file_name(base_offset, INDEX_SUFFIX) + suffix), base_offset, max_index_size, active
            )
            try:
                self.time_index = TimeIndex(
                    dir / (segment_file_name(base_offset, TIME_INDEX_SUFFIX) + suffix),
                    base_offset,
                    max_index_size,
                    active,
                )
            except BaseException:
                self.offset_index.close()
                raise
        except BaseException:
            self._fd, self._file = -1, None
            raise
        self.txn_index = TransactionIndex(dir / (segment_file_name(base_offset, TXN_INDEX_SUFFIX) + suffix))
        try:
            self.txn_index.load()
            self.txn_index_ok = True
        except (CorruptIndexError, OSError):
            self.txn_index_ok = False  # ``load`` refuses the segment: ``recover`` runs, the log rebuilds the index
        self.size = os.fstat(self._fd).st_size  # bytes in the .log file
        self.next_offset = base_offset
        self.max_timestamp = -1  # -1 (and its offset -1) while the segment has no timestamp
        self.offset_of_max_timestamp = -1
        self.rolling_based_timestamp: int | None = None  # the first batch's max timestamp; None when empty
        self.bytes_since_last_index_entry = 0
        self.index_full = False  # read on every append; refreshed wherever the indexes change
        self._refresh_index_full()

    # ---- state --------------------------------------------------------------------------------

    @property
    def fd(self) -> int:
        return self._fd

    @property
    def file(self) -> SegmentFile | None:
        """The open ``.log`` file (None once closed): holding it keeps the descriptor open."""
        return self._file

    def region(self, position: int, length: int) -> FileRegion:
        """``length`` bytes of the ``.log`` file from ``position``, for ``os.sendfile``: the region holds
        the file open until it is dropped, whatever happens to the segment meanwhile."""
        return FileRegion(self._fd, position, length, self._file)

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    def _refresh_index_full(self) -> None:
        # A plain attribute, read on every append; refreshed wherever the indexes change.
        self.index_full = self.offset_index.is_full or self.time_index.is_full

    def largest_timestamp(self) -> int:
        """The segment's max timestamp, or its file's mtime when it has no timestamps (Kafka's rule)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except OSError:
            return self.created_ms

    def read_header(self, position: int) -> BatchHeader | None:
        if position + BATCH_HEADER_SIZE > self.size:
            return None
        data = os.pread(self._fd, BATCH_HEADER_SIZE, position)
        if len(data) < BATCH_HEADER_SIZE:
            return None
        return parse_header(data)

    def read_bytes(self, position: int, length: int) -> bytes:
        return os.pread(self._fd, length, position)

    # ---- loading ------------------------------------------------------------------------------

    def load(self) -> bool:
        """Restore in-memory state of a cleanly written segment from its indexes and tail.

        Returns False when the files look inconsistent and ``recover`` should run instead.
        """
        if not self.txn_index_ok or not self.offset_index.sanity_ok(self.size):
            return False
        _, pos = self.offset_index.lookup_by_position(self.size)
        end, next_offset, max_ts, max_ts_off = self._scan(pos)
        if end != self.size:
            return False
        last = self.time_index.last_entry()
        if last is not None and last[0] >= max_ts:  # on a tie the entry's batch came first
            max_ts, max_ts_off = last
        if not self.time_index.sanity_ok(next_offset):
            return False
        self.next_offset = next_offset if self.size else self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_off
        first = self.read_header(0)
        self.rolling_based_timestamp = first.max_timestamp if first is not None else None
        self.bytes_since_last_index_entry = self.size - pos
        return True

    def _scan(self, position: int) -> tuple[int, int, int, int]:
        """Walk headers from ``position`` to the end: ``(end, next_offset, max_ts, offset_of_max_ts)``.

        Stops early (end < size) at a header that does not frame correctly.
        """
        next_offset = self.base_offset
        max_ts, max_ts_off = -1, -1
        while position < self.size:
            header = self.read_header(position)
            if header is None or header.magic != MAGIC_V2 or header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
                break
            if position + header.size > self.size or header.last_offset_delta < 0:
                break
            if header.max_timestamp > max_ts:
                max_ts, max_ts_off = header.max_timestamp, header.last_offset
            next_offset = header.next_offset
            position += header.size
        if next_offset == self.base_offset and position > 0:
            # the scan started mid-file at the end: the last indexed batch tells the next offset
            next_offset = max(next_offset, self.offset_index.last_offset + 1)
        return position, next_offset, max_ts, max_ts_off

    def recover(self) -> int:
        """Re-validate every batch, rebuild both indexes, truncate at the first invalid byte.

        Returns the number of bytes truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()  # the log rebuilds it from the producer state as it replays the segment
        self.txn_index_ok = True
        self.offset_index.resize(self.max_index_size)
        self.time_index.resize(self.max_index_size)
        self._refresh_index_full()
        self.max_timestamp, self.offset_of_max_timestamp = -1, -1
        self.rolling_based_timestamp = None
        self.bytes_since_last_index_entry = 0
        file_size = os.fstat(self._fd).st_size
        pos = 0
        expected = self.base_offset
        mm = mmap.mmap(self._fd, file_size, access=mmap.ACCESS_READ) if file_size else None
        view = memoryview(mm) if mm is not None else memoryview(b"")
        try:
            while pos + BATCH_HEADER_SIZE <= file_size:
                header = parse_header(view, pos)
                if (
                    header.magic != MAGIC_V2
                    or header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD
                    or pos + header.size > file_size
                    or header.last_offset_delta < 0
                    or header.base_offset < expected
                    or header.last_offset - self.base_offset > INT32_MAX
                    or not crc_ok(view, pos, header)
                ):
                    break
                self._index_batch(pos, header.last_offset, header.max_timestamp, header.size)
                if self.rolling_based_timestamp is None:
                    self.rolling_based_timestamp = header.max_timestamp
                pos += header.size
                expected = header.next_offset
        finally:
            view.release()
            if mm is not None:
                mm.close()
        truncated = file_size - pos
        if truncated:
            os.ftruncate(self._fd, pos)
        self.size = pos
        self.next_offset = expected
        # Each map holds a descriptor: the next lookup or entry maps them again (a start that recovers
        # 10,000 partitions would otherwise keep three descriptors for each).
        self.offset_index.release_map()
        self.time_index.release_map()
        return truncated

    # ---- writing ------------------------------------------------------------------------------

    def append(self, bufs: Sequence[Buffer], batches: Sequence[tuple[int, int, int, int]]) -> None:
        """Write ``bufs`` (whole batches) at the end; ``batches`` holds per batch
        ``(position within bufs, last offset, max timestamp, size)``.

        On OSError the file is cut back to its previous size and the error re-raised.
        """
        start = self.size
        try:
            written = write_all(self._fd, bufs, start)
        except OSError:
            cut_back(self._fd, start)
            raise
        self.size = start + written
        if self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = batches[0][2]
        for rel_pos, last_offset, max_ts, size in batches:
            self._index_batch(start + rel_pos, last_offset, max_ts, size)

    def try_append(
        self,
        buf: bytearray | memoryview,
        first_offset: int,
        last_offset: int,
        max_ts: int,
        leader_epoch: int,
        now_ms: int,
        segment_bytes: int,
        segment_ms: int,
    ) -> bool:
        """Append one whole batch from a producer (the path of nearly every produce request): False,
        with nothing done, when it must go into a new segment (``should_roll``); else stamp its base
        offset and partition leader epoch into ``buf``, write it at the end, index it and return True.
        On OSError the file is cut back to its previous size and the error re-raised."""
        size = len(buf)
        if size < 16:
            raise ValueError("try_append: not a record batch")
        start = self.size
        if start and self.should_roll(size, max_ts, last_offset, now_ms, segment_bytes, segment_ms):
            return False
        _BASE_OFFSET.pack_into(buf, 0, first_offset)
        _LEADER_EPOCH.pack_into(buf, 12, leader_epoch)
        fd = self._fd
        try:
            written = os.pwrite(fd, buf, start)
            if written != size:
                write_all(fd, (memoryview(buf)[written:],), start + written)
        except OSError:
            cut_back(fd, start)
            raise
        self.size = start + size
        if self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = max_ts
        # _index_batch written out (this runs for nearly every produce request)
        if max_ts > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_ts, last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self._add_index_entries(last_offset, start)
        self.bytes_since_last_index_entry += size
        self.next_offset = last_offset + 1
        return True

    def _index_batch(self, position: int, last_offset: int, max_ts: int, size: int) -> None:
        """Account for a batch of ``size`` bytes written at ``position``."""
        if max_ts > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_ts, last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self._add_index_entries(last_offset, position)
        self.bytes_since_last_index_entry += size
        self.next_offset = last_offset + 1

    def should_roll(
        self, size: int, max_ts: int, last_offset: int, now_ms: int, segment_bytes: int, segment_ms: int
    ) -> bool:
        """Must a batch of ``size`` bytes go into a new segment? By time: once its records span more
        than ``segment_ms`` less the segment's ``roll_jitter_ms`` (or it was created that long ago)."""
        if self.size > segment_bytes - size or self.index_full or last_offset - self.base_offset > INT32_MAX:
            return True
        rolling_ts = self.rolling_based_timestamp
        waited = max_ts - rolling_ts if rolling_ts is not None and rolling_ts >= 0 else now_ms - self.created_ms
        return waited > segment_ms - self.roll_jitter_ms

    def _add_index_entries(self, last_offset: int, position: int) -> None:
        # Only a write fills an index; the paths that empty or grow one call _refresh_index_full.
        self.bytes_since_last_index_entry = 0
        try:
            full = self.offset_index.append(last_offset, position)
            if self.max_timestamp >= 0:
                full = self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp) or full
        except IndexFullError:
            full = True  # the segment rolls before the next append
        if full:
            self.index_full = True

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        pos, _ = found
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self._refresh_index_full()
        os.ftruncate(self._fd, pos)
        removed = self.size - pos
        self.size = pos
        _, index_pos = self.offset_index.lookup_by_position(pos)
        _, next_offset, max_ts, max_ts_off = self._scan(index_pos)
        last = self.time_index.last_entry()
        if last is not None and last[0] >= max_ts:  # on a tie the entry's batch came first
            max_ts, max_ts_off = last
        self.next_offset = next_offset if pos else self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_off
        self.bytes_since_last_index_entry = pos - index_pos
        if pos == 0:
            self.rolling_based_timestamp = None
        return removed

    def on_become_inactive(self) -> None:
        """The segment stops being written: record its max timestamp and trim the indexes."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        self.offset_index.trim()
        self.time_index.trim()
        self._refresh_index_full()

    def on_become_active(self, max_index_size: int) -> None:
        self.offset_index.resize(max_index_size)
        self.time_index.resize(max_index_size)
        self._refresh_index_full()

    # ---- reading ------------------------------------------------------------------------------

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        _, pos = self.offset_index.lookup(offset)
        pos = max(pos, start_position)
        while pos < self.size:
            header = self.read_header(pos)
            if header is None:
                return None
            if header.last_offset >= offset:
                return pos, header
            pos += header.size
        return None

    def end_position(self, start: int, max_bytes: int, max_offset: int | None, min_one_batch: bool) -> int:
        """End of the whole batches from ``start`` within ``max_bytes`` and below ``max_offset``."""
        bound = self.size
        if max_offset is not None and max_offset < self.next_offset:
            found = self.translate_offset(max_offset, start)
            if found is not None:
                bound = found[0]
        if bound <= start:
            return start
        limit = start + max(0, max_bytes)
        if limit >= bound:
            return bound
        _, pos = self.offset_index.lookup_by_position(limit)
        pos = max(pos, start)
        while pos < limit:
            header = self.read_header(pos)
            if header is None or pos + header.size > limit:
                break
            pos += header.size
        if pos == start and min_one_batch:
            header = self.read_header(start)
            if header is not None:
                pos = min(start + header.size, bound)
        return pos

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int, int] | None:
        """``(position, header offset, max timestamp)`` of the first batch at or after
        ``starting_offset`` whose max timestamp is >= ``timestamp``."""
        entry_ts, entry_offset = self.time_index.lookup(timestamp - 1)
        # batches up to entry_offset all hold timestamps below the target
        begin = entry_offset + 1 if entry_ts >= 0 else self.base_offset
        begin = max(begin, starting_offset)
        _, pos = self.offset_index.lookup(begin)
        while pos < self.size:
            header = self.read_header(pos)
            if header is None:
                return None
            if header.last_offset >= starting_offset and header.max_timestamp >= timestamp:
                return pos, header.base_offset, header.max_timestamp
            pos += header.size
        return None

    # ---- durability and lifecycle -------------------------------------------------------------

    def flush(self) -> None:
        """fsync the log and both indexes (safe from a worker thread)."""
        with self.lock:
            if self.closed:
                return
            os.fsync(self._fd)
            self.offset_index.flush()
            self.time_index.flush()
            self.txn_index.flush()

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.offset_index.close()
            self.time_index.close()
            self.txn_index.close()
            # The descriptor closes now, or when the last FileRegion cut from it is dropped.
            self._fd, self._file = -1, None

    def files(self) -> list[Path]:
        return [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]

    def move_to(self, new_dir: Path) -> None:
        """Follow a rename of the log's directory: the files keep their names under ``new_dir`` (open ones stay
        open; those opened by name later are found there)."""
        self.dir = new_dir
        self.log_path = new_dir / self.log_path.name
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.path = new_dir / index.path.name

    def rename_to_deleted(self) -> None:
        """Give every file the ``.deleted`` suffix; the file stays open for readers."""
        new_log = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        with contextlib.suppress(FileNotFoundError):
            os.rename(self.log_path, new_log)
        self.log_path = new_log
        for index in (self.offset_index, self.time_index):
            with contextlib.suppress(FileNotFoundError):
                index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))
        self.txn_index.rename(self.txn_index.path.with_name(self.txn_index.path.name + DELETED_SUFFIX))

    def rename_suffix(self, suffix: str) -> None:
        """Rename the three files from ``<name><current suffix>`` to ``<name><suffix>`` (the cleaner's
        ``.cleaned`` -> ``.swap`` -> final name); files stay open."""
        old = self.suffix
        for index in (self.offset_index, self.time_index):
            index.rename(index.path.with_name(index.path.name[: len(index.path.name) - len(old)] + suffix))
        txn = self.txn_index.path
        self.txn_index.rename(txn.with_name(txn.name[: len(txn.name) - len(old)] + suffix))
        new_log = self.log_path.with_name(self.log_path.name[: len(self.log_path.name) - len(old)] + suffix)
        os.rename(self.log_path, new_log)
        self.log_path = new_log
        self.suffix = suffix

    def delete_files(self) -> None:
        """Close and unlink (blocking: run it in a worker thread)."""
        self.close()
        for path in self.files():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
