"""One cleaning of a compacted log (Kafka's Cleaner): keep, for each key, only its latest record.

A cleaning has three steps:

1. ``plan_cleaning`` (on the event loop): the log's segments from its start up to the first uncleanable
   offset (the active segment's base, the last stable offset: never into an open transaction, the first
   segment younger than ``min.compaction.lag.ms``), each with its file held open (``SegmentFile``) and its
   size.
2. ``clean`` (for the broker in a cleaning process, rill.log.cleaner_process; else the calling thread):
   an ``OffsetMap`` of key digest -> latest offset is built over the dirty section (from the first dirty
   offset on), as far as the map holds (the rest waits for the next cleaning); then every segment below
   the map's end is rewritten into as few segments as fit
   (``segment.bytes``, the indexes not full, offsets within 2**31 of the base: a segment's kept batches join
   the current cleaned segment when they fit, else start the next one at its base offset), each written as
   ``<base>.log.cleaned`` (with its indexes) and fsynced, the end of the range it replaces written beside it
   (``<base>.log.swap-end``). A record is kept when no
   later record of its key lies below the map's end; records without a key go; a tombstone (null value)
   goes ``delete.retention.ms`` after the first cleaning that kept it, which marks its batch with Kafka's
   delete horizon (attributes bit 6; the horizon is the batch's base timestamp, the records' timestamp
   deltas relative to it).
   Transactions, as Kafka's cleaner treats them: the batches of aborted transactions (known from the
   transaction indexes, ``CleanPlan.aborted``) put no key in the map and are removed. A marker whose
   transaction has no batch left (none seen in this cleaning, which reads the log from its start) gets a
   delete horizon (``delete.retention.ms`` from now, as a tombstone's batch does) and goes in the first
   cleaning after it (kept empty when it is the producer's last batch); any other marker stays. The aborted
   transactions of each source segment's ``.txnindex`` are carried into the cleaned segment replacing it,
   but those whose marker went. Records at or after the map's end are copied untouched. Offsets are never
   changed: a batch keeping all its records is copied as it is, one keeping none is dropped, one keeping
   some is rebuilt with the kept records' bytes under the original header (base offset, last offset
   delta, leader epoch, producer fields, base timestamp) with the same codec. The records are read in C
   (``rill.records.key_scan``; one batch's part in rill.log.cleaner_batches): a batch's keys go into the map
   and its kept records come back as byte ranges, without a Python object per record. In a thread of the
   broker's process the cleaning gives the GIL to the event loop's thread every millisecond.
3. ``Log.replace_segments`` (on the loop): when the planned segments are still in the log unchanged (no
   truncation since the planning, the same log: not one created again under the same directory name), the
   cleaned segments are renamed ``.swap``, the old ones ``.deleted`` (deleted after ``file.delete.delay.ms``;
   a FileRegion being sent keeps reading them) and the ``.swap`` files get their final names. Only the swap
   names a file ``.swap``, as Kafka's does: a crash during the cleaning, or after a cleaning the swap refused,
   leaves ``.cleaned`` files (deleted at start, whatever became of the log meanwhile); a crash during the swap
   leaves ``.swap`` files (completed at start, see rill.log.log_loader).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from crc32c_rs import crc32c

from rill.fsutil import fsync_dir, write_atomically
from rill.log.cleaner_batches import DELETE_HORIZON_MASK, MapOverflow, filter_batch, map_batch
from rill.log.cleaner_offset_map import OffsetMap
from rill.log.log_config import LogConfig
from rill.log.log_segment import CLEANED_SUFFIX, INT32_MAX, SWAP_END_SUFFIX, LogSegment, SegmentFile
from rill.log.transaction_index import AbortedTxn
from rill.records.batch import (
    ATTRIBUTES_POS,
    BATCH_HEADER_SIZE,
    CONTROL_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    TRANSACTIONAL_MASK,
    BatchHeader,
    Buffer,
    CorruptRecordError,
    crc_ok,
    parse_header,
)

if TYPE_CHECKING:
    from rill.log.log import Log

_READ_CHUNK = 1 << 20
unpack_header = HEADER_STRUCT.unpack_from
make_header = BatchHeader._make
_PENDING_LIMIT = 16 << 20  # the most of one source's cleaned batches held while deciding where they go
_YIELD_EVERY_S = 0.001  # the longest the cleaner keeps the GIL from the event loop's thread


class OffsetMapTooSmallError(Exception):
    """One batch has more distinct keys than the offset map holds."""


class CleanerAbortedError(Exception):
    """The cleaning was stopped (shutdown, the log deleted)."""


@dataclass(slots=True)
class SourceSegment:
    """A segment as the plan saw it: its file held open and its size then (``segment`` is None in the
    cleaning process, which has only the file)."""

    segment: LogSegment | None
    file: SegmentFile
    size: int
    base_offset: int
    end_offset: int  # the next segment's base offset
    index_entries: int
    name: str  # the .log file's name, for errors
    txns: list[AbortedTxn]  # its .txnindex entries


@dataclass(slots=True)
class CleanPlan:
    log: Log | None  # None in the cleaning process
    dir: Path
    config: LogConfig
    first_dirty: int
    end: int  # first uncleanable offset
    sources: list[SourceSegment]
    now_ms: int
    producer_last: dict[int, int]  # producer id -> last offset of its last batch in the log
    aborted: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # producer id -> (first, marker)

    def is_aborted(self, h: BatchHeader) -> bool:
        """Whether ``h`` is a data batch of an aborted transaction."""
        if not h.attributes & TRANSACTIONAL_MASK or h.attributes & CONTROL_MASK:
            return False
        return any(first <= h.base_offset <= last for first, last in self.aborted.get(h.producer_id, ()))


@dataclass(slots=True)
class CleanResult:
    plan: CleanPlan
    groups: list[list[SourceSegment]]
    cleaned: list[LogSegment]
    map_end: int  # the new first dirty offset
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0
    map_utilization: float = 0.0
    seconds: float = 0.0
    # transactions as the cleaning reads the log: producers whose committed / aborted batches it has read since
    # their last marker, and the offsets of the markers it removed
    committed_seen: set[int] = field(default_factory=set)
    aborted_seen: set[int] = field(default_factory=set)
    removed_markers: set[int] = field(default_factory=set)


class Throttler:
    """Keeps the cleaner's I/O at ``log.cleaner.io.max.bytes.per.second`` (shared by its threads)."""

    def __init__(self, bytes_per_second: float) -> None:
        self.rate = bytes_per_second
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._bytes = 0.0

    def maybe_throttle(self, n: int) -> None:
        if self.rate <= 0 or self.rate >= 1e300:
            return
        with self._lock:
            self._bytes += n
            now = time.monotonic()
            elapsed = now - self._start
            wait = self._bytes / self.rate - elapsed
            if elapsed > 1.0 and wait <= 0:
                self._start, self._bytes = now, 0.0
        if wait > 0:
            time.sleep(wait)


