"""Batch reading: ``spark.read.format("rill")``.

The driver resolves the offset ranges when the reader is made (Spark pickles the reader before it asks for
partitions), narrows them with pushed filters on ``partition``, ``offset`` and ``timestamp``, and splits
large ranges. Each Spark task then fetches its range straight from the partition's leader with the blocking
client and yields Arrow batches.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from rill.client.client import KafkaClient
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.spark.arrow import ArrowBatcher
from rill.spark.offsets import resolve_ending, resolve_starting
from rill.spark.options import OffsetRange, SourceOptions, split_ranges

log = logging.getLogger(__name__)

FETCH_MAX_WAIT_MS = 500
RETRY_BACKOFF_S = 0.05
MAX_FETCH_BYTES = 1 << 30


class RangePartition(InputPartition):
    """What one Spark task reads: an offset range plus the options it needs on the executor."""

    def __init__(self, index: int, rng: OffsetRange, opts: SourceOptions) -> None:
        super().__init__(index)
        self.range = rng
        self.opts = opts


class DataLossError(KafkaError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, message)


def report_data_loss(opts: SourceOptions, message: str) -> None:
    """Spark's Kafka source rule: fail with the message, or log it and go on when failOnDataLoss=false."""
    if opts.fail_on_data_loss:
        raise DataLossError(
            message + ". Some data may have been lost because they are not available any more (deleted by "
            "retention or DeleteRecords, compacted, or the topic was deleted or recreated). If you want your "
            "query to continue anyway, set failOnDataLoss=false."
        )
    log.warning("%s; continuing (failOnDataLoss=false)", message)


def read_range(
    rng: OffsetRange,
    opts: SourceOptions,
    client: KafkaClient | None = None,
    *,
    rows_per_batch: int = 32768,
) -> Iterator[pa.RecordBatch]:
    """Every record of ``rng`` as Arrow batches (``_read_binary``), with keys and values decoded through
    the schema registry when the options ask for typed columns (``rill.spark.typed``)."""
    batches = _read_binary(rng, opts, client, rows_per_batch=rows_per_batch)
    if opts.typed is None:
        yield from batches
        return
    from rill.spark.typed import BatchDecoder, base_spark_schema

    decode = BatchDecoder(opts.typed, base_spark_schema(opts.include_headers))
    for batch in batches:
        yield decode(batch)


def _read_binary(
    rng: OffsetRange,
    opts: SourceOptions,
    client: KafkaClient | None = None,
    *,
    rows_per_batch: int = 32768,
) -> Iterator[pa.RecordBatch]:
    """Every record of ``rng`` as Arrow batches, in offset order, each offset at most once.

    The range was resolved on the driver from offsets the broker had acknowledged, so the read goes on until
    ``rng.until``: a fetch that brings nothing (the broker is slow, a new leader's high watermark still
    catches up) is retried, and only after ``opts.poll_timeout_ms`` without progress does the read end,
    as data loss when the log now ends before the range (``failOnDataLoss``) or as an error otherwise. A
    short read never passes silently."""
    own = client is None
    kc = opts.client() if client is None else client
    batcher = ArrowBatcher(
        rng.topic, rng.partition, include_headers=opts.include_headers, rows_per_batch=rows_per_batch
    )
    tp = rng.tp
    offset = rng.start
    max_bytes = 8 << 20
    patience = opts.poll_timeout_ms / 1000
    deadline = time.monotonic() + patience
    try:
        while offset < rng.until:
            fetched = kc.fetch(
                {tp: offset}, max_wait_ms=FETCH_MAX_WAIT_MS, partition_max_bytes=max_bytes, max_bytes=max_bytes
            )[tp]
            if fetched.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                earliest = kc.earliest_offsets([tp])[tp]
                if earliest > offset:
                    report_data_loss(opts, f"cannot read {tp} from offset {offset}: the log starts at {earliest}")
                    offset = min(earliest, rng.until)
                    deadline = time.monotonic() + patience
                    continue
                if time.monotonic() < deadline:
                    time.sleep(RETRY_BACKOFF_S)
                    continue
                latest = kc.latest_offsets([tp])[tp]
                report_data_loss(opts, f"{tp} ends at {latest}, before the requested range ending at {rng.until}")
                break
            if fetched.error != ErrorCode.NONE:
                if fetched.error.retriable and time.monotonic() < deadline:
                    time.sleep(RETRY_BACKOFF_S)
                    continue
                raise KafkaError(fetched.error, f"fetch {tp} at {offset}: {fetched.error.name}")
            if fetched.log_start_offset > offset:
                report_data_loss(opts, f"{tp} offsets {offset}..{fetched.log_start_offset - 1} were deleted")
            next_offset = batcher.add_fetched(fetched.records, offset, rng.until)
            if next_offset > offset:
                offset = next_offset
                deadline = time.monotonic() + patience
                if batcher.full():
                    yield from batcher.drain()
                continue
            if fetched.records and fetched.high_watermark > offset and max_bytes < MAX_FETCH_BYTES:
                max_bytes *= 2  # a batch larger than the fetch size: ask for more
                continue
            if time.monotonic() < deadline:
                # Nothing came back although the driver saw the range acknowledged: retry.
                time.sleep(RETRY_BACKOFF_S)
                continue
            if fetched.high_watermark <= offset:
                # The log ends before the range does (it was truncated or recreated).
                report_data_loss(opts, f"{tp} has no records from {offset} to {rng.until}")
                break
            raise KafkaError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"no records of {tp} at offset {offset} within {patience:.0f}s although the high watermark "
                f"is {fetched.high_watermark} (range ends at {rng.until})",
            )
        yield from batcher.drain()
    finally:
        if own:
            kc.close()


