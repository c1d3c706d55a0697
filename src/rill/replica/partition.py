"""One partition replica on this broker: its log, leader epoch, ISR and high watermark.

The high watermark is the offset below which every in-sync replica has the records (the "committed"
records of the design). With one replica in the ISR it advances with every append; with followers it will
advance as their fetch positions are reported. Consumers read only below it.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.log.log import Log, LogAppendInfo
from rill.log.log_config import LogConfig
from rill.metadata.store import PartitionState
from rill.records.batch import crc_ok, iter_batches
from rill.records.builder import recompress_batch

# Kafka's compression.type values and the batch attribute codec ids they name.
COMPRESSION_CODECS: dict[str, int] = {
    "uncompressed": 0,
    "none": 0,
    "gzip": 1,
    "snappy": 2,
    "lz4": 3,
    "zstd": 4,
}


class TopicCompression(NamedTuple):
    """A topic's ``compression.type`` and, for gzip, lz4 and zstd, its ``compression.<type>.level``."""

    type: str = "producer"
    level: int | None = None


PRODUCER_COMPRESSION = TopicCompression()  # keep what each producer sent


class Partition:
    def __init__(
        self,
        tp: TopicPartition,
        log: Log,
        state: PartitionState,
        node_id: int,
        compression: TopicCompression = PRODUCER_COMPRESSION,
        min_insync_replicas: int = 1,
    ) -> None:
        self.tp = tp
        self.log = log
        self.node_id = node_id
        self.state = state
        self.compression = compression
        self.min_insync_replicas = min_insync_replicas

    # -- leadership ----------------------------------------------------------------------------------

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.node_id

    def update_state(self, state: PartitionState) -> None:
        self.state = state

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Kafka's fencing of requests that carry a leader epoch (-1 = no check)."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        if current_leader_epoch > self.leader_epoch:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    def update_config(self, config: LogConfig, compression: TopicCompression, min_insync_replicas: int) -> None:
        self.log.config = config
        self.compression = compression
        self.min_insync_replicas = min_insync_replicas

    # -- offsets ---------------------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        # No transactions yet: every record below the high watermark is stable.
        return self.log.high_watermark

    def maybe_increment_high_watermark(self) -> bool:
        """Advance the high watermark to the smallest log end offset in the ISR (here: ours)."""
        new_hw = self.log.log_end_offset
        if new_hw > self.log.high_watermark:
            self.log.high_watermark = new_hw
            return True
        return False

    # -- append ----------------------------------------------------------------------------------------

    def append_records_as_leader(self, records: memoryview, required_acks: int) -> LogAppendInfo:
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if required_acks == -1 and len(self.state.isr) < self.min_insync_replicas:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"ISR {list(self.state.isr)} is smaller than min.insync.replicas={self.min_insync_replicas}",
            )
        data: memoryview | bytes = self._maybe_recompress(records)
        info = self.log.append(data, leader_epoch=self.leader_epoch, now_ms=int(time.time() * 1000))
        self.maybe_increment_high_watermark()
        return info

    def _maybe_recompress(self, records: memoryview) -> memoryview | bytes:
        codec = COMPRESSION_CODECS.get(self.compression.type)
        if codec is None:  # "producer": keep what the producer sent, untouched
            return records
        out: list[bytes] = []
        changed = False
        for pos, header in iter_batches(records):
            batch = records[pos : pos + header.size]
            # A batch failing its checksum goes on untouched, for Log.append to refuse: recompressed,
            # its corrupt records would get a valid CRC.
            if header.compression != codec and not header.is_control and crc_ok(records, pos, header):
                limit = self.log.config.max_decompressed_bytes
                out.append(recompress_batch(batch, codec, self.compression.level, limit))
                changed = True
            else:
                out.append(bytes(batch))
        return b"".join(out) if changed else records

    def delete_records_target(self, offset: int) -> int:
        """DeleteRecords, first step: check the request and return the log start offset it asks for
        (``offset``, or the high watermark for -1; never below the current start). Changes nothing:
        the caller makes the new offset durable, then moves the log start."""
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if not self.log.config.delete_enabled:  # a compacted topic keeps the latest record of every key
            raise KafkaError(
                ErrorCode.POLICY_VIOLATION,
                f"Records of partition {self.tp} can not be deleted due to the configured policy",
            )
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is not within [0, high watermark {self.high_watermark}]",
            )
        return max(target, self.log.log_start_offset)