def plan_cleaning(log: Log, first_dirty: int, now_ms: int) -> CleanPlan | None:
    """The cleanable part of ``log`` (on the loop): None when nothing below the first uncleanable offset
    is dirty."""
    config = log.config
    segments = log.segments
    end = min(segments[-1].base_offset, log.last_stable_offset)
    lag = config.min_compaction_lag_ms
    sources: list[SourceSegment] = []
    for i, seg in enumerate(segments[:-1]):
        if seg.base_offset >= end:
            break
        if lag > 0 and seg.base_offset >= first_dirty and seg.largest_timestamp() > now_ms - lag:
            end = min(end, seg.base_offset)
            break
        file = seg.file
        if file is None:  # closed: the log is going away
            return None
        sources.append(
            SourceSegment(seg, file, seg.size, seg.base_offset, segments[i + 1].base_offset,
                          seg.offset_index.entries, seg.log_path.name, list(seg.txn_index.entries))
        )  # fmt: skip
    if not sources or first_dirty >= end:
        return None
    producer_last = {pid: entry.last_offset for pid, entry in log.producer_state.producers.items()}
    aborted: dict[int, list[tuple[int, int]]] = {}
    for txn in log.collect_aborted_transactions(sources[0].base_offset, end):
        aborted.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
    return CleanPlan(log, log.dir, config, first_dirty, end, sources, now_ms, producer_last, aborted)


