"""Reads over a partition's ordered segment list: fetch regions and lookups by time.

Pure functions of the segments (no state of their own); ``Log`` checks the offset bounds and
calls them.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence

from rill.common import FileRegion, TopicPartition
from rill.errors import KafkaError
from rill.log.log_segment import LogSegment
from rill.log.transaction_index import AbortedTxn
from rill.records.batch import TIMESTAMP_LOG_APPEND_TIME, BatchHeader
from rill.records.record import decode_batch_records

log = logging.getLogger(__name__)


def _base_offset(segment: LogSegment) -> int:
    return segment.base_offset


def floor_segment_index(segments: Sequence[LogSegment], offset: int) -> int:
    """Index of the last segment whose base offset is <= ``offset`` (0 when none is)."""
    return max(0, bisect.bisect_right(segments, offset, key=_base_offset) - 1)


def read_regions(
    segments: Sequence[LogSegment], offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
) -> list[FileRegion]:
    """File regions of whole batches from the batch holding ``offset``, at most ``max_bytes``
    (but the first batch whole when ``min_one_batch``), stopping before ``max_offset``."""
    return read_regions_and_end(segments, offset, max_bytes, max_offset, min_one_batch)[0]


def read_regions_and_end(
    segments: Sequence[LogSegment], offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
) -> tuple[list[FileRegion], int]:
    """``read_regions``, and an offset at or above the end of what they hold: the base offset of the batch
    after them (or the end of the segment where they stop), as Kafka's fetch upper bound."""
    regions: list[FileRegion] = []
    remaining = max_bytes
    target = offset
    upper = offset
    for i in range(floor_segment_index(segments, offset), len(segments)):
        seg = segments[i]
        found = seg.translate_offset(target)
        if found is None:
            continue
        start = found[0]
        end = seg.end_position(start, remaining, max_offset, min_one_batch and not regions)
        if end > start:
            regions.append(seg.region(start, end - start))
            remaining -= end - start
        upper = seg.next_offset
        if end < seg.size:
            header = seg.read_header(end)
            if header is not None:
                upper = header.base_offset
        if remaining <= 0 or end < seg.size:
            break
        target = seg.next_offset
    return regions, upper


def collect_aborted_transactions(segments: Sequence[LogSegment], start: int, upper: int) -> list[AbortedTxn]:
    """The aborted transactions overlapping ``[start, upper)``, from the transaction indexes of the segment
    holding ``start`` and those after it, up to the first entry whose last stable offset reaches ``upper``."""
    out: list[AbortedTxn] = []
    for i in range(floor_segment_index(segments, start), len(segments)):
        found, complete = segments[i].txn_index.collect_aborted(start, upper)
        out += found
        if complete:
            break
    return out


def find_offset_by_timestamp(
    segments: Sequence[LogSegment], timestamp: int, log_start_offset: int, tp: TopicPartition
) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record at or after log start with timestamp >= target."""
    for seg in segments:
        if seg.size == 0 or seg.max_timestamp < timestamp:
            continue
        found = seg.find_offset_by_timestamp(timestamp, log_start_offset)
        if found is None:
            continue
        pos, _, _ = found
        header = seg.read_header(pos)
        if header is None:
            continue
        if header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
            return max(header.base_offset, log_start_offset), header.max_timestamp
        try:
            records = decode_batch_records(seg.read_bytes(pos, header.size), verify_crc=False)
        except KafkaError as e:
            log.warning("%s: cannot decode batch at %d for a time lookup: %s", tp, header.base_offset, e)
            return max(header.base_offset, log_start_offset), header.max_timestamp
        for record in records:
            if record.timestamp >= timestamp and record.offset >= log_start_offset:
                return record.offset, record.timestamp
    return None


def max_timestamp_and_offset(
    segments: Sequence[LogSegment], log_start_offset: int, tp: TopicPartition
) -> tuple[int, int]:
    """``(max timestamp, offset)`` of the first record holding the largest timestamp at or after the log
    start, ``(-1, -1)`` when there is none (Kafka's MAX_TIMESTAMP): the first segment whose max timestamp is
    the largest, in it the first batch reaching that timestamp, in that batch the first record carrying it."""
    best: LogSegment | None = None
    for seg in segments:
        if seg.offset_of_max_timestamp >= log_start_offset and (best is None or seg.max_timestamp > best.max_timestamp):
            best = seg
    if best is None or best.max_timestamp < 0:
        return -1, -1
    max_ts, shallow = best.max_timestamp, best.offset_of_max_timestamp
    _, pos = best.offset_index.lookup(shallow)  # the batches before the one it names hold smaller timestamps
    while pos < best.size:
        header = best.read_header(pos)
        if header is None:
            break
        if header.max_timestamp == max_ts and header.last_offset >= log_start_offset:
            found = _first_record_at(best, pos, header, max_ts, log_start_offset, tp)
            if found is not None:
                return max_ts, found
        pos += header.size
    return max_ts, shallow  # only batches without records carry it (a cleaned log): the segment's own figure


def _first_record_at(
    seg: LogSegment, pos: int, header: BatchHeader, timestamp: int, log_start_offset: int, tp: TopicPartition
) -> int | None:
    """Offset of the batch's first record at or after the log start carrying ``timestamp``."""
    if header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME:  # every record carries the batch's time
        return max(header.base_offset, log_start_offset) if header.records_count else None
    try:
        records = decode_batch_records(seg.read_bytes(pos, header.size), verify_crc=False)
    except KafkaError as e:
        log.warning("%s: cannot decode batch at %d for a max-timestamp lookup: %s", tp, header.base_offset, e)
        return max(header.last_offset, log_start_offset)
    for record in records:
        if record.timestamp == timestamp and record.offset >= log_start_offset:
            return record.offset
    return None
