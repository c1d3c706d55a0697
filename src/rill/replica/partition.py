"""One partition replica on this broker: its log, leader epoch, ISR and high watermark.

The high watermark is the offset below which every in-sync replica has the records (the "committed"
records of the design): as leader, the smallest log end offset among the ISR, this replica's own and each
follower's as its fetches report it (``update_follower_fetch_state``). With the leader alone in the ISR it
advances with every append. Consumers read only below it.

A follower is caught up when it has fetched up to the leader's log end offset; one not caught up for
``replica.lag.time.max.ms`` is out of sync (``out_of_sync_replicas``), and one in the replica set but not the
ISR that has caught up to the high watermark may join it (``catching_up_replica``). Changing the ISR is the
caller's: it is written to the metadata store, and comes back through ``update_state``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
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


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower: its log end offset and log start offset as its last fetch reported
    them, when that was, the last time it was caught up (had fetched up to the leader's log end offset), as
    Kafka's Replica, and the high watermark last sent to it (a fetch waiting for data ends early when the high
    watermark has moved past it, so the follower, which may serve consumers, learns it promptly)."""

    log_end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    log_start_offset: int = -1
    last_sent_high_watermark: int = -1


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
        self.followers: dict[int, ReplicaState] = {r: ReplicaState() for r in state.replicas if r != node_id}
        # As leader: the log end offset at which this replica's leader epoch began (None as follower).
        self.leader_epoch_start_offset: int | None = None
        # As leader: the ISR being written to the metadata store, until that write is answered (Kafka's
        # PendingExpandIsr / PendingShrinkIsr); None when no change is in flight.
        self.pending_isr: tuple[int, ...] | None = None

    # -- leadership ----------------------------------------------------------------------------------

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.node_id

    def update_state(self, state: PartitionState) -> None:
        """Take a new leader, epoch, replica set or ISR. A new epoch resets what was known of the followers; a
        new replica set (a reassignment) keeps it for the replicas that stay."""
        if state.leader_epoch != self.state.leader_epoch:
            self.followers = {r: ReplicaState() for r in state.replicas if r != self.node_id}
        elif state.replicas != self.state.replicas:
            self.followers = {r: self.followers.get(r) or ReplicaState() for r in state.replicas if r != self.node_id}
        if state.leader != self.node_id or state.leader_epoch != self.state.leader_epoch:
            self.leader_epoch_start_offset = None  # set again by make_leader
        old = self.state
        if (state.leader, state.leader_epoch, state.partition_epoch) != (old.leader, old.leader_epoch,
                                                                          old.partition_epoch):  # fmt: skip
            self.pending_isr = None  # a state the store committed since: the change in flight is part of it or lost
        self.state = state

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR and, while a change is in flight, the replicas it adds: the high watermark counts every one of
        them (Kafka's maximal ISR), so that whichever way the change ends, each member of the ISR holds every
        record below the high watermark (a follower being removed counts until its removal is written)."""
        pending = self.pending_isr
        if pending is None:
            return self.state.isr
        return self.state.isr + tuple(r for r in pending if r not in self.state.isr)

    def make_leader(self) -> None:
        """This replica leads at a new epoch: the epoch starts at its log end (Kafka's makeLeader), and the high
        watermark moves as far as the ISR allows (alone in the ISR: to the log end)."""
        cache = self.log.leader_epoch_cache
        cache.assign(self.leader_epoch, self.log.log_end_offset)
        # Leading this epoch again (a session lost and found): it began where the cache says, not at the log end.
        starts = [start for epoch, start in cache.entries if epoch == self.leader_epoch]
        self.leader_epoch_start_offset = starts[0] if starts else self.log.log_end_offset
        self.maybe_increment_high_watermark()

    @property
    def high_watermark_lagging(self) -> bool:
        """As leader, whether the high watermark is still below the start of this leader's epoch: the records
        between them were written by earlier leaders, which may have counted some as committed already, so until
        the followers' fetches move it there this leader cannot tell consumers where the committed records end
        (KIP-207)."""
        start = self.leader_epoch_start_offset
        return start is not None and self.log.high_watermark < start

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Kafka's fencing of requests that carry a leader epoch (-1 = no check)."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        if current_leader_epoch > self.leader_epoch:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    def has_config(self, config: LogConfig, compression: TopicCompression, min_insync_replicas: int) -> bool:
        return (self.min_insync_replicas, self.compression, self.log.config) == (min_insync_replicas, compression,
                                                                                config)  # fmt: skip

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
        """Below the high watermark, the first offset of a transaction not yet completed and replicated."""
        return self.log.last_stable_offset

    def maybe_increment_high_watermark(self) -> bool:
        """As leader, advance the high watermark to the smallest log end offset in the ISR (this replica's and
        each in-sync follower's as last reported); True when it moved."""
        new_hw = self.log.log_end_offset
        for replica in self.maximal_isr:
            follower = self.followers.get(replica)
            if follower is not None:
                new_hw = min(new_hw, follower.log_end_offset)
        if new_hw > self.log.high_watermark:
            self.log.high_watermark = new_hw
            return True
        return False

    # -- followers (as leader) ---------------------------------------------------------------------------

    def update_follower_fetch_state(
        self, replica_id: int, fetch_offset: int, now_ms: int, log_start_offset: int = -1
    ) -> bool:
        """A follower fetched from ``fetch_offset``: it has everything below it. Returns True when the high
        watermark moved. Called once the fetch was read without an error; raises NOT_LEADER_OR_FOLLOWER for a
        broker that is not a replica of this partition and OFFSET_OUT_OF_RANGE for an offset outside the log (a
        follower never has records this log lacks), changing nothing."""
        follower = self.followers.get(replica_id)
        if follower is None or not self.is_leader:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {replica_id} is not a follower of {self.tp} here"
            )
        if not self.log.log_start_offset <= fetch_offset <= self.log.log_end_offset:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"{self.tp}: follower {replica_id}'s offset {fetch_offset} is outside "
                f"[{self.log.log_start_offset}, {self.log.log_end_offset}]",
            )
        follower.log_end_offset = fetch_offset
        follower.log_start_offset = log_start_offset
        follower.last_fetch_ms = now_ms
        if fetch_offset >= self.log.log_end_offset:
            follower.last_caught_up_ms = now_ms
        return self.maybe_increment_high_watermark()

    def quiet_follower_fetch(self, replica_id: int, fetch_offset: int, leader_epoch: int, log_start_offset: int,
                             now_ms: int | None) -> bool:  # fmt: skip
        """Whether a follower's fetch of this partition has nothing to read and moves nothing: this replica leads
        at ``leader_epoch`` (-1: not checked), the follower is in the ISR, its last fetch was from ``fetch_offset``
        already, and that is the log end, the high watermark and the high watermark last sent to it. With
        ``now_ms``, such a fetch is recorded as ``update_follower_fetch_state`` records it (fetched and caught up
        at ``now_ms``), without the read. False: the fetch takes the full path."""
        state = self.state
        follower = self.followers.get(replica_id)
        log = self.log
        if (state.leader != self.node_id or follower is None or follower.log_end_offset != fetch_offset
                or fetch_offset != log.log_end_offset or fetch_offset != log.high_watermark
                or follower.last_sent_high_watermark != fetch_offset or replica_id not in state.isr
                or (leader_epoch >= 0 and leader_epoch != state.leader_epoch)):  # fmt: skip
            return False
        if now_ms is not None:
            follower.last_fetch_ms = follower.last_caught_up_ms = now_ms
            follower.log_start_offset = log_start_offset
        return True

    def out_of_sync_replicas(self, now_ms: int, lag_time_max_ms: int) -> list[int]:
        """The followers in the ISR that have not been caught up for ``lag_time_max_ms`` (Kafka's ISR shrink
        rule; a follower never heard from counts from when this replica became leader). None while a change of the
        ISR is in flight."""
        out: list[int] = []
        if self.pending_isr is not None:
            return out
        for replica in self.state.isr:
            follower = self.followers.get(replica)
            if follower is None:
                continue
            if follower.last_caught_up_ms < 0:
                follower.last_caught_up_ms = now_ms  # the clock starts when leadership does
            if now_ms - follower.last_caught_up_ms > lag_time_max_ms:
                out.append(replica)
        return out

    def catching_up_replicas(self) -> list[int]:
        """The followers outside the ISR that have reached the high watermark (and this epoch's start), which
        Kafka adds back to the ISR."""
        if self.leader_epoch_start_offset is None or self.pending_isr is not None:
            return []
        floor = max(self.log.high_watermark, self.leader_epoch_start_offset)
        return [r for r, f in self.followers.items() if r not in self.state.isr and f.log_end_offset >= floor]

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

    def append_txn_marker_as_leader(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool
    ) -> LogAppendInfo:
        """A transaction marker, appended as with acks=all (``min.insync.replicas`` applies)."""
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if len(self.state.isr) < self.min_insync_replicas:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"ISR {list(self.state.isr)} is smaller than min.insync.replicas={self.min_insync_replicas}",
            )
        info = self.log.append_txn_marker(
            producer_id,
            producer_epoch,
            coordinator_epoch,
            commit,
            leader_epoch=self.leader_epoch,
            now_ms=int(time.time() * 1000),
        )
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
