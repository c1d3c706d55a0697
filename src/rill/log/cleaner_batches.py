"""One batch through a cleaning (see rill.log.log_cleaner): its keys into the offset map, and the batch as
it goes into the cleaned segment.

The records are read by ``rill.records.key_scan`` (compiled, with a pure-Python twin giving the same
answers): ``map_keys`` puts a batch's keys in the map, ``kept_records`` says which records stay, as byte
ranges of the records section. A batch keeping all its records is copied as it is; one keeping some is
rebuilt from the kept records' bytes, copied as they are (their deltas stay valid under the same base
offset and base timestamp), under the original header with the same codec and a new CRC. Only a batch
getting a delete horizon has its records encoded again (their timestamp deltas change).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from crc32c_rs import crc32c

from rill.log.cleaner_offset_map import OffsetMap
from rill.records import compression, key_scan
from rill.records.batch import (
    ATTRIBUTES_POS,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    Buffer,
    CorruptRecordError,
)
from rill.records.control import marker_or_none
from rill.records.record import decode_records, encode_record, read_varint

if TYPE_CHECKING:
    from rill.log.log_cleaner import CleanPlan, CleanResult

DELETE_HORIZON_MASK = 0x40  # attributes bit 6: baseTimestamp holds the time the batch's tombstones may go


class MapOverflow(Exception):
    """The keys of a batch do not fit in what is left of the offset map."""


def records_section(h: BatchHeader, batch: Buffer) -> Buffer:
    """The batch's records, decompressed (uncompressed ones as a view of the batch)."""
    body = (batch if isinstance(batch, memoryview) else memoryview(batch))[BATCH_HEADER_SIZE:]
    codec = h.attributes & COMPRESSION_MASK
    return compression.decompress(codec, body) if codec else body


def map_batch(h: BatchHeader, batch: Buffer, offset_map: OffsetMap, first_dirty: int) -> None:
    """Put the batch's keys at or after ``first_dirty`` in ``offset_map``; MapOverflow (the map unchanged)
    when they do not all fit."""
    data = records_section(h, batch)
    try:
        put = key_scan.map_keys(offset_map.table, data, h.records_count, h.base_offset, first_dirty)
    except ValueError as e:
        raise CorruptRecordError(f"batch at offset {h.base_offset}: {e}") from None
    if put < 0:
        raise MapOverflow


class RecordInfo(NamedTuple):
    start: int  # the record's bytes in the decompressed records section
    end: int
    offset_delta: int
    timestamp_delta: int


def walk_records(h: BatchHeader, data: Buffer) -> list[RecordInfo]:
    """Where each record of a records section (decompressed) lies (for the batches whose records are
    encoded again: those given a delete horizon)."""
    out: list[RecordInfo] = []
    size = len(data)
    data = bytes(data)
    p = 0
    try:
        for _ in range(h.records_count):
            length, q = read_varint(data, p)
            end = q + length
            if length < 6 or end > size:
                raise CorruptRecordError(f"batch at offset {h.base_offset}: bad record length {length}")
            ts_delta, q = read_varint(data, q + 1)
            off_delta, q = read_varint(data, q)
            out.append(RecordInfo(p, end, off_delta, ts_delta))
            p = end
    except IndexError:
        raise CorruptRecordError(f"batch at offset {h.base_offset}: truncated record") from None
    return out


def empty_batch(h: BatchHeader) -> bytes:
    """The batch's header with no records (uncompressed): its offsets, epoch and producer fields kept."""
    attributes = h.attributes & ~COMPRESSION_MASK
    header = bytearray(
        HEADER_STRUCT.pack(
            h.base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD, h.partition_leader_epoch, MAGIC_V2, 0, attributes,
            h.last_offset_delta, h.base_timestamp, h.max_timestamp, h.producer_id, h.producer_epoch,
            h.base_sequence, 0,
        )
    )  # fmt: skip
    header[17:21] = int(crc32c(memoryview(header)[ATTRIBUTES_POS:])).to_bytes(4, "big")
    return bytes(header)


def _batch(h: BatchHeader, raw: Buffer, count: int, max_ts_delta: int, base_ts: int, attributes: int) -> bytes:
    """``count`` records (``raw``, uncompressed) under ``h``'s header with the given base timestamp and
    attributes, compressed with the batch's codec, the CRC computed."""
    body = compression.compress(h.attributes & COMPRESSION_MASK, raw)
    max_ts = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else h.base_timestamp + max_ts_delta
    header = bytearray(
        HEADER_STRUCT.pack(
            h.base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body), h.partition_leader_epoch, MAGIC_V2, 0,
            attributes, h.last_offset_delta, base_ts, max_ts, h.producer_id, h.producer_epoch,
            h.base_sequence, count,
        )
    )  # fmt: skip
    crc = crc32c(body, crc32c(memoryview(header)[ATTRIBUTES_POS:]))
    header[17:21] = int(crc).to_bytes(4, "big")
    return bytes(header) + body


