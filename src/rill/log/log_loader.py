"""Opening a partition directory: clean-up of leftovers, segment loading, crash recovery, and the
producer state rebuilt from snapshots and the batches after them.

After a clean shutdown every segment is loaded from its (trimmed) indexes. After a crash,
every segment from the one holding the recovery point onwards is re-validated batch by batch
(length, magic, CRC32C, increasing offsets) with its indexes rebuilt; the log is cut at the
first invalid byte and any later segment is deleted. A missing or inconsistent index is rebuilt
in either case. Files whose names do not parse are left alone with a warning.

The log cleaner's leftovers are handled as Kafka's loader does: ``.cleaned`` files (a cleaning that did not
finish, or one the swap refused: the log was truncated, or its directory is now another log's) are deleted;
a ``<base>.log.swap`` file (a cleaned segment complete on disk, named so by a swap the crash interrupted)
replaces every segment whose base offset lies in the range it was made from, and takes its final name (its
indexes are rebuilt). That range ends at the offset in its ``<base>.log.swap-end`` file (written before the
``.swap`` name), or, for a swap without one, after the swap's last batch.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from rill.log.leader_epoch_cache import LeaderEpochFileCache
from rill.log.log_config import LogConfig
from rill.log.log_segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_END_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)
from rill.log.producer_state import ProducerStateManager
from rill.log.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn
from rill.records.batch import BATCH_HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2, parse_header
from rill.records.control import marker_or_none

log = logging.getLogger(__name__)

_LEFTOVER_SUFFIXES = (DELETED_SUFFIX, ".tmp", CLEANED_SUFFIX, SWAP_SUFFIX, SWAP_END_SUFFIX)
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


@dataclass(frozen=True, slots=True)
class LoadResult:
    segments: list[LogSegment]
    recovered_segments: int
    truncated_bytes: int
    recovered_from: int | None = None  # base offset of the first segment recovered (its txn index is rebuilt)


def parse_base_offset(name: str, suffix: str) -> int | None:
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def _swap_last_offset(path: Path) -> int:
    """The last offset of the whole batches in a ``.swap`` segment file (-1 when it has none)."""
    last = -1
    with path.open("rb") as f:
        pos = 0
        size = os.fstat(f.fileno()).st_size
        while pos + BATCH_HEADER_SIZE <= size:
            f.seek(pos)
            raw = f.read(BATCH_HEADER_SIZE)
            header = parse_header(raw)
            if header.magic != MAGIC_V2 or header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
                break
            if pos + header.size > size:
                break
            last = header.last_offset
            pos += header.size
    return last


def complete_swaps(dir: Path) -> int:
    """Finish the cleaner's swaps a crash interrupted; returns how many."""
    swaps = sorted(
        (base, path)
        for path in dir.glob(f"*{LOG_SUFFIX}{SWAP_SUFFIX}")
        if (base := parse_base_offset(path.name[: -len(SWAP_SUFFIX)], LOG_SUFFIX)) is not None
    )
    for base, path in swaps:
        end = max(_swap_last_offset(path), base) + 1
        end_file = dir / (segment_file_name(base, LOG_SUFFIX) + SWAP_END_SUFFIX)
        with contextlib.suppress(FileNotFoundError, ValueError):
            end = max(end, int(end_file.read_text()))
        for old in dir.glob(f"*{LOG_SUFFIX}"):
            old_base = parse_base_offset(old.name, LOG_SUFFIX)
            if old_base is not None and base <= old_base < end:
                log.info("Deleting segment %s, replaced by the cleaned %s", old.name, path.name)
                for suffix in _SEGMENT_SUFFIXES:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(dir / segment_file_name(old_base, suffix))
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):  # rebuilt from the log file
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dir / (segment_file_name(base, suffix) + SWAP_SUFFIX))
        with contextlib.suppress(FileNotFoundError):  # the cleaned segment's aborted transactions
            os.rename(
                dir / (segment_file_name(base, TXN_INDEX_SUFFIX) + SWAP_SUFFIX),
                dir / segment_file_name(base, TXN_INDEX_SUFFIX),
            )
        os.rename(path, dir / segment_file_name(base, LOG_SUFFIX))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(end_file)
        log.info("Completed the swap of the cleaned segment %s", path.name)
    return len(swaps)