def iter_batches(
    src: SourceSegment, throttler: Throttler | None, abort: threading.Event | None, yield_gil: bool = False
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every batch of a planned segment, CRC checked (a bad one raises CorruptRecordError). With
    ``yield_gil`` (a cleaning in a thread of the broker's process) the GIL is given up every millisecond."""
    fd, size = src.file.fd, src.size
    pos = 0
    last_yield = time.monotonic()
    while pos < size:
        if abort is not None and abort.is_set():
            raise CleanerAbortedError
        chunk = os.pread(fd, min(_READ_CHUNK, size - pos), pos)
        if throttler is not None:
            throttler.maybe_throttle(len(chunk))
        view = memoryview(chunk)
        n = len(view)
        p = 0
        while p + BATCH_HEADER_SIZE <= n:  # (inlined: this runs for every batch, twice)
            h = make_header(unpack_header(view, p))
            end = p + h.batch_length + LOG_OVERHEAD
            if h.magic != MAGIC_V2 or end < p + BATCH_HEADER_SIZE:
                raise CorruptRecordError(f"{src.name}: bad batch at position {pos + p}")
            if end > n:
                break
            if crc32c(view[p + ATTRIBUTES_POS : end]) != h.crc:
                raise CorruptRecordError(f"{src.name}: CRC mismatch at position {pos + p}")
            yield h, view[p:end]
            if yield_gil and time.monotonic() - last_yield >= _YIELD_EVERY_S:
                # let the event loop's thread take the GIL now rather than at the 5 ms switch interval
                time.sleep(0)
                last_yield = time.monotonic()
            p = end
        if p == 0:  # one batch larger than the chunk
            h = parse_header(view, 0)
            if pos + h.size > size:
                raise CorruptRecordError(f"{src.name}: batch at {pos} runs past the end")
            big = memoryview(os.pread(fd, h.size, pos))
            if len(big) != h.size or not crc_ok(big, 0, h):
                raise CorruptRecordError(f"{src.name}: CRC mismatch at position {pos}")
            yield h, big
            p = h.size
        pos += p


def build_map(
    plan: CleanPlan,
    offset_map: OffsetMap,
    throttler: Throttler | None,
    abort: threading.Event | None,
    yield_gil: bool = False,
) -> tuple[int, int]:
    """Fill ``offset_map`` from the first dirty offset on; returns (the map's end: the offset after the
    last batch it covers, bytes read)."""
    map_end = plan.first_dirty
    read = 0
    for src in plan.sources:
        if src.end_offset <= plan.first_dirty:
            continue
        for h, batch in iter_batches(src, throttler, abort, yield_gil):
            read += len(batch)
            last = h.base_offset + h.last_offset_delta
            if last < plan.first_dirty:
                continue
            if last >= plan.end:
                return map_end, read
            if not h.attributes & CONTROL_MASK and not plan.is_aborted(h):
                try:
                    map_batch(h, batch, offset_map, plan.first_dirty)
                except MapOverflow:
                    if map_end == plan.first_dirty:
                        raise OffsetMapTooSmallError(
                            f"the offset map ({offset_map.slots} keys) cannot hold the keys of one batch at"
                            f" offset {h.base_offset}: raise log.cleaner.dedupe.buffer.size"
                        ) from None
                    return map_end, read
            map_end = last + 1
    return map_end, read


def clean(
    plan: CleanPlan,
    offset_map: OffsetMap,
    throttler: Throttler | None = None,
    abort: threading.Event | None = None,
    yield_gil: bool = False,
) -> CleanResult | None:
    """Build the map and write the cleaned segments as ``.cleaned`` files (blocking: a worker thread runs
    it). None when there was nothing to clean. On any error the files written are removed. ``yield_gil``:
    give up the GIL every millisecond (a cleaning in a thread of the broker, beside its event loop)."""
    started = time.monotonic()
    offset_map.clear()
    map_end, read = build_map(plan, offset_map, throttler, abort, yield_gil)
    if map_end <= plan.first_dirty:
        return None
    result = CleanResult(plan, [], [], map_end, bytes_read=read)
    result.map_utilization = offset_map.utilization
    try:
        sources = [s for s in plan.sources if s.base_offset < map_end]
        _write_cleaned(plan, sources, offset_map, result, throttler, abort, yield_gil)
        with contextlib.suppress(OSError):
            fd = os.open(plan.dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    except BaseException:
        discard(result.cleaned)
        raise
    result.seconds = time.monotonic() - started
    return result


def discard(segments: list[LogSegment]) -> None:
    """Close and remove cleaned segments that will not be swapped in."""
    for seg in segments:
        with contextlib.suppress(OSError):
            seg.delete_files()
        with contextlib.suppress(OSError):
            os.unlink(_swap_end_path(seg))


def _swap_end_path(seg: LogSegment) -> Path:
    return seg.dir / f"{seg.base_offset:020d}.log{SWAP_END_SUFFIX}"


def forget_swap_ends(dir: Path, segments: list[LogSegment]) -> None:
    """After a swap: make the directory's renames durable, then remove the ``.swap-end`` files that a crash
    recovery would have needed (blocking: a worker thread runs it)."""
    fsync_dir(dir)
    for seg in segments:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_swap_end_path(seg))


def _remove_cleaned(plan: CleanPlan, base: int) -> None:
    for s in (".log", ".index", ".timeindex", ".txnindex"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(plan.dir / f"{base:020d}{s}{CLEANED_SUFFIX}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(plan.dir / f"{base:020d}.log{SWAP_END_SUFFIX}")


def _new_output(plan: CleanPlan, base: int) -> LogSegment:
    config = plan.config
    _remove_cleaned(plan, base)
    try:
        return _open_output(plan, config, base)
    except BaseException:  # a segment half made (its index could not be created: a full disk)
        _remove_cleaned(plan, base)
        raise


def _open_output(plan: CleanPlan, config: LogConfig, base: int) -> LogSegment:
    return LogSegment(
        plan.dir, base, index_interval_bytes=config.index_interval_bytes, max_index_size=config.segment_index_bytes,
        now_ms=plan.now_ms, roll_jitter_ms=0, active=True, suffix=CLEANED_SUFFIX,
    )  # fmt: skip


def _finish(out: LogSegment, end_offset: int) -> None:
    """Make a cleaned segment durable, with the end of the range it replaces written beside it
    (``SWAP_END_SUFFIX``: a crash during the swap is completed from the two). It keeps its ``.cleaned`` names
    until the swap, which alone may name it ``.swap``."""
    out.on_become_inactive()
    out.flush()
    write_atomically(out.log_path.with_name(out.log_path.name[: -len(CLEANED_SUFFIX)] + SWAP_END_SUFFIX),
                     b"%d" % end_offset)  # fmt: skip


def _write_cleaned(
    plan: CleanPlan,
    sources: list[SourceSegment],
    offset_map: OffsetMap,
    result: CleanResult,
    throttler: Throttler | None,
    abort: threading.Event | None,
    yield_gil: bool,
) -> None:
    """Rewrite ``sources`` into as few cleaned segments as fit: a source's kept batches join the current
    cleaned segment when they fit in it (``segment.bytes``, its indexes not full, offsets within 2**31 of its
    base), else a new cleaned segment starts at the source's base offset. Each cleaned segment is flushed when
    complete; ``result.groups`` names the sources each one replaces."""
    config = plan.config
    horizon = plan.now_ms + config.delete_retention_ms
    out: LogSegment | None = None

    def write(seg: LogSegment, buf: Buffer, h: BatchHeader) -> None:
        size = len(buf)
        seg.append([buf], [(0, h.base_offset + h.last_offset_delta, h.max_timestamp, size)])
        result.bytes_written += size
        if throttler is not None:
            throttler.maybe_throttle(size)

    def start(src: SourceSegment) -> LogSegment:
        if out is not None:
            _finish(out, result.groups[-1][-1].end_offset)
        seg = _new_output(plan, src.base_offset)
        result.cleaned.append(seg)
        result.groups.append([])
        return seg

    for src in sources:
        joins = out is not None and not out.index_full and src.end_offset - 1 - out.base_offset <= INT32_MAX
        room = min(config.segment_bytes - out.size, _PENDING_LIMIT) if out is not None and joins else -1
        pending: list[tuple[bytes, BatchHeader]] | None = [] if joins else None
        pending_size = 0
        if out is None or not joins:
            out = start(src)
        for h, batch in iter_batches(src, throttler, abort, yield_gil):
            buf = filter_batch(h, batch, offset_map, plan, horizon, result)
            if buf is None:
                continue
            nh = h if buf is batch else parse_header(buf)
            if pending is None:
                write(out, buf, nh)
                continue
            pending.append((bytes(buf), nh))
            pending_size += nh.size
            if pending_size > room:  # the source does not fit the current cleaned segment: it starts the next
                out = start(src)
                for pbuf, ph in pending:
                    write(out, pbuf, ph)
                pending = None
        for pbuf, ph in pending or ():
            write(out, pbuf, ph)
        for txn in src.txns:
            if txn.last_offset not in result.removed_markers:
                out.txn_index.append(txn)
        result.groups[-1].append(src)
    if out is not None:
        _finish(out, result.groups[-1][-1].end_offset)


__all__ = [
    "DELETE_HORIZON_MASK",
    "CleanPlan",
    "CleanResult",
    "CleanerAbortedError",
    "SourceSegment",
    "Throttler",
    "clean",
    "discard",
    "plan_cleaning",
]
