"""The replica manager: the partitions this broker hosts, and the produce and fetch paths into their logs.

It follows the metadata store: when a topic appears, grows, changes configs or is deleted, the partitions
(and their logs) on this broker follow. Appends wake the delayed fetches that watch the partition.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from rill.common import FileRegion, TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.log.log import LogAppendInfo
from rill.log.log_config import LogConfig
from rill.log.log_manager import LogManager
from rill.metadata.store import MetadataStore, PartitionState, TopicState
from rill.replica.partition import Partition, TopicCompression
from rill.replica.purgatory import DelayedOperationPurgatory

log = logging.getLogger(__name__)

EffectiveConfigs = Callable[[Mapping[str, str]], Mapping[str, str]]


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """What one partition contributes to a Fetch response."""

    error: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    regions: list[FileRegion]
    size: int


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        metadata: MetadataStore,
        effective_configs: EffectiveConfigs,
    ) -> None:
        self.node_id = node_id
        self.log_manager = log_manager
        self.metadata = metadata
        self._effective_configs = effective_configs
        self._partitions: dict[TopicPartition, Partition] = {}
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch")
        self.append_listeners: list[Callable[[TopicPartition, LogAppendInfo], None]] = []
        metadata.add_listener(self.sync_with_metadata)

    # -- following the metadata --------------------------------------------------------------------------

    def _configs_for(self, topic: TopicState) -> tuple[LogConfig, TopicCompression, int]:
        merged = dict(self._effective_configs(topic.configs))
        config = LogConfig.from_topic_configs(merged, LogConfig())
        compression_type = merged.get("compression.type", "producer")
        level = merged.get(f"compression.{compression_type}.level")  # gzip, lz4 and zstd have levels
        return (
            config,
            TopicCompression(compression_type, None if level is None else int(level)),
            int(merged.get("min.insync.replicas", "1")),
        )

    def sync_with_metadata(self) -> None:
        """Create, update and delete local partitions so they match the metadata store."""
        topics = self.metadata.topics()
        wanted: set[TopicPartition] = set()
        new: list[tuple[TopicPartition, PartitionState, uuid.UUID | None, LogConfig, TopicCompression, int]] = []
        for topic in topics.values():
            config, compression, min_isr = self._configs_for(topic)
            for state in topic.partitions:
                if self.node_id not in state.replicas:
                    continue
                tp = TopicPartition(topic.name, state.partition)
                wanted.add(tp)
                partition = self._partitions.get(tp)
                if partition is None:
                    new.append((tp, state, topic.topic_id, config, compression, min_isr))
                else:
                    partition.update_state(state)
                    partition.update_config(config, compression, min_isr)
        failed: KafkaError | None = None
        if new:
            try:
                self.log_manager.get_or_create_logs([(tp, tid, cfg) for tp, _, tid, cfg, _, _ in new])
            except KafkaError as e:  # the logs that could be made are hosted; the error is raised at the end
                failed = e
            for tp, state, _, _, compression, min_isr in new:
                plog = self.log_manager.get_log(tp)
                if plog is None:
                    continue
                partition = Partition(tp, plog, state, self.node_id, compression, min_isr)
                self._partitions[tp] = partition
                partition.log.leader_epoch_cache.assign(state.leader_epoch, plog.log_end_offset)
                # A new leader's high watermark is the smallest log end offset in its ISR; the
                # checkpointed value may be stale after a crash (here the ISR is this replica).
                partition.maybe_increment_high_watermark()
        gone = [tp for tp in self._partitions if tp not in wanted]
        for tp in gone:
            del self._partitions[tp]
        if gone:
            self.log_manager.delete_logs(gone)
        for tp in gone:
            self.fetch_purgatory.check_and_complete(tp)
            log.info("Deleted partition %s", tp)
        # A log no partition of the metadata claims was left by a topic deleted while the broker stopped
        # (a crash before every directory was renamed): set aside, so that the topic created again under
        # that name starts empty, as Kafka does with stray logs.
        stray = {
            plog.topic_partition: "no partition of the metadata is hosted in it"
            for plog in self.log_manager.all_logs()
            if plog.topic_partition not in wanted
        }
        if stray:
            self.log_manager.set_aside_stray(stray)
        if failed is not None:
            raise failed

    async def persist_log_start_offsets(self, moved: Mapping[TopicPartition, int]) -> set[TopicPartition]:
        """DeleteRecords: make the new log start offsets ``moved`` durable before they apply; returns
        the partitions whose checkpoint could not be written (see ``LogManager.write_log_start_offsets``)."""
        return await self.log_manager.write_log_start_offsets(moved)

    # -- lookups -----------------------------------------------------------------------------------------

    def partitions(self) -> Mapping[TopicPartition, Partition]:
        return self._partitions

    def get_partition(self, tp: TopicPartition) -> Partition:
        partition = self._partitions.get(tp)
        if partition is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"This server does not host {tp}.")
        return partition

    def leader_partition(self, tp: TopicPartition) -> Partition:
        partition = self.get_partition(tp)
        if not partition.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"This server is not the leader of {tp}.")
        return partition

    # -- produce -----------------------------------------------------------------------------------------

    def append_records(self, tp: TopicPartition, records: memoryview, required_acks: int) -> LogAppendInfo:
        partition = self.leader_partition(tp)
        info = partition.append_records_as_leader(records, required_acks)
        if not info.duplicate:
            self.fetch_purgatory.check_and_complete(tp)
            for listener in self.append_listeners:
                listener(tp, info)
        return info

    # -- fetch -------------------------------------------------------------------------------------------

    def read(
        self,
        tp: TopicPartition,
        fetch_offset: int,
        max_bytes: int,
        *,
        current_leader_epoch: int = -1,
        min_one_batch: bool = True,
        committed_only: bool = True,
    ) -> PartitionRead:
        """Read one partition for a consumer (up to the high watermark) or a replica (up to the log end)."""
        try:
            partition = self.leader_partition(tp)
            partition.check_leader_epoch(current_leader_epoch)
        except KafkaError as e:
            return PartitionRead(e.code, -1, -1, -1, [], 0)
        hw = partition.high_watermark
        try:
            data = partition.log.read(
                fetch_offset,
                max_bytes,
                max_offset=hw if committed_only else None,
                min_one_batch=min_one_batch,
            )
        except KafkaError as e:
            return PartitionRead(e.code, hw, partition.last_stable_offset, partition.log_start_offset, [], 0)
        return PartitionRead(
            ErrorCode.NO_ERROR,
            hw,
            partition.last_stable_offset,
            partition.log_start_offset,
            data.regions,
            data.size,
        )

    async def wait_for_appends(self, tps: Iterable[TopicPartition], timeout_s: float) -> bool:
        return await self.fetch_purgatory.wait(tps, timeout_s)

    def shutdown(self) -> None:
        self.fetch_purgatory.wake_all()
