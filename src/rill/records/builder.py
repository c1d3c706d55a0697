"""Build v2 record batches, and recompress existing ones.

A built batch is the 61-byte header (layout in ``rill.records.batch``) followed by the records, compressed
as a whole with the codec in attributes bits 0-2. ``baseTimestamp`` is the first record's timestamp,
``maxTimestamp`` the largest; record ``i`` gets offset delta ``i``. The CRC32C covers bytes 21 to the end.
"""

from __future__ import annotations

from collections.abc import Sequence

from crc32c_rs import crc32c

from rill.errors import ErrorCode, KafkaError
from rill.records import compression
from rill.records.batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    check_framing,
    parse_header,
)
from rill.records.record import CRC_START, HEADER, HEADER_SIZE, Buffer, Record, encode_record


def pack_batch(
    body: bytes,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    count: int,
) -> bytes:
    header = bytearray(
        HEADER.pack(
            base_offset,
            HEADER_SIZE - LOG_OVERHEAD + len(body),
            partition_leader_epoch,
            2,
            0,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    crc = crc32c(body, crc32c(memoryview(header)[CRC_START:]))
    header[17:21] = int(crc).to_bytes(4, "big")
    return bytes(header) + body


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_type: int = 0,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
) -> bytes:
    """One batch holding ``records`` in order (their ``offset`` fields are ignored: deltas are 0, 1, ...)."""
    if not records:
        raise ValueError("a record batch holds at least one record")
    base_ts = records[0].timestamp
    max_ts = base_ts
    raw = bytearray()
    for i, r in enumerate(records):
        ts = r.timestamp
        if ts > max_ts:
            max_ts = ts
        encode_record(raw, i, ts - base_ts, r.key, r.value, r.headers)
    attributes = (compression & COMPRESSION_MASK) | (TIMESTAMP_TYPE_MASK if timestamp_type else 0)
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    body = _compress(compression, raw)
    return pack_batch(
        body,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=len(records) - 1,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        count=len(records),
    )


def _compress(codec: int, raw: Buffer) -> bytes:
    # build_batch's ``compression`` argument hides the module there
    return compression.compress(codec, raw)


def recompress_batch(
    batch: Buffer, codec: int, level: int | None = None, limit: int = compression.DECOMPRESSED_LIMIT
) -> bytes:
    """The same batch (offsets, timestamps, producer fields, records) compressed with ``codec`` at
    ``level`` (None: the codec's default).

    Record bytes are carried over untouched, only the records section is re-encoded and the CRC
    recomputed, so the caller checks the CRC first. A batch already using ``codec`` is returned as
    is; control batches are never recompressed. A batch whose records decompress to more than
    ``limit`` bytes raises ``KafkaError(MESSAGE_TOO_LARGE)`` before more is held.
    """
    view = memoryview(batch)
    h = parse_header(view)
    check_framing(view, 0, h)
    size, attributes = h.size, h.attributes
    current = attributes & COMPRESSION_MASK
    if current == codec or attributes & CONTROL_MASK:
        return bytes(view[:size])
    raw = bytearray()
    for piece in compression.decompress_chunks(current, view[HEADER_SIZE:size], 1 << 20, limit):
        raw += piece
        if len(raw) > limit:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"the records of a batch recompressed for the topic's compression.type take more than {limit}"
                " bytes decompressed",
            )
    return pack_batch(
        compression.compress(codec, raw, level),
        base_offset=h.base_offset,
        partition_leader_epoch=h.partition_leader_epoch,
        attributes=(attributes & ~COMPRESSION_MASK) | (codec & COMPRESSION_MASK),
        last_offset_delta=h.last_offset_delta,
        base_timestamp=h.base_timestamp,
        max_timestamp=h.max_timestamp,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        count=h.records_count,
    )