# -- filter pushdown ---------------------------------------------------------------------------------------


def _ts_ms(value: Any) -> int | None:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(value.timestamp() * 1000)
    return None


def narrow_ranges(ranges: list[OffsetRange], filters: Sequence[Filter], client: KafkaClient) -> list[OffsetRange]:
    """Shrink ranges using filters on ``partition``, ``offset`` and (lower bounds of) ``timestamp``. All
    filters are still handed back to Spark, which evaluates them on the rows: narrowing only skips data."""
    out = list(ranges)
    for f in filters:
        col: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
        if len(col) != 1:
            continue
        name = col[0]
        value = getattr(f, "value", None)
        if name == "partition":
            if isinstance(f, EqualTo):
                out = [r for r in out if r.partition == value]
            elif isinstance(f, In):
                out = [r for r in out if r.partition in set(value or ())]
        elif name == "offset" and isinstance(value, int):
            if isinstance(f, EqualTo):
                lo, hi = value, value + 1
            elif isinstance(f, GreaterThan):
                lo, hi = value + 1, None
            elif isinstance(f, GreaterThanOrEqual):
                lo, hi = value, None
            elif isinstance(f, LessThan):
                lo, hi = None, value
            elif isinstance(f, LessThanOrEqual):
                lo, hi = None, value + 1
            else:
                continue
            out = [
                OffsetRange(
                    r.topic,
                    r.partition,
                    r.start if lo is None else max(r.start, lo),
                    r.until if hi is None else min(r.until, hi),
                )
                for r in out
            ]
        elif name == "timestamp" and isinstance(f, GreaterThan | GreaterThanOrEqual | EqualTo):
            ts = _ts_ms(value)
            if ts is None:
                continue
            # ListOffsets answers the first offset whose timestamp >= ts: every earlier record is older.
            found = client.list_offsets({r.tp: ts for r in out})
            narrowed = []
            for r in out:
                hit = found.get(r.tp)
                start = r.until if hit is None or hit.offset < 0 else max(r.start, min(hit.offset, r.until))
                narrowed.append(OffsetRange(r.topic, r.partition, start, r.until))
            out = narrowed
    return [r for r in out if r.size > 0]


class RillBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        opts.check_batch()
        self.opts = opts = opts.resolve_typed()
        with opts.client() as client:
            tps = opts.topic_partitions(client)
            starts = resolve_starting(client, opts, tps, default="earliest")
            ends = resolve_ending(client, opts, tps)
            earliest = client.earliest_offsets(tps)
        self.ranges: list[OffsetRange] = []
        for tp in tps:
            start, until = starts[tp], ends[tp]
            if start < earliest[tp]:
                report_data_loss(opts, f"cannot read {tp} from offset {start}: the log starts at {earliest[tp]}")
                # What is left of the range, if anything (a range deleted whole reads nothing).
                start = min(earliest[tp], until)
            if until < start:
                raise KafkaError(
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"{tp}: ending offset {until} is before starting offset {start}",
                )
            self.ranges.append(OffsetRange(tp.topic, tp.partition, start, until))

    def partitions(self) -> Sequence[InputPartition]:
        pieces = split_ranges(
            self.ranges,
            min_partitions=self.opts.min_partitions,
            max_records=self.opts.max_records_per_partition,
        )
        return [RangePartition(i, r, self.opts) for i, r in enumerate(pieces)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RangePartition):  # Spark passes a placeholder when there are no ranges
            yield from read_range(partition.range, partition.opts)


class RillFilteringBatchReader(RillBatchReader):
    """The batch reader with filter pushdown, used with the option ``pushFilters=true`` (Spark refuses a
    reader that implements ``pushFilters`` unless ``spark.sql.python.filterPushdown.enabled`` is true)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        with self.opts.client() as client:
            self.ranges = narrow_ranges(self.ranges, filters, client)
        return filters


__all__ = [
    "RangePartition",
    "RillBatchReader",
    "RillFilteringBatchReader",
    "TopicPartition",
    "narrow_ranges",
    "read_range",
]
