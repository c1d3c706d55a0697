"""One partition's log: an ordered list of segments, the last one active (Kafka's UnifiedLog).

Directory ``<topic>-<partition>`` holds the segments (see rill.log.log_segment), producer state
snapshots (rill.log.producer_state), ``leader-epoch-checkpoint`` and ``partition.metadata``
(rill.log.checkpoints).

Invariants: segment base offsets strictly increase; ``log_start_offset`` <= every readable
offset < ``log_end_offset``; ``recovery_point`` <= ``log_end_offset`` and everything below it
has been fsynced, and so have the names in the directory (segment files, checkpoints) and the
directory's own entry: files are created and checkpoints written without fsync, and the next
flush syncs them before the recovery point moves, as the segments' bytes are. All methods run on
the owning event loop, except ``flush_segments`` (and ``flush``), which a worker thread may run
while the loop appends.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from rill.common import TopicPartition, named_tuple_from
from rill.errors import ErrorCode, KafkaError
from rill.log.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    read_partition_metadata,
    write_partition_metadata,
)
from rill.log.fetch_data_info import FetchDataInfo
from rill.log.leader_epoch_cache import LeaderEpochFileCache
from rill.log.local_log import LocalLog
from rill.log.log_append_info import LogAppendInfo
from rill.log.log_config import LogConfig
from rill.log.log_deletion import LogDeletion
from rill.log.log_loader import load_segments, rebuild_producer_state
from rill.log.log_read import LogReadSide
from rill.log.log_segment import LogSegment
from rill.log.log_txn import LogTransactions
from rill.log.log_validator import (
    assign_offsets,
    check_single_batch,
    validate_batches,
    validate_records,
)
from rill.log.producer_state import BatchMetadata, ProducerStateEntry, ProducerStateManager
from rill.records.batch import BatchHeader, Buffer, set_log_append_time, set_max_timestamp
from rill.records.control import marker_or_none
from rill.records.scan import LAST_OFFSET_DELTA_FIELD, MAX_TIMESTAMP_FIELD, PRODUCER_ID_FIELD, RECORDS_COUNT_FIELD

__all__ = ["FUTURE_DIR_SUFFIX", "FetchDataInfo", "Log", "LogAppendInfo", "parse_topic_partition"]

log = logging.getLogger(__name__)


def _base_offset(segment: LogSegment) -> int:
    return segment.base_offset


FUTURE_DIR_SUFFIX = "-future"
_HEX = frozenset("0123456789abcdef")


def parse_topic_partition(name: str) -> TopicPartition | None:
    """``orders-3`` -> TopicPartition("orders", 3), and so does a future log's ``orders-3.<uuid hex>-future``
    (rill.log.future_logs); None when the name does not parse."""
    if name.endswith(FUTURE_DIR_SUFFIX):
        name, dot, tag = name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")
        if not dot or len(tag) != 32 or not set(tag) <= _HEX:
            return None
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit() or "." in part:
        return None
    return TopicPartition(topic, int(part))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Log(LogReadSide, LogDeletion, LogTransactions, LocalLog):
    """A partition log: identity, state and append here; reads in ``LogReadSide`` (rill.log.log_read),
    retention, DeleteRecords and truncation in ``LogDeletion`` (rill.log.log_deletion), transaction markers in
    ``LogTransactions`` (rill.log.log_txn), rolling, segment replacement, durability and closing in
    ``LocalLog`` (rill.log.local_log)."""

    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        *,
        topic_id: uuid.UUID | None = None,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        high_watermark: int = 0,
        had_clean_shutdown: bool = False,
        now_ms: int | None = None,
    ) -> None:
        tp = parse_topic_partition(dir.name)
        if tp is None:
            raise ValueError(f"log directory name {dir.name!r} is not <topic>-<partition>")
        self._tp = tp
        self._dir = dir
        self._config = config
        now = _now_ms() if now_ms is None else now_ms
        # Names made in the directory (and the directory's own entry, when it is new) since the
        # last flush: flush_segments fsyncs them, so creating a partition costs no fsync.
        self._dir_changes = 0
        self._dir_synced = 0
        try:
            dir.mkdir(parents=True)
            self._parent_unsynced = True
            self._dir_changes += 1
        except FileExistsError:
            self._parent_unsynced = False
        self._topic_id = self._init_topic_id(topic_id)
        result = load_segments(
            dir, config, recovery_point=recovery_point, had_clean_shutdown=had_clean_shutdown, now_ms=now
        )
        self.recovered_segments = result.recovered_segments
        self.truncated_bytes = result.truncated_bytes
        self._segments = result.segments
        try:
            if not self._segments:
                start = max(log_start_offset, 0)
                self._segments = [self._new_segment(start, now, active=True)]
            self._log_start_offset = max(log_start_offset, self._segments[0].base_offset)
            self._leo = self._active.next_offset
            if self._log_start_offset > self._leo:
                # DeleteRecords advanced the start past the end that survived; start afresh there
                self._log_start_offset = self._leo
            self._recovery_point = min(recovery_point, self._leo)
            self._high_watermark = min(max(high_watermark, self._log_start_offset), self._leo)
            self.leader_epoch_cache = LeaderEpochFileCache(dir / LEADER_EPOCH_CHECKPOINT)
            self.leader_epoch_cache.truncate_from_end(self._leo)
            self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
            self.producer_state = ProducerStateManager(dir)
            rebuild_producer_state(
                self.producer_state, self.leader_epoch_cache, self._segments, self._leo, result.recovered_from
            )
            self.producer_state.on_high_watermark_updated(self._high_watermark)
        except BaseException:  # a log that cannot be opened keeps no file open (e.g. out of descriptors)
            for seg in self._segments:
                seg.close()
            raise
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self.truncated_to: int | None = None  # the lowest truncation since the cleaner last looked
        self._writes_failing = False  # a write failed and none succeeded since (logged once each way)
        self._unflushed_messages = 0
        self.last_flush_ms = now
        self.on_flush_needed: Callable[[Log], None] | None = None

    # ---- identity and state -------------------------------------------------------------------

    def _init_topic_id(self, topic_id: uuid.UUID | None) -> uuid.UUID:
        path = self._dir / PARTITION_METADATA
        stored: uuid.UUID | None = None
        if path.exists():
            try:
                stored = read_partition_metadata(path)
            except (OSError, ValueError) as e:
                log.warning("Ignoring unreadable %s: %s", path, e)
        if topic_id is not None and stored is not None and stored != topic_id:
            raise KafkaError(
                ErrorCode.INCONSISTENT_TOPIC_ID,
                f"{self._tp}: topic id {topic_id} does not match the stored {stored}",
            )
        # Whether the id came from this log's own ``partition.metadata`` (or its creator): a log without
        # one takes the id the metadata gives it (``adopt_topic_id``) instead of being set aside as stray.
        self.topic_id_known = topic_id is not None or stored is not None
        result = topic_id or stored or uuid.uuid4()
        if stored != result:
            self._write_topic_id(result)
        return result

    def _write_topic_id(self, topic_id: uuid.UUID) -> None:
        write_partition_metadata(self._dir / PARTITION_METADATA, topic_id, sync=False)
        self._dir_changes += 1

    def _moved_to(self, new_dir: Path) -> None:
        self.producer_state.dir = new_dir
        self.leader_epoch_cache.path = new_dir / LEADER_EPOCH_CHECKPOINT

    def adopt_topic_id(self, topic_id: uuid.UUID) -> None:
        """Take ``topic_id`` from the metadata: only for a log whose own id was not known."""
        if self.topic_id_known:
            raise ValueError(f"{self._tp} already has the topic id {self._topic_id}")
        self._write_topic_id(topic_id)
        self._topic_id = topic_id
        self.topic_id_known = True

    @property
    def topic(self) -> str:
        return self._tp.topic

    @property
    def partition(self) -> int:
        return self._tp.partition

    @property
    def topic_partition(self) -> TopicPartition:
        return self._tp

    @property
    def is_future(self) -> bool:
        """A future log: the copy of a replica being moved to another log dir (rill.log.future_logs)."""
        return self._dir.name.endswith(FUTURE_DIR_SUFFIX)

    @property
    def dir(self) -> Path:
        return self._dir

    @property
    def topic_id(self) -> uuid.UUID:
        return self._topic_id

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, value: LogConfig) -> None:
        self._config = value

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self._high_watermark = hw = min(max(value, self._log_start_offset), self._leo)
        if self.producer_state.unreplicated_txns:  # set on every append: the usual case costs one test
            self.producer_state.on_high_watermark_updated(hw)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    @property
    def _active(self) -> LogSegment:
        return self._segments[-1]

    # ---- append -------------------------------------------------------------------------------

    def append(
        self, records: memoryview | bytes | bytearray, *, leader_epoch: int, now_ms: int | None = None
    ) -> LogAppendInfo:
        """Validate producer batches, assign offsets, stamp the leader epoch and append them.

        When ``records`` is writable the batch headers are patched in place (base offset, epoch,
        LogAppendTime) and written with one ``pwrite``; read-only input gets copied headers.
        """
        # The hot path of every produce request. A Produce usually carries one batch per partition
        # in a writable buffer: that case is checked and written here in one flat pass; anything
        # else (several batches, read-only input, a batch failing a check) goes through
        # ``_append_batches``, where ``validate_batches`` names the precise error.
        view = records if type(records) is memoryview and records.itemsize == 1 else memoryview(records).cast("B")
        if view.readonly:
            return self._append_batches(view, leader_epoch, now_ms)
        config = self._config
        fields = check_single_batch(view, config)
        if fields is None:
            return self._append_batches(view, leader_epoch, now_ms)
        delta, max_ts = fields[LAST_OFFSET_DELTA_FIELD], fields[MAX_TIMESTAMP_FIELD]
        producer_id, count = fields[PRODUCER_ID_FIELD], fields[RECORDS_COUNT_FIELD]
        header: BatchHeader | None = None
        if producer_id >= 0:
            header = named_tuple_from(BatchHeader, fields)
            dup = self.producer_state.check_one(header)
            if dup is not None:
                return self._duplicate_info(dup)
        now = _now_ms() if now_ms is None else now_ms
        append_time = -1
        if config.log_append_time:
            append_time = max_ts = now
            set_log_append_time(view, 0, now)
        first_offset = self._leo
        last_offset = first_offset + delta
        size_limit, segment_ms = config.segment_bytes, config.max_segment_ms
        try:
            # the roll check, the base offset and epoch, the write and the index entries in one call;
            # when the batch must go into a new segment, that empty segment takes it
            if not self._segments[-1].try_append(
                view, first_offset, last_offset, max_ts, leader_epoch, now, size_limit, segment_ms
            ):
                self.roll(first_offset, now).try_append(
                    view, first_offset, last_offset, max_ts, leader_epoch, now, size_limit, segment_ms
                )
        except OSError as e:
            raise self._storage_error(e) from e
        self._leo = last_offset + 1
        if self._writes_failing:
            self._writes_resumed()
        if header is not None:
            self.producer_state.append_one(header, first_offset, max_ts)
        # ``_appended`` written out: this is the path of nearly every produce request.
        if leader_epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(leader_epoch, first_offset)
        unflushed = self._unflushed_messages = self._unflushed_messages + count
        if unflushed >= config.flush_messages and self.on_flush_needed is not None:
            self.on_flush_needed(self)
        return named_tuple_from(
            LogAppendInfo,
            (first_offset, last_offset, append_time, self._log_start_offset, count, len(view), False, max_ts,
             last_offset if max_ts >= 0 else -1),
        )  # fmt: skip

    def _append_batches(self, view: memoryview, leader_epoch: int, now_ms: int | None) -> LogAppendInfo:
        """``append`` of any number of batches, writable or not."""
        config = self._config
        batches = validate_batches(view, config, from_client=True)
        if not batches:
            return LogAppendInfo(-1, -1, -1, self._log_start_offset, 0, 0, False, -1)
        now = _now_ms() if now_ms is None else now_ms
        for i, (pos, h) in enumerate(batches):
            records_max = validate_records(view, pos, h, i, config, now)
            if records_max != h.max_timestamp and not config.log_append_time:
                # As Kafka does, the header's maxTimestamp is made the records' largest.
                if view.readonly:
                    view = memoryview(bytearray(view))
                batches[i] = (pos, h._replace(max_timestamp=records_max, crc=set_max_timestamp(view, pos, records_max)))
        pending: dict[int, ProducerStateEntry] | None = None
        count = 0
        max_ts = -1
        for _, h in batches:
            if h.producer_id >= 0:
                if pending is None:
                    pending = {}
                dup = self.producer_state.prepare(h, pending)
                if dup is not None:
                    return self._duplicate_info(dup)
            count += h.records_count
            if h.max_timestamp > max_ts:
                max_ts = h.max_timestamp
        append_time = now if config.log_append_time else -1
        if append_time >= 0:
            max_ts = append_time
        first_offset = self._leo
        end_offset = first_offset + count
        segment = self._segments[-1]
        if segment.size and self._should_roll(segment, len(view), max_ts, end_offset - 1, now):
            segment = self.roll(first_offset, now)

        bufs, infos = assign_offsets(view, batches, first_offset, leader_epoch, append_time)
        offset_of_max_ts = -1
        for (_, h), (_, last, ts, _) in zip(batches, infos, strict=True):
            if ts == max_ts and offset_of_max_ts < 0 <= ts:
                offset_of_max_ts = last
            if pending is not None and h.producer_id >= 0:
                self.producer_state.record(pending, h, last - h.last_offset_delta, ts)
        self._write(segment, bufs, infos)
        return self._appended(
            pending, leader_epoch, first_offset, end_offset - 1, count, append_time, len(view), max_ts,
            offset_of_max_ts,
        )  # fmt: skip

    def _appended(
        self,
        pending: dict[int, ProducerStateEntry] | None,
        leader_epoch: int,
        first_offset: int,
        last_offset: int,
        count: int,
        append_time: int,
        size: int,
        max_ts: int,
        offset_of_max_ts: int,
    ) -> LogAppendInfo:
        """After a leader append reached the segment: producer state, epoch, flush count, the result."""
        if pending is not None:
            self.producer_state.commit(pending, last_offset + 1)
        if leader_epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(leader_epoch, first_offset)
        self._count_unflushed(count)
        return named_tuple_from(
            LogAppendInfo,
            (first_offset, last_offset, append_time, self._log_start_offset, count, size, False, max_ts,
             offset_of_max_ts),
        )  # fmt: skip

    def append_as_follower(
        self, records: memoryview | bytes | bytearray, *, now_ms: int | None = None
    ) -> LogAppendInfo:
        """Append batches that already carry offsets and leader epochs (replication)."""
        view = memoryview(records).cast("B")
        batches = validate_batches(view, self._config, from_client=False)
        if not batches:
            return LogAppendInfo(-1, -1, -1, self._log_start_offset, 0, 0, False, -1)
        now = _now_ms() if now_ms is None else now_ms
        expected = self._leo
        max_ts, offset_of_max_ts, count = -1, -1, 0
        infos: list[tuple[int, int, int, int]] = []
        for pos, h in batches:
            if h.base_offset < expected:
                raise KafkaError(
                    ErrorCode.INVALID_RECORD, f"batch base offset {h.base_offset} is below the log end {expected}"
                )
            expected = h.next_offset
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max_ts = h.max_timestamp, h.last_offset
            infos.append((pos, h.last_offset, h.max_timestamp, h.size))
            count += h.records_count
        first_offset = batches[0][1].base_offset
        segment = self._segments[-1]
        if segment.size and self._should_roll(segment, len(view), max_ts, expected - 1, now):
            segment = self.roll(first_offset, now)
        markers = [
            marker_or_none(view[pos : pos + h.size]) if h.is_control and h.producer_id >= 0 else None
            for pos, h in batches
        ]
        aborted = self._aborted_by(zip((h for _, h in batches), markers, strict=True)) if any(markers) else []
        self._index_then_write(segment, aborted, first_offset, lambda: self._write(segment, [view], infos))
        for (_, h), marker in zip(batches, markers, strict=True):
            completed = self.producer_state.replay(h, marker)
            if completed is not None:
                self.producer_state.complete_txn(completed)
            if h.partition_leader_epoch > self.leader_epoch_cache.latest_epoch:
                self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
        self._count_unflushed(count)
        return LogAppendInfo(
            first_offset, expected - 1, -1, self._log_start_offset, count, len(view), False, max_ts, offset_of_max_ts
        )

    def _write(self, segment: LogSegment, bufs: list[Buffer], infos: list[tuple[int, int, int, int]]) -> None:
        try:
            segment.append(bufs, infos)
        except OSError as e:
            raise self._storage_error(e) from e
        self._leo = infos[-1][1] + 1
        if self._writes_failing:
            self._writes_resumed()

    def _storage_error(self, e: OSError, what: str = "write failed") -> KafkaError:
        """KAFKA_STORAGE_ERROR for a failed write; the first failure after a success is logged (one
        warning when the partition stops taking writes, one line when it takes them again: a full
        disk would otherwise log every produce request)."""
        if not self._writes_failing:
            self._writes_failing = True
            log.warning("%s: writes fail, log end stays at %d until one succeeds: %s: %s", self._tp, self._leo, what, e)
        return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{self._tp}: {what}: {e}")

    def _writes_resumed(self) -> None:
        self._writes_failing = False
        log.info("%s: writes succeed again (log end %d)", self._tp, self._leo)

    def _count_unflushed(self, count: int) -> None:
        self._unflushed_messages += count
        if self._unflushed_messages >= self._config.flush_messages and self.on_flush_needed is not None:
            self.on_flush_needed(self)

    def _duplicate_info(self, dup: BatchMetadata) -> LogAppendInfo:
        """A retried batch already in the log: report where it went, append nothing."""
        return LogAppendInfo(
            dup.first_offset,
            dup.last_offset,
            dup.timestamp if self._config.log_append_time else -1,
            self._log_start_offset,
            dup.last_offset - dup.first_offset + 1,
            0,
            True,
            dup.timestamp,
        )