def _clean_leftovers(dir: Path) -> list[int]:
    """Remove files of an earlier run that no longer count; return the sorted segment base offsets."""
    bases: set[int] = set()
    index_files: list[tuple[int, Path]] = []
    for path in dir.iterdir():
        name = path.name
        if not path.is_file():
            continue
        if name.endswith(_LEFTOVER_SUFFIXES):
            log.info("Removing leftover file %s", path)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            continue
        if name.endswith(LOG_SUFFIX):
            base = parse_base_offset(name, LOG_SUFFIX)
            if base is None:
                log.warning("Skipping %s: not a segment file name (20-digit base offset)", path)
            else:
                bases.add(base)
        elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)):
            suffix = next(s for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX) if name.endswith(s))
            base = parse_base_offset(name, suffix)
            if base is None:
                log.warning("Skipping %s: not an index file name", path)
            else:
                index_files.append((base, path))
    for base, path in index_files:
        if base not in bases:
            log.info("Removing index %s without a segment", path)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return sorted(bases)


def load_segments(
    dir: Path,
    config: LogConfig,
    *,
    recovery_point: int,
    had_clean_shutdown: bool,
    now_ms: int,
) -> LoadResult:
    complete_swaps(dir)
    bases = _clean_leftovers(dir)
    segments: list[LogSegment] = []
    recovered = 0
    recovered_from: int | None = None
    truncated_total = 0
    try:
        for i, base in enumerate(bases):
            active = i == len(bases) - 1
            indexes_present = all(
                (dir / segment_file_name(base, s)).exists() for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
            )
            segment = LogSegment(
                dir,
                base,
                index_interval_bytes=config.index_interval_bytes,
                max_index_size=config.segment_index_bytes,
                now_ms=now_ms,
                roll_jitter_ms=config.random_segment_jitter(),
                active=active,
            )
            segments.append(segment)
            next_base = bases[i + 1] if not active else None
            needs_recovery = not had_clean_shutdown and (next_base is None or next_base > recovery_point)
            if not needs_recovery and indexes_present and segment.load():
                continue
            if not needs_recovery:
                log.warning("Rebuilding the indexes of %s (missing or inconsistent)", segment.log_path)
            else:
                log.info(
                    "Recovering unflushed segment %s (recovery point %d)%s",
                    segment.log_path,
                    recovery_point,
                    "" if indexes_present else "; its missing indexes are rebuilt",
                )
            recovered += 1
            if recovered_from is None:
                recovered_from = base
            truncated = segment.recover()
            if not active:
                segment.on_become_inactive()
            if truncated:
                truncated_total += truncated
                log.warning(
                    "Recovery truncated %d invalid bytes from %s at position %d (next offset %d)",
                    truncated,
                    segment.log_path,
                    segment.size,
                    segment.next_offset,
                )
                _delete_after(dir, bases[i + 1 :])
                segment.on_become_active(config.segment_index_bytes)
                break
    except BaseException:
        for s in segments:
            s.close()
        raise
    return LoadResult(segments, recovered, truncated_total, recovered_from)


def _delete_after(dir: Path, bases: list[int]) -> None:
    for base in bases:
        log.warning("Deleting segment %d, which follows a truncated one", base)
        for suffix in _SEGMENT_SUFFIXES:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dir / segment_file_name(base, suffix))


def rebuild_producer_state(
    psm: ProducerStateManager,
    epochs: LeaderEpochFileCache,
    segments: list[LogSegment],
    log_end_offset: int,
    reindex_from: int | None = None,
) -> None:
    """Load the newest producer snapshot at or below ``log_end_offset``, then replay the batches after
    it (producer ids, sequences, transactions, and leader epochs not yet in the epoch cache).

    With ``reindex_from`` (the base offset of the first segment a crash recovery re-read), the replay
    starts at a snapshot at or below it and writes the aborted transactions of the segments from there
    on into their (reset) transaction indexes, as Kafka's recovery of a segment does."""
    upto = log_end_offset if reindex_from is None else min(log_end_offset, reindex_from)
    start = psm.load_latest_snapshot(upto)
    start = max(start, segments[0].base_offset)
    psm.map_end_offset = start
    if reindex_from is not None:
        for seg in segments:
            if seg.base_offset >= reindex_from:
                seg.txn_index.reset()  # the later ones too: they are indexed again below
    for seg in segments:
        if seg.next_offset <= start or seg.size == 0:
            continue
        reindex = reindex_from is not None and seg.base_offset >= reindex_from
        found = seg.translate_offset(start)
        pos = found[0] if found else seg.size
        while pos < seg.size:
            header = seg.read_header(pos)
            if header is None:
                break
            marker = None
            if header.is_control and header.producer_id >= 0:
                marker = marker_or_none(seg.read_bytes(pos, header.size))
            completed = psm.replay(header, marker)
            if completed is not None:
                if completed.is_aborted and reindex:
                    seg.txn_index.append(AbortedTxn(*completed[:3], psm.last_stable_offset(completed)))
                psm.complete_txn(completed)
            if header.partition_leader_epoch > epochs.latest_epoch:
                epochs.assign(header.partition_leader_epoch, header.base_offset)
            pos += header.size
    psm.map_end_offset = log_end_offset
