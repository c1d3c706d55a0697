"""Transactional ids' state kept in ``__transaction_state`` (Kafka's TransactionStateManager).

An id lives in partition ``abs(java_string_hash(id)) % transaction.state.log.num.partitions``; its coordinator
is the leader of that partition. The topic is created on first need (FindCoordinator or InitProducerId with a
transactional id), compacted, with ``transaction.state.log.*`` settings. Each state change is one record
(``transaction_log``) appended as leader with acks=all and acknowledged once the high watermark passes it.

The coordinator follows its partitions' leadership: when this broker becomes leader of a partition, the
partition is loaded (replayed from its log start, the latest record per id winning, a tombstone removing the
id) while requests for its ids answer COORDINATOR_LOAD_IN_PROGRESS; when it stops leading one, its ids are
unloaded and answer NOT_COORDINATOR. The coordinator epoch of a partition is its leader epoch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from rill.common import TopicPartition
from rill.coordinator.group.group_metadata_manager import partition_for
from rill.coordinator.internal_topics import UnreadableRecords, iter_log_chunks, maybe_create_internal_topic
from rill.coordinator.transaction.transaction_log import (
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from rill.coordinator.transaction.transaction_metadata import (
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from rill.errors import ErrorCode, KafkaError
from rill.log.log import Log
from rill.metadata.store import TRANSACTION_STATE_TOPIC, MetadataStore
from rill.records.builder import build_batch
from rill.records.record import Record, decode_batch_records
from rill.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

WRITE_TIMEOUT_MS = 30000
"""How long a state record may take to reach the ISR (Kafka's default ``request.timeout.ms``)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class TxnPartition:
    """The loaded ids of one ``__transaction_state`` partition this broker leads."""

    coordinator_epoch: int
    ids: dict[str, TransactionMetadata] = field(default_factory=dict)


class TransactionStateManager:
    def __init__(self, config: object, metadata: MetadataStore, replica_manager: ReplicaManager) -> None:
        get = config.get  # type: ignore[attr-defined]
        self.configured_partitions = int(get("transaction.state.log.num.partitions"))
        self.replication_factor = int(get("transaction.state.log.replication.factor"))
        self.min_isr = int(get("transaction.state.log.min.isr"))
        self.segment_bytes = int(get("transaction.state.log.segment.bytes"))
        self.metadata = metadata
        self.replica_manager = replica_manager
        self.partitions: dict[int, TxnPartition] = {}  # loaded, by partition
        self.loading: dict[int, asyncio.Task[None]] = {}
        self.on_loaded: Callable[[int, TxnPartition], None] | None = None
        self.load_times_ms: list[float] = []  # the last loads' durations (metrics)
        self.active = True

    # -- placement ---------------------------------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        topic = self.metadata.topic(TRANSACTION_STATE_TOPIC)
        return len(topic.partitions) if topic is not None and topic.partitions else self.configured_partitions

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def leader_of(self, transactional_id: str) -> int:
        """The broker leading the id's partition (-1: none, or the topic does not exist)."""
        topic = self.metadata.topic(TRANSACTION_STATE_TOPIC)
        p = self.partition_for(transactional_id)
        if topic is None or p >= len(topic.partitions):
            return -1
        return topic.partitions[p].leader

    async def maybe_create_topic(self) -> None:
        """Create ``__transaction_state`` the first time it is needed, as ``__consumer_offsets`` is: not while
        fewer brokers than ``transaction.state.log.replication.factor`` are alive (COORDINATOR_NOT_AVAILABLE)."""
        configs = {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "min.insync.replicas": str(self.min_isr),
            "segment.bytes": str(self.segment_bytes),
            "unclean.leader.election.enable": "false",
        }
        await maybe_create_internal_topic(self.metadata, TRANSACTION_STATE_TOPIC, self.configured_partitions,
                                          self.replication_factor, configs,
                                          "transaction.state.log.replication.factor")  # fmt: skip

    # -- lookups -------------------------------------------------------------------------------------------

    def get(self, transactional_id: str) -> tuple[ErrorCode, TxnPartition | None]:
        """(NO_ERROR, the id's loaded partition) when this broker coordinates the id now; else the error:
        COORDINATOR_NOT_AVAILABLE (stopped, or no topic yet), COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR."""
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if self.metadata.topic(TRANSACTION_STATE_TOPIC) is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        p = self.partition_for(transactional_id)
        if p in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None
        loaded = self.partitions.get(p)
        if loaded is None:
            return ErrorCode.NOT_COORDINATOR, None
        return ErrorCode.NO_ERROR, loaded

    def all_metadata(self) -> Iterator[tuple[int, TransactionMetadata]]:
        for part in list(self.partitions.values()):
            for md in list(part.ids.values()):
                yield part.coordinator_epoch, md

    # -- writes --------------------------------------------------------------------------------------------

    async def append(self, md: TransactionMetadata, coordinator_epoch: int, transit: TxnTransitMetadata) -> ErrorCode:
        """Write ``transit`` (prepared on ``md``) with acks=all and apply it once acknowledged. On failure the
        pending transition is dropped and the state stays as it was; the error is Kafka's mapping onto the
        coordinator errors clients expect."""
        txn_id = md.transactional_id
        p = self.partition_for(txn_id)
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, p)
        value = None if transit.state == TransactionState.DEAD else encode_value(transit)
        batch = build_batch([Record(0, _now_ms(), encode_key(txn_id), value)])
        try:
            info = self.replica_manager.append_records(tp, memoryview(batch), -1)
            code = await self.replica_manager.wait_for_commit(tp, info.last_offset + 1, WRITE_TIMEOUT_MS / 1000)
        except KafkaError as e:
            code = e.code
        if code == ErrorCode.NO_ERROR:
            loaded = self.partitions.get(p)
            if loaded is None or loaded.coordinator_epoch != coordinator_epoch or loaded.ids.get(txn_id) is not md:
                # Unloaded (or loaded again at a new epoch) meanwhile: the new coordinator has it from the log.
                log.info("%s: %s written, but the coordinator moved meanwhile", txn_id, transit.state.display)
                md.abort_pending()
                return ErrorCode.NOT_COORDINATOR
            md.complete_transition_to(transit)
            if transit.state == TransactionState.DEAD:
                del loaded.ids[txn_id]
            return ErrorCode.NO_ERROR
        md.abort_pending()
        mapped = _coordinator_error(code)
        log.info("%s: writing %s to %s failed: %s (answered %s)", txn_id, transit.state.display, tp, code.name,
                 mapped.name)  # fmt: skip
        return mapped

    # -- leadership ----------------------------------------------------------------------------------------

    def led_partitions(self) -> dict[int, int]:
        """The partitions of ``__transaction_state`` this broker leads, with their leader epochs."""
        topic = self.metadata.topic(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return {}
        node = self.replica_manager.node_id
        return {s.partition: s.leader_epoch for s in topic.partitions if s.leader == node}

    def follow_leadership(self) -> tuple[list[int], list[int]]:
        """Start loading the partitions this broker has come to lead (or leads at a new epoch) and unload the
        ones it no longer leads; returns (gained, lost)."""
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
        gained = [p for p, epoch in led.items() if p not in self.partitions and p not in self.loading]
        for p in gained:
            self.loading[p] = asyncio.get_running_loop().create_task(
                self._load(p, led[p]), name=f"{TRANSACTION_STATE_TOPIC}-{p}-load"
            )
        if lost:
            log.info("Unloaded the transactional ids of %s partitions %s", TRANSACTION_STATE_TOPIC, sorted(set(lost)))
        return gained, sorted(set(lost))

    async def _load(self, p: int, epoch: int) -> None:
        started = time.monotonic()
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, p)
        try:
            loaded = TxnPartition(epoch)
            count = await self._replay(tp, loaded)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("Loading %s failed", tp)
            self.loading.pop(p, None)
            return
        if self.loading.get(p) is not asyncio.current_task():
            return
        del self.loading[p]
        self.partitions[p] = loaded
        elapsed_ms = (time.monotonic() - started) * 1000
        self.load_times_ms = [*self.load_times_ms[-99:], elapsed_ms]
        log.info("Loaded %d transactional id(s) from %d record(s) of %s (coordinator epoch %d) in %.1f ms",
                 len(loaded.ids), count, tp, epoch, elapsed_ms)  # fmt: skip
        if self.on_loaded is not None:
            self.on_loaded(p, loaded)

    async def _replay(self, tp: TopicPartition, loaded: TxnPartition) -> int:
        partition = self.replica_manager.partitions().get(tp)
        if partition is None:
            return 0
        return await replay_log(tp, partition.log, loaded)

    def shutdown(self) -> None:
        self.active = False
        for task in self.loading.values():
            task.cancel()
        self.loading.clear()
        self.partitions.clear()


async def replay_log(tp: TopicPartition, plog: Log, loaded: TxnPartition) -> int:
    """Replay the log of ``tp`` into ``loaded``; returns the records read. A record or batch that cannot be
    read is logged and skipped; a log that cannot be read further ends the replay there: the bytes of the
    topic may be any."""
    latest: dict[str, tuple[int, TxnTransitMetadata | None]] = {}
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
                    continue
                count += 1
                try:
                    txn_id = decode_key(record.key)
                    if txn_id is None:
                        continue
                    value = None if record.value is None else decode_value(record.value)
                    latest[txn_id] = (record.offset, value)
                except Exception as e:
                    unreadable.skip(record.offset, e)
        await asyncio.sleep(0)  # other requests are served between chunks
    for txn_id, (at, transit) in latest.items():
        if transit is not None and transit.state != TransactionState.DEAD:
            try:
                loaded.ids[txn_id] = TransactionMetadata.from_transit(txn_id, transit)
            except Exception as e:
                unreadable.skip(at, e)
    unreadable.done()
    return count


def _coordinator_error(code: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed append to ``__transaction_state``."""
    if code in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_SIZE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code
