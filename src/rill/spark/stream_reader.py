"""Streaming reads: ``spark.readStream.format("rill")``.

Spark keeps the offsets of every micro-batch in its checkpoint as ``{"topic": {"partition": offset}}``
(the next offset to read, exclusive end of the batch). ``partitions(start, end)`` is a pure function of
those two offsets (plus, for a partition that is new in ``end``, its earliest offset), so a micro-batch
replayed after a restart or a killed driver reads exactly the same records, and Spark's file sink turns
that into exactly-once output.

Admission control: ``maxOffsetsPerTrigger`` (``ReadMaxRows``) is shared between partitions in proportion to
their backlog (a new partition's backlog counts from its earliest offset), as Spark's Kafka source does.
``minOffsetsPerTrigger`` holds a batch back while fewer new offsets are available, for at most
``maxTriggerDelay`` (default 15m) after the previous batch, as Spark's Kafka source does.
``Trigger.AvailableNow`` reads up to the offsets that were latest when the query started, then stops.

A partition whose latest offset is below the offset the query already reached (the topic was deleted and
recreated, the log truncated) is data loss, as in Spark: after ``fetchOffset.numRetries`` looks at the
latest offsets, the batch ends at the partition's new latest offset, and planning it fails the query
(``failOnDataLoss=true``) or logs a warning and reads nothing of that partition, so that the next batch
goes on from the new offsets.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from rill.client.client import KafkaClient
from rill.common import TopicPartition
from rill.spark.offsets import resolve_starting
from rill.spark.options import OffsetRange, OptionError, SourceOptions, offsets_from_json, offsets_to_json, split_ranges
from rill.spark.reader import RangePartition, read_range, report_data_loss

log = logging.getLogger(__name__)


def rate_limit(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    limit: int,
    new_earliest: Mapping[TopicPartition, int] | None = None,
) -> dict[TopicPartition, int]:
    """Spread ``limit`` offsets over partitions in proportion to their backlog (every partition with a
    backlog moves by at least one offset). A partition missing from ``start`` (new since the last batch)
    starts at its offset in ``new_earliest``."""
    first = {**(new_earliest or {}), **start}
    backlog = {tp: max(latest[tp] - first.get(tp, latest[tp]), 0) for tp in latest}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    out: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        begin = first.get(tp, end)
        size = backlog[tp]
        if size == 0:
            out[tp] = end
            continue
        share = limit * size / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(begin + step, end)
    return out


class RillStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions, check: Callable[[SourceOptions], None] | None = None) -> None:
        # Options a stream cannot take are refused by the first call Spark makes (getDefaultReadLimit or
        # initialOffset), not here: PySpark's runner hides an error raised while it makes the reader. So is
        # a typed read whose registry lookup (or ``check`` of the schema it gives) failed.
        self._setup_error: OptionError | None = None
        try:
            opts = opts.resolve_typed()
            if check is not None:
                check(opts)
        except OptionError as e:
            self._setup_error = e
        self.opts = opts
        self._available_now: dict[TopicPartition, int] | None = None
        self._last_trigger: float | None = None  # monotonic time of the last batch minOffsetsPerTrigger let run

    # -- offsets (driver) --------------------------------------------------------------------------------

    def _check(self) -> None:
        if self._setup_error is not None:
            raise self._setup_error
        self.opts.check_stream()

    def initialOffset(self) -> dict[str, dict[str, int]]:
        self._check()
        with self.opts.client() as client:
            tps = self.opts.topic_partitions(client)
            return offsets_to_json(resolve_starting(client, self.opts, tps, default="latest"))

    def getDefaultReadLimit(self) -> ReadLimit:
        self._check()
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with self.opts.client() as client:
            tps = self.opts.topic_partitions(client)
            self._available_now = client.latest_offsets(tps)

    def _latest(self, client: KafkaClient, known: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Latest offsets (capped for AvailableNow). Latest offsets below ``known`` ones are asked for again
        (a moment of stale metadata must not look like data loss), as Spark's Kafka source does."""
        for attempt in range(1, self.opts.offset_fetch_attempts + 1):
            latest = client.latest_offsets(self.opts.topic_partitions(client))
            behind = {str(tp): (known[tp], o) for tp, o in latest.items() if tp in known and o < known[tp]}
            if not behind or attempt == self.opts.offset_fetch_attempts:
                break
            log.warning("latest offsets below those already reached ((reached, latest) by partition): %s", behind)
            time.sleep(self.opts.offset_fetch_interval_ms / 1000)
        if self._available_now is not None:
            latest = {tp: min(o, self._available_now.get(tp, o)) for tp, o in latest.items()}
        return latest

    def latestOffset(
        self, start: dict[str, dict[str, int]] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, dict[str, int]]:
        self._check()
        begin = offsets_from_json(start) if start else {}
        with self.opts.client() as client:
            latest = self._latest(client, begin)
            # A partition that went away keeps its last offset. One whose latest offset is now below where
            # the query is (recreated, truncated) ends the batch there: partitions() reports the loss.
            for tp, off in begin.items():
                latest.setdefault(tp, off)
            if begin and self._delay_batch(client, begin, latest):
                return offsets_to_json(begin)  # no new batch yet
            if isinstance(limit, ReadMaxRows) and begin:
                new = [tp for tp in latest if tp not in begin]
                new_earliest = client.earliest_offsets(new) if new else {}
                latest = rate_limit(begin, latest, limit.max_rows, new_earliest)
        return offsets_to_json(latest)

    def _delay_batch(
        self, client: KafkaClient, begin: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
    ) -> bool:
        """``minOffsetsPerTrigger``: wait while fewer new offsets than that are available, but no longer than
        ``maxTriggerDelay`` since the last batch (the first batch is never delayed, nor AvailableNow ones)."""
        wanted = self.opts.min_offsets_per_trigger
        if wanted is None or self._available_now is not None:
            return False
        now = time.monotonic()
        if self._last_trigger is None or (now - self._last_trigger) * 1000 >= self.opts.max_trigger_delay_ms:
            self._last_trigger = now
            return False
        new = [tp for tp in latest if tp not in begin]
        first = {**(client.earliest_offsets(new) if new else {}), **begin}
        available = sum(max(end - first[tp], 0) for tp, end in latest.items())
        if available < wanted:
            log.debug("%d new offsets, fewer than minOffsetsPerTrigger %d: delaying the batch", available, wanted)
            return True
        self._last_trigger = now
        return False

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        with self.opts.client() as client:
            return offsets_to_json(self._latest(client, {}))

    def partitions(self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]) -> Sequence[InputPartition]:
        begin = offsets_from_json(start)
        until = offsets_from_json(end)
        for tp, off in until.items():
            if off < begin.get(tp, off):
                report_data_loss(
                    self.opts,
                    f"Partition {tp}'s offset was changed from {begin[tp]} to {off}, some data may have been missed",
                )
        new = [tp for tp in until if tp not in begin]
        ranges: list[OffsetRange] = []
        with self.opts.client() as client:
            if new:
                earliest_new = client.earliest_offsets(new)
                for tp in new:
                    log.info("new partition %s: reading from its earliest offset %d", tp, earliest_new[tp])
                    begin[tp] = earliest_new[tp]
            tps = [tp for tp in until if until[tp] > begin[tp]]
            earliest = client.earliest_offsets(tps) if tps else {}
        for tp in tps:
            b = begin[tp]
            if b < earliest[tp]:
                report_data_loss(self.opts, f"cannot read {tp} from offset {b}: the log starts at {earliest[tp]}")
                b = min(earliest[tp], until[tp])
            ranges.append(OffsetRange(tp.topic, tp.partition, b, until[tp]))
        pieces = split_ranges(
            ranges, min_partitions=self.opts.min_partitions, max_records=self.opts.max_records_per_partition
        )
        return [RangePartition(i, r, self.opts) for i, r in enumerate(pieces)]

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        """Spark's checkpoint holds the offsets; nothing to do at the source."""

    def stop(self) -> None:
        """No long-lived resources: clients are opened per call."""

    # -- data (executors) --------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RangePartition):  # Spark passes a placeholder when there are no ranges
            yield from read_range(partition.range, partition.opts)
