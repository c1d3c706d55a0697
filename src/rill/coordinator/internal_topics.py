"""Creating a coordinator's internal topic (``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``)
the first time it is needed, as Kafka does: not while fewer brokers than its replication factor are alive
(COORDINATOR_NOT_AVAILABLE, which clients retry), so a cluster starting up or with brokers down never gets an
internal topic with fewer replicas than configured, one it could never repair; a topic another broker created
meanwhile is taken as is.
And loading an internal topic's partition: its batches chunk by chunk (``iter_log_chunks``), the records of its
plain batches (``iter_plain_records``), and the records a coordinator cannot read (``UnreadableRecords``)."""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from typing import Any, NamedTuple

from rill.errors import ErrorCode, KafkaError
from rill.metadata.store import MetadataStore
from rill.records.record import Record, decode_batch_records, iter_batch_views

log = logging.getLogger(__name__)


async def maybe_create_internal_topic(
    metadata: MetadataStore, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
    replication_config: str,
) -> None:  # fmt: skip
    """Create ``name`` unless it exists; ``replication_config`` names the config of its replication factor."""
    if metadata.topic(name) is not None:
        return
    alive = len(metadata.brokers())
    if alive < replication_factor:
        raise KafkaError(
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            f"Number of alive brokers '{alive}' does not meet the required replication factor "
            f"'{replication_factor}' for {name} (configured via '{replication_config}')",
        )
    try:
        await metadata.create_topic(name, partitions, replication_factor, configs)
    except KafkaError as e:
        if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
        return
    log.info("Created %s with %d partitions, replication factor %d", name, partitions, replication_factor)


class UnreadableRecords:
    """The records of an internal topic's partition that its coordinator cannot read while loading it (bytes it
    did not write: a newer layout, a damaged file): each is skipped, never fatal. The first few are logged one
    by one, the rest counted in one line at the end (``done``)."""

    LOGGED = 10

    def __init__(self, where: object) -> None:
        self.where = where
        self.count = 0

    def skip(self, offset: int, why: BaseException | str) -> None:
        self.count += 1
        if self.count <= self.LOGGED:
            reason = why if isinstance(why, str) else f"{type(why).__name__}: {why}"
            log.warning("%s: skipped the record at offset %d, which cannot be read: %s", self.where, offset, reason)

    def done(self) -> None:
        if self.count > self.LOGGED:
            log.warning("%s: skipped %d records in all that cannot be read", self.where, self.count)


LOAD_CHUNK_BYTES = 1 << 20


class LoadedBatch(NamedTuple):
    base_offset: int
    attributes: int
    producer_id: int
    view: memoryview


def iter_log_chunks(plog: Any, where: object) -> Iterator[list[LoadedBatch]]:
    """The batches of a partition log from its start to its end, one list per chunk read (a caller that shares
    the loop yields between chunks). A batch whose framing cannot be read ends the walk there, logged: where the
    next batch starts is not known, and the bytes of an internal topic may be any."""
    offset: int = plog.log_start_offset
    end: int = plog.log_end_offset
    while offset < end:
        data = plog.read_bytes(offset, LOAD_CHUNK_BYTES)
        chunk: list[LoadedBatch] = []
        try:
            for batch in iter_batch_views(data):
                base_offset, attributes, last_delta = struct.unpack_from(">q13xhi", batch, 0)
                (producer_id,) = struct.unpack_from(">q", batch, 43)
                chunk.append(LoadedBatch(base_offset, attributes, producer_id, batch))
                offset = base_offset + last_delta + 1
        except KafkaError as e:
            log.error("%s: loading stopped at offset %d, the log cannot be read further: %s", where, offset, e.message)
            end = offset  # what was read before the bad framing is still given
        if not chunk:
            return
        yield chunk


def iter_plain_records(plog: Any, where: str) -> Iterator[Record]:
    """The records of a partition log's batches that are neither control batches nor transactional, in log
    order; a batch that cannot be read is logged and skipped."""
    for chunk in iter_log_chunks(plog, where):
        for batch in chunk:
            if batch.attributes & 0x30:  # control or transactional
                continue
            try:
                records: list[Record] = decode_batch_records(batch.view)
            except Exception as e:
                log.warning("Skipped an unreadable batch of %s at offset %d: %s", where, batch.base_offset, e)
                continue
            yield from records