def rebuild_batch(h: BatchHeader, data: Buffer, spans: list[int], count: int, max_ts_delta: int) -> bytes:
    """The batch holding only the records whose bytes ``spans`` names ([start, end, ...] in the records
    section ``data``), copied as they are, under the same header (base offset, last offset delta, epoch,
    producer fields, base timestamp)."""
    view = memoryview(data)
    raw = b"".join([view[spans[i] : spans[i + 1]] for i in range(0, len(spans), 2)])
    return _batch(h, raw, count, max_ts_delta, h.base_timestamp, h.attributes)


def horizon_batch(h: BatchHeader, data: Buffer, kept: list[RecordInfo], horizon: int) -> bytes:
    """The batch holding the ``kept`` records with Kafka's delete horizon: the flag in its attributes, the
    horizon as its base timestamp, and every record's timestamp delta made relative to it."""
    out = bytearray()
    for r in kept:
        (rec,) = decode_records(bytes(data[r.start : r.end]), 1, h.base_offset, h.base_timestamp)
        encode_record(out, r.offset_delta, rec.timestamp - horizon, rec.key, rec.value, rec.headers)
    max_ts_delta = max(r.timestamp_delta for r in kept)
    return _batch(h, out, len(kept), max_ts_delta, horizon, h.attributes | DELETE_HORIZON_MASK)


def filter_batch(
    h: BatchHeader, batch: memoryview, offset_map: OffsetMap, plan: CleanPlan, horizon: int, result: CleanResult
) -> Buffer | None:
    """The batch as it goes into the cleaned segment: itself, rebuilt with fewer records, or None.

    Tombstones go once the batch's delete horizon has passed; a batch keeping tombstones that has no
    horizon yet gets one (``now`` + ``delete.retention.ms``), as Kafka's cleaner marks it. A producer's
    last batch in the log stays even when none of its records does, as an empty batch (Kafka's rule: its
    producer id, epoch and sequence numbers are what a restart or a follower rebuilds the producer's state
    from, so a retried batch is still known as a duplicate)."""
    map_end = result.map_end
    if h.base_offset >= map_end:
        return batch
    if h.attributes & CONTROL_MASK:
        return _filter_marker(h, batch, plan, horizon, result)
    aborted = plan.is_aborted(h)
    if h.attributes & TRANSACTIONAL_MASK and h.producer_id >= 0:
        (result.aborted_seen if aborted else result.committed_seen).add(h.producer_id)
    count = h.records_count
    result.records_read += count
    spans: list[int]
    max_ts_delta: int | None
    if aborted:
        kept, spans, tombstones, max_ts_delta = 0, [], False, None
    else:
        has_horizon = bool(h.attributes & DELETE_HORIZON_MASK)
        retain_deletes = not has_horizon or plan.now_ms < h.base_timestamp
        data = records_section(h, batch)
        try:
            kept, spans, tombstones, max_ts_delta = key_scan.kept_records(
                offset_map.table, data, count, h.base_offset, map_end, retain_deletes
            )
        except ValueError as e:
            raise CorruptRecordError(f"batch at offset {h.base_offset}: {e}") from None
    result.records_removed += count - kept
    if not kept:
        if h.producer_id >= 0 and plan.producer_last.get(h.producer_id) == h.base_offset + h.last_offset_delta:
            return batch if not count else empty_batch(h)
        return None
    needs_horizon = tombstones and not h.attributes & DELETE_HORIZON_MASK
    if kept == count and not needs_horizon:
        return batch
    assert max_ts_delta is not None  # some records were kept
    if not needs_horizon:
        return rebuild_batch(h, data, spans, kept, max_ts_delta)
    starts = {spans[i] for i in range(0, len(spans), 2)}
    ends = {spans[i] for i in range(1, len(spans), 2)}
    inside = False
    chosen: list[RecordInfo] = []
    for r in walk_records(h, data):  # the records within the spans: those kept
        inside = inside or r.start in starts
        if inside:
            chosen.append(r)
        inside = inside and r.end not in ends
    return horizon_batch(h, data, chosen, horizon)


def _filter_marker(
    h: BatchHeader, batch: memoryview, plan: CleanPlan, horizon: int, result: CleanResult
) -> Buffer | None:
    """A control batch as it goes into the cleaned segment (Kafka's rule, see rill.log.log_cleaner)."""
    marker = marker_or_none(batch) if h.producer_id >= 0 and h.records_count else None
    if marker is None:
        return batch  # another kind of control record, or one already emptied
    seen = result.committed_seen if marker.commit else result.aborted_seen
    if h.producer_id in seen:
        seen.discard(h.producer_id)
        return batch  # its transaction still has batches
    if not h.attributes & DELETE_HORIZON_MASK:
        data = records_section(h, batch)
        return horizon_batch(h, data, walk_records(h, data), horizon)
    if plan.now_ms < h.base_timestamp:
        return batch
    result.removed_markers.add(h.base_offset)
    if plan.producer_last.get(h.producer_id) == h.base_offset + h.last_offset_delta:
        return empty_batch(h)
    return None
