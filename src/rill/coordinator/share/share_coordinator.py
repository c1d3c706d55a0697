"""The share coordinator (KIP-932; Kafka's ShareCoordinatorService): the durable state of every share partition,
kept in the compacted internal topic ``__share_group_state``.

A share partition (group, topic id, partition) lives in partition ``abs(java_string_hash("group:topicId:p")) %
share.coordinator.state.topic.num.partitions``; its coordinator is that partition's leader, which FindCoordinator
(key type SHARE) names. The topic is created on first need, compacted, with the ``share.coordinator.state.topic.*``
settings (a single broker, with no cluster, caps the replication factor and min ISR at 1).

The coordinator follows its partitions' leadership as the group and transaction coordinators do: when this broker
comes to lead one, the partition is loaded (its records replayed into a ``ShareCoordinatorShard``; a record that
cannot be read is logged, counted and skipped) while requests for its keys answer COORDINATOR_LOAD_IN_PROGRESS;
when it stops leading one, its state is dropped and its keys answer NOT_COORDINATOR.

A write is appended as leader and answered once the high watermark passes it (acks=all): the share-partition
leader answers its client only after that. The record is replayed into the shard when it is appended, so the
next write of the key builds on it; a read of a key waits until its last write is committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rill.common import TopicPartition
from rill.coordinator.group.group_metadata_manager import partition_for
from rill.coordinator.internal_topics import UnreadableRecords, iter_log_chunks, maybe_create_internal_topic
from rill.coordinator.share.share_coordinator_shard import (
    SNAPSHOT_KEY_VERSION,
    UPDATE_KEY_VERSION,
    ShareCoordinatorShard,
    ShareGroupOffset,
    SharePartitionKey,
    ShareRecord,
    WriteRequest,
    decode_record,
    encode_key,
    encode_snapshot,
    encode_update,
)
from rill.errors import ErrorCode, KafkaError
from rill.metadata.store import SHARE_GROUP_STATE_TOPIC, MetadataStore
from rill.records.builder import build_batch
from rill.records.record import Record, decode_batch_records
from rill.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class LoadedPartition:
    """A ``__share_group_state`` partition this broker leads and has loaded."""

    coordinator_epoch: int
    shard: ShareCoordinatorShard
    last_written: dict[SharePartitionKey, int] = field(default_factory=dict)  # key -> end offset of its last write


class ShareCoordinator:
    def __init__(self, config: Any, metadata: MetadataStore, replica_manager: ReplicaManager,
                 *, single_broker: bool = False) -> None:  # fmt: skip
        get = config.get
        self.configured_partitions = int(get("share.coordinator.state.topic.num.partitions"))
        self.replication_factor = int(get("share.coordinator.state.topic.replication.factor"))
        self.min_isr = int(get("share.coordinator.state.topic.min.isr"))
        if single_broker:  # a broker with no cluster: the only replication it can have
            self.replication_factor = self.min_isr = 1
        self.segment_bytes = int(get("share.coordinator.state.topic.segment.bytes"))
        self.updates_per_snapshot = int(get("share.coordinator.snapshot.update.records.per.snapshot"))
        self.write_timeout_ms = int(get("share.coordinator.write.timeout.ms"))
        self.metadata = metadata
        self.replica_manager = replica_manager
        self.partitions: dict[int, LoadedPartition] = {}
        self.loading: dict[int, asyncio.Task[None]] = {}
        self.load_skipped = 0  # records skipped by loads since start (unreadable)
        self.active = True
        self.on_loaded: Callable[[int], None] | None = None

    # -- placement -----------------------------------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        topic = self.metadata.topic(SHARE_GROUP_STATE_TOPIC)
        return len(topic.partitions) if topic is not None and topic.partitions else self.configured_partitions

    def partition_for(self, key: SharePartitionKey) -> int:
        return partition_for(key.coordinator_key(), self.num_partitions)

    def partition_for_coordinator_key(self, coordinator_key: str) -> int:
        return partition_for(coordinator_key, self.num_partitions)

    def leader_of(self, partition: int) -> int:
        """The broker leading ``partition`` of the topic (-1: none, or no topic yet)."""
        topic = self.metadata.topic(SHARE_GROUP_STATE_TOPIC)
        if topic is None or partition >= len(topic.partitions):
            return -1
        return topic.partitions[partition].leader

    async def maybe_create_topic(self) -> None:
        configs = {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "min.insync.replicas": str(self.min_isr),
            "segment.bytes": str(self.segment_bytes),
            "unclean.leader.election.enable": "false",
        }
        await maybe_create_internal_topic(self.metadata, SHARE_GROUP_STATE_TOPIC, self.configured_partitions,
                                          self.replication_factor, configs,
                                          "share.coordinator.state.topic.replication.factor")  # fmt: skip

    def _loaded(self, key: SharePartitionKey) -> tuple[ErrorCode, int, LoadedPartition | None]:
        if not self.active or self.metadata.topic(SHARE_GROUP_STATE_TOPIC) is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, None
        p = self.partition_for(key)
        if p in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, p, None
        loaded = self.partitions.get(p)
        if loaded is None:
            return ErrorCode.NOT_COORDINATOR, p, None
        return ErrorCode.NO_ERROR, p, loaded

    def _known_partition(self, key: SharePartitionKey) -> bool:
        topic = self.metadata.topic_by_id(key.topic_id)
        return topic is not None and 0 <= key.partition < len(topic.partitions)

    # -- requests ------------------------------------------------------------------------------------------

    async def write(self, key: SharePartitionKey, w: WriteRequest) -> ErrorCode:
        """WriteShareGroupState of one key: fenced, or appended and answered once committed."""
        if key.partition < 0:
            return ErrorCode.INVALID_REQUEST
        code, p, loaded = self._loaded(key)
        if loaded is None:
            return code
        code = loaded.shard.write_error(key, w.leader_epoch, w.state_epoch)
        if code:
            return code
        if not self._known_partition(key):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        version, value = loaded.shard.plan_write(key, w)
        return await self._append(p, loaded, ShareRecord(version, key, value))

    async def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> ErrorCode:
        """InitializeShareGroupState of one key: a new state epoch (fencing writes of older ones) and start."""
        if key.partition < 0 or start_offset < -1:
            return ErrorCode.INVALID_REQUEST
        code, p, loaded = self._loaded(key)
        if loaded is None:
            return code
        if loaded.shard.state_epochs.get(key, -1) > state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH
        if not self._known_partition(key):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        value = loaded.shard.plan_initialize(key, state_epoch, start_offset)
        return await self._append(p, loaded, ShareRecord(SNAPSHOT_KEY_VERSION, key, value))

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> tuple[ErrorCode, ShareGroupOffset | None]:
        """ReadShareGroupState (and, with leader epoch -1, the summary) of one key: its committed state."""
        if key.partition < 0:
            return ErrorCode.INVALID_REQUEST, None
        code, p, loaded = self._loaded(key)
        if loaded is None:
            return code, None
        if not self._known_partition(key):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        pending = loaded.last_written.get(key)
        if pending is not None:  # the key's last write may not be committed yet: its state is read once it is
            code = await self.replica_manager.wait_for_commit(TopicPartition(SHARE_GROUP_STATE_TOPIC, p), pending,
                                                              self.write_timeout_ms / 1000)  # fmt: skip
            if code:
                return _coordinator_error(code), None
            if self.partitions.get(p) is not loaded:
                return ErrorCode.NOT_COORDINATOR, None
        return loaded.shard.read(key, leader_epoch)

    async def delete(self, key: SharePartitionKey) -> ErrorCode:
        """DeleteShareGroupState of one key: tombstones on both of its keys (nothing written for a key with no
        state)."""
        if key.partition < 0:
            return ErrorCode.INVALID_REQUEST
        code, p, loaded = self._loaded(key)
        if loaded is None:
            return code
        if key not in loaded.shard.states:
            return ErrorCode.NO_ERROR
        return await self._append(p, loaded, ShareRecord(SNAPSHOT_KEY_VERSION, key, None),
                                  ShareRecord(UPDATE_KEY_VERSION, key, None))  # fmt: skip

    async def _append(self, p: int, loaded: LoadedPartition, *records: ShareRecord) -> ErrorCode:
        tp = TopicPartition(SHARE_GROUP_STATE_TOPIC, p)
        now = _now_ms()
        batch = build_batch([Record(i, now, encode_key(r.key_version, r.key), _encode_value(r, now))
                             for i, r in enumerate(records)])  # fmt: skip
        try:
            info = self.replica_manager.append_records(tp, memoryview(batch), -1)
        except KafkaError as e:
            return _coordinator_error(e.code)
        end = info.last_offset + 1
        for r in records:  # in log order: the next write of the key builds on this one
            loaded.shard.replay(r)
            loaded.last_written[r.key] = end
        code = await self.replica_manager.wait_for_commit(tp, end, self.write_timeout_ms / 1000)
        if code == ErrorCode.NO_ERROR:
            if self.partitions.get(p) is not loaded:
                return ErrorCode.NOT_COORDINATOR  # unloaded meanwhile: the new coordinator has it from the log
            for r in records:
                if loaded.last_written.get(r.key) == end:
                    del loaded.last_written[r.key]
            return ErrorCode.NO_ERROR
        log.info("writing the share state of %s to %s failed: %s", records[0].key, tp, code.name)
        if self.partitions.get(p) is loaded:  # the state replayed may hold what is not committed: load it again
            self.partitions.pop(p, None)
            self.follow_leadership()
        return _coordinator_error(code)

    def groups(self) -> set[str]:
        """The share groups with a state in the ``__share_group_state`` partitions this broker has loaded."""
        return {key.group_id for loaded in self.partitions.values() for key in loaded.shard.states}

    def keys_of(self, group_id: str) -> list[tuple[uuid.UUID, int]]:
        """The share partitions of ``group_id`` with a state in the partitions this broker has loaded."""
        return sorted((k.topic_id, k.partition) for loaded in self.partitions.values()
                      for k in loaded.shard.keys_of(group_id))  # fmt: skip

    # -- leadership ----------------------------------------------------------------------------------------

    def led_partitions(self) -> dict[int, int]:
        topic = self.metadata.topic(SHARE_GROUP_STATE_TOPIC)
        if topic is None:
            return {}
        node = self.replica_manager.node_id
        return {s.partition: s.leader_epoch for s in topic.partitions if s.leader == node}

    def follow_leadership(self) -> tuple[list[int], list[int]]:
        """Load the partitions this broker has come to lead (or leads at a new epoch), unload the ones it no
        longer leads; returns (gained, lost)."""
        if not self.active:
            return [], []
        led = self.led_partitions()
        lost = [p for p in list(self.partitions) if p not in led or self.partitions[p].coordinator_epoch != led[p]]
        lost += [p for p in self.loading if p not in led]
        for p in lost:
            self.partitions.pop(p, None)
            task = self.loading.pop(p, None)
            if task is not None:
                task.cancel()
        gained = [p for p in led if p not in self.partitions and p not in self.loading]
        for p in gained:
            self.loading[p] = asyncio.get_running_loop().create_task(
                self._load(p, led[p]), name=f"{SHARE_GROUP_STATE_TOPIC}-{p}-load"
            )
        if lost:
            log.info("Unloaded the share states of %s partitions %s", SHARE_GROUP_STATE_TOPIC, sorted(set(lost)))
        return gained, sorted(set(lost))

    async def _load(self, p: int, epoch: int) -> None:
        started = time.monotonic()
        tp = TopicPartition(SHARE_GROUP_STATE_TOPIC, p)
        shard = ShareCoordinatorShard(self.updates_per_snapshot)
        try:
            partition = self.replica_manager.partitions().get(tp)
            count = 0 if partition is None else await replay_log(tp, partition.log, shard)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("Loading %s failed", tp)
            self.loading.pop(p, None)
            return
        if self.loading.get(p) is not asyncio.current_task():
            return
        del self.loading[p]
        self.load_skipped += shard.skipped
        self.partitions[p] = LoadedPartition(epoch, shard)
        log.info("Loaded %d share partition state(s) from %d record(s) of %s (epoch %d) in %.1f ms",
                 len(shard.states), count, tp, epoch, (time.monotonic() - started) * 1000)  # fmt: skip
        if self.on_loaded is not None:
            self.on_loaded(p)

    async def on_metadata_delta(self, delta: object) -> None:
        self.follow_leadership()

    def shutdown(self) -> None:
        self.active = False
        for task in self.loading.values():
            task.cancel()
        self.loading.clear()
        self.partitions.clear()


def _encode_value(r: ShareRecord, now_ms: int) -> bytes | None:
    if r.value is None:
        return None
    return encode_snapshot(r.value, now_ms) if r.key_version == SNAPSHOT_KEY_VERSION else encode_update(r.value)


async def replay_log(tp: TopicPartition, plog: Any, shard: ShareCoordinatorShard) -> int:
    """Replay the log of ``tp`` into ``shard``; returns the records read. A record or batch that cannot be read
    is logged, counted and skipped: the bytes of the topic may be any."""
    unreadable = UnreadableRecords(tp)
    count = 0
    for chunk in iter_log_chunks(plog, tp):
        for batch in chunk:
            if batch.attributes & 0x20:  # control batch
                continue
            try:
                records = decode_batch_records(batch.view)
            except KafkaError as e:
                unreadable.skip(batch.base_offset, f"its batch does not decode: {e.message}")
                continue
            for record in records:
                if record.key is None:
                    unreadable.skip(record.offset, "it has no key")
                    continue
                count += 1
                try:
                    decoded = decode_record(record.key, record.value)
                    if decoded is not None:
                        shard.replay(decoded)
                except Exception as e:
                    unreadable.skip(record.offset, e)
        await asyncio.sleep(0)  # other requests are served between chunks
    unreadable.done()
    shard.skipped = unreadable.count
    return count


def _coordinator_error(code: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed append to a coordinator's topic onto the errors its callers retry."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):  # fmt: skip
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_SIZE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code
