"""The replica manager: the partitions this broker hosts, and the produce and fetch paths into their logs.

It follows the metadata store: at start it makes the hosted partitions match the store (``sync_with_metadata``),
then it applies each change as the store tells it (``on_metadata_delta``): when a topic appears, grows,
changes configs or is deleted, the partitions (and their logs) on this broker follow, at a cost in proportion
to the change: only the partitions whose state or configs differ from what they hold are acted on (become leader
or follower, wake their waiting requests, move to another leader's fetcher). Appends wake the delayed fetches that
watch the partition.

Transactions: ``append_txn_marker`` writes a COMMIT or ABORT marker as leader (WriteTxnMarkers) and tells the
marker listeners (the group coordinator materialises or drops pending transactional offset commits);
``txn_verifier``, when set, is asked before a transactional batch opens a transaction on a partition
(KIP-890); ``read`` with ``isolation_level`` 1 (read_committed) stops at the last stable offset and lists the
aborted transactions in the data returned.

Fetch from the closest replica (KIP-392, ``rill.replica.read_replica``): with a ``replica_selector``, the leader
answers a consumer in another replica's rack with that replica as the preferred read replica; a follower in the
ISR serves a consumer fetch that carries client metadata (Fetch v11+) up to its high watermark, which it learns
from its fetches (the leader answers a follower's fetch at once when the high watermark moved past the one it
last sent it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import resource
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from rill.common import FileRegion, TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.fsutil import open_descriptors
from rill.log.log import LogAppendInfo
from rill.log.log_config import LogConfig
from rill.log.log_manager import LogManager
from rill.log.producer_state import VerificationGuard
from rill.metadata.store import MetadataDelta, MetadataStore, PartitionState, TopicState, is_older
from rill.records.batch import BATCH_HEADER_SIZE, parse_header
from rill.replica.isr_changes import IsrChanges
from rill.replica.partition import Partition, TopicCompression
from rill.replica.purgatory import DelayedOperationPurgatory
from rill.replica.read_replica import ReplicaSelector, preferred_read_replica
from rill.replica.replica_alter_log_dirs import ReplicaAlterLogDirsManager
from rill.replica.replica_fetcher import ReplicaFetcherManager

# Kafka's request.timeout.ms default: how long a marker append waits for the high watermark to pass it.
DEFAULT_REQUEST_TIMEOUT_MS = 30000
READ_COMMITTED = 1

TxnMarkerListener = Callable[[TopicPartition, int, bool, int], None]
TxnVerifier = Callable[[str, int, int, TopicPartition], Awaitable[ErrorCode]]

log = logging.getLogger(__name__)

EffectiveConfigs = Callable[[Mapping[str, str]], Mapping[str, str]]

# How many new logs a metadata change makes before the loop serves other work again.
LOG_CREATION_CHUNK = 32
# Descriptors a new partition keeps open (its segment's .log; its indexes are mapped, a map holding one
# descriptor, only once it has entries), and those kept free for connections, index maps and everything
# else when the broker takes on new partitions (at most a quarter of the limit).
FILES_PER_PARTITION = 1
OPEN_FILES_RESERVE = 1024


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """What one partition contributes to a Fetch response."""

    error: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    regions: list[FileRegion]
    size: int
    aborted_transactions: list[tuple[int, int]] | None = None  # (producer id, first offset), read_committed
    preferred_read_replica: int = -1  # KIP-392: the replica the consumer should read from instead (no records)


class ReplicaManager(IsrChanges):
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
        self.produce_purgatory = DelayedOperationPurgatory("Produce")
        self.fetchers: ReplicaFetcherManager | None = None  # set in a cluster: followers fetch from leaders
        self._isr_changing: set[TopicPartition] = set()
        self._expanding: asyncio.Future[None] | None = None
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.request_timeout_ms = DEFAULT_REQUEST_TIMEOUT_MS
        self._txn_marker_listeners: list[TxnMarkerListener] = []
        # KIP-890 part 1: asked before a transactional batch opens a transaction on a partition; set by the
        # transaction coordinator; None = no verification.
        self.txn_verifier: TxnVerifier | None = None
        # KIP-392: consulted for consumers' fetches as leader (replica.selector.class); None = the leader serves.
        self.replica_selector: ReplicaSelector | None = None
        # Moves of replicas between this broker's log dirs (AlterReplicaLogDirs).
        self.log_dir_mover = ReplicaAlterLogDirsManager(log_manager, self.partitions, self.has_partition_in_metadata)
        metadata.add_listener(self.on_metadata_delta)

    # -- following the metadata --------------------------------------------------------------------------

    def _configs_for(self, topic: TopicState) -> tuple[LogConfig, TopicCompression, int]:
        merged = dict(self._effective_configs(topic.configs))
        try:
            config = LogConfig.from_topic_configs(merged, LogConfig())
        except KafkaError as e:  # a stored value this version refuses never stops the broker: defaults apply
            log.warning("Topic %s: configs %s do not apply (%s); the defaults do", topic.name, merged, e.message)
            merged = dict(self._effective_configs({}))
            config = LogConfig.from_topic_configs(merged, LogConfig())
        compression_type = merged.get("compression.type", "producer")
        level = merged.get(f"compression.{compression_type}.level")  # gzip, lz4 and zstd have levels
        return (
            config,
            TopicCompression(compression_type, None if level is None else int(level)),
            int(merged.get("min.insync.replicas", "1")),
        )

    def sync_with_metadata(self) -> None:
        """At start: create, update and delete local partitions so they match the metadata store, and set
        aside the logs no partition claims."""
        wanted = {
            TopicPartition(topic.name, state.partition)
            for topic in self.metadata.topics().values()
            for state in topic.partitions
            if self.node_id in state.replicas
        }
        self._remove_partitions([tp for tp in self._partitions if tp not in wanted])
        try:
            self._host(self.metadata.topics().values())
        finally:
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

    async def on_metadata_delta(self, delta: MetadataDelta) -> None:
        """Follow one change of the metadata: deleted topics' partitions go, changed topics' partitions are
        made or updated (``LOG_CREATION_CHUNK`` logs at a time, the loop serving others between chunks), and a
        change of the dynamic broker configs reaches every partition's configs. A topic that cannot be followed
        (a log that cannot be made) does not stop the others: the first error is raised at the end, and the store
        tells this change again."""
        failed: Exception | None = None
        acted: set[TopicPartition] = set()  # the partitions made, changed or dropped: their fetchers follow
        names = {topic.name for topic in delta.deleted}  # while their logs are not deleted, not hosted again
        if delta.deleted:
            gone = [tp for tp in self._partitions if tp.topic in names]
            self._forget_partitions(gone)
            acted.update(gone)
            try:
                await self.log_manager.delete_logs_async(gone)
                names = set()
            except Exception as e:
                failed = e
        changed = list(self.metadata.topics().values()) if delta.broker_configs else list(delta.changed)
        for topic in (t for t in changed if t.name not in names):
            try:
                # A reassignment that moved this broker's replica away: the replica goes (Kafka's StopReplica).
                dropped = [tp for s in topic.partitions if self.node_id not in s.replicas
                           and (tp := TopicPartition(topic.name, s.partition)) in self._partitions]  # fmt: skip
                if dropped:
                    self._forget_partitions(dropped)
                    acted.update(dropped)
                    await self.log_manager.delete_logs_async(dropped)
                configs = self._configs_for(topic)
                states = [s for s in topic.partitions if self.node_id in s.replicas and (
                    (held := self._partitions.get(TopicPartition(topic.name, s.partition))) is None
                    or s != held.state or not held.has_config(*configs))]  # fmt: skip
                for start in range(0, max(len(states), 1), LOG_CREATION_CHUNK):
                    await self._host_async([topic], states[start : start + LOG_CREATION_CHUNK], acted)
            except Exception as e:
                log.error("Broker %d could not follow topic %s: %s", self.node_id, topic.name, e)
                failed = failed or e
        if acted:
            self.update_fetchers(acted)
        if failed is not None:
            raise failed

    def _host(self, topics: Iterable[TopicState], only: list[PartitionState] | None = None) -> None:
        """Make or update the local partitions of ``topics`` (of ``only`` those states, when given). The
        logs that can be made are hosted; a failure to make one is raised at the end."""
        new = self._update_hosted(topics, only)
        if new:
            failed: KafkaError | None = None
            try:
                self.log_manager.get_or_create_logs([(tp, tid, cfg) for tp, _, tid, cfg, _, _ in new])
            except KafkaError as e:  # the logs that could be made are hosted; the error is raised at the end
                failed = e
            self._make_partitions(new, failed)

    async def _host_async(self, topics: Iterable[TopicState], only: list[PartitionState] | None = None,
                          acted: set[TopicPartition] | None = None) -> None:  # fmt: skip
        """``_host`` with the new logs' files made in a worker thread; adds those made or changed to ``acted``."""
        new = self._update_hosted(topics, only, acted)
        if acted is not None:
            acted.update(tp for tp, *_ in new)
        if new:
            failed: KafkaError | None = None
            try:
                await self.log_manager.get_or_create_logs_async([(tp, tid, cfg) for tp, _, tid, cfg, _, _ in new])
            except KafkaError as e:
                failed = e
            self._make_partitions(new, failed)

    def _update_hosted(
        self, topics: Iterable[TopicState], only: list[PartitionState] | None, acted: set[TopicPartition] | None = None
    ) -> list[tuple[TopicPartition, PartitionState, uuid.UUID | None, LogConfig, TopicCompression, int]]:
        """Update the hosted partitions of ``topics`` whose state or configs differ from what they hold, adding them
        to ``acted``; returns those to make."""
        new: list[tuple[TopicPartition, PartitionState, uuid.UUID | None, LogConfig, TopicCompression, int]] = []
        for topic in topics:
            config, compression, min_isr = self._configs_for(topic)
            for state in only if only is not None else topic.partitions:
                if self.node_id not in state.replicas:
                    continue
                tp = TopicPartition(topic.name, state.partition)
                partition = self._partitions.get(tp)
                if partition is None:
                    new.append((tp, state, topic.topic_id, config, compression, min_isr))
                elif state != partition.state or not partition.has_config(config, compression, min_isr):
                    if acted is not None:
                        acted.add(tp)
                    was_leader, epoch = partition.is_leader, partition.leader_epoch
                    if not is_older(state, partition.state):  # a delta behind what it knows is not taken
                        partition.update_state(state)
                    partition.update_config(config, compression, min_isr)
                    if partition.is_leader and (not was_leader or state.leader_epoch != epoch):
                        self._become_leader(partition)
                    elif partition.is_leader:  # an ISR the controller shrank may let the high watermark move
                        partition.maybe_increment_high_watermark()
                    self.produce_purgatory.check_and_complete(tp)  # leadership or the ISR may have changed
                    self.fetch_purgatory.check_and_complete(tp)
        return new

    def _make_partitions(
        self,
        new: list[tuple[TopicPartition, PartitionState, uuid.UUID | None, LogConfig, TopicCompression, int]],
        failed: KafkaError | None,
    ) -> None:
        for tp, state, _, _, compression, min_isr in new:
            plog = self.log_manager.get_log(tp)
            if plog is None:
                continue
            partition = Partition(tp, plog, state, self.node_id, compression, min_isr)
            self._partitions[tp] = partition
            if partition.is_leader:
                self._become_leader(partition)
        self.log_dir_mover.resume()  # a move a stop interrupted goes on once its partition is hosted
        if failed is not None:
            raise failed

    def _become_leader(self, partition: Partition) -> None:
        """This replica leads ``partition`` at a new epoch: the epoch starts at its log end (Kafka's makeLeader),
        and the high watermark moves as far as the ISR allows (alone in the ISR: to the log end; a
        checkpointed value may be stale after a crash)."""
        partition.make_leader()

    def on_session_change(self, alive: bool) -> None:
        """The metadata store's session with the cluster ended (``alive`` False): this broker may no longer
        be the leader anywhere (the controller moves leadership when the session expires), so it stops acting
        as one at once: produces are refused with NOT_LEADER_OR_FOLLOWER and waiting ones end. The state comes
        back from the store once a new session is established."""
        if alive:
            return
        for tp, partition in self._partitions.items():
            if partition.is_leader:
                partition.update_state(dataclasses.replace(partition.state, leader=-1))
                self.produce_purgatory.check_and_complete(tp)
                self.fetch_purgatory.check_and_complete(tp)

    def update_fetchers(self, only: Iterable[TopicPartition] | None = None) -> None:
        """Give each partition this broker follows (of ``only``, when given: those that changed) to the fetcher of
        its leader."""
        if self.fetchers is not None:
            self.fetchers.update(self._partitions, self.metadata.brokers(), only)

    def _remove_partitions(self, gone: list[TopicPartition]) -> None:
        self._forget_partitions(gone)
        self.log_manager.delete_logs(gone)

    def _forget_partitions(self, gone: list[TopicPartition]) -> None:
        for tp in gone:
            del self._partitions[tp]
            self.fetch_purgatory.check_and_complete(tp)
            self.produce_purgatory.check_and_complete(tp)
            log.info("Deleted partition %s", tp)

    def capacity_problem(self, new_partitions: int) -> str | None:
        """Why this broker cannot host ``new_partitions`` more partitions (each keeps ``FILES_PER_PARTITION``
        descriptors open, on top of those open now, under the open-files limit less a reserve for
        connections and index maps), or None when it can."""
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if limit == resource.RLIM_INFINITY:
            return None
        reserve = min(OPEN_FILES_RESERVE, limit // 4)
        open_now = open_descriptors()
        if open_now is None:  # no /proc: the partitions' own
            open_now = len(self._partitions) * FILES_PER_PARTITION
        needed = open_now + new_partitions * FILES_PER_PARTITION + reserve
        if needed <= limit:
            return None
        most = max(0, (limit - reserve - open_now) // FILES_PER_PARTITION)
        return (
            f"{new_partitions} new partitions would need {needed} open files on broker {self.node_id} ({open_now} "
            f"open now, {reserve} kept free), over its open-files limit of {limit}; at most {most} more fit"
        )

    async def persist_log_start_offsets(self, moved: Mapping[TopicPartition, int]) -> set[TopicPartition]:
        """DeleteRecords: make the new log start offsets ``moved`` durable before they apply; returns
        the partitions whose checkpoint could not be written (see ``LogManager.write_log_start_offsets``)."""
        return await self.log_manager.write_log_start_offsets(moved)

    # -- lookups -----------------------------------------------------------------------------------------

    def partitions(self) -> Mapping[TopicPartition, Partition]:
        return self._partitions

    def get_partition(self, tp: TopicPartition) -> Partition:
        """The partition's replica here. Without one: NOT_LEADER_OR_FOLLOWER when the cluster has the partition
        (as Kafka answers, so that the client refreshes its metadata and finds the leader), else
        UNKNOWN_TOPIC_OR_PARTITION."""
        partition = self._partitions.get(tp)
        if partition is None:
            if self.has_partition_in_metadata(tp):
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"This server holds no replica of {tp}.")
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"This server does not host {tp}.")
        return partition

    def has_partition_in_metadata(self, tp: TopicPartition) -> bool:
        topic = self.metadata.topic(tp.topic)
        return topic is not None and 0 <= tp.partition < len(topic.partitions)

    def leader_partition(self, tp: TopicPartition) -> Partition:
        partition = self.get_partition(tp)
        if not partition.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"This server is not the leader of {tp}.")
        return partition

    # -- produce -----------------------------------------------------------------------------------------

    def append_records(
        self,
        tp: TopicPartition,
        records: memoryview,
        required_acks: int,
        *,
        verification_guard: VerificationGuard | None = None,
    ) -> LogAppendInfo:
        """Append as leader. An acks=all produce then waits for the records to be committed
        (``wait_for_commit``), unless the high watermark is already past them. Transactional records that
        were verified (``needs_txn_verification``) come with their guard: when they would open a transaction
        and a marker of the producer landed since the verification began, they are refused (INVALID_TXN_STATE)."""
        partition = self.leader_partition(tp)
        if verification_guard is not None:
            partition.log.producer_state.check_verified(verification_guard)
        hw = partition.high_watermark
        info = partition.append_records_as_leader(records, required_acks)
        if not info.duplicate:
            self.fetch_purgatory.check_and_complete(tp)
        if partition.high_watermark != hw:
            self.produce_purgatory.check_and_complete(tp)
        return info

    def needs_txn_verification(self, tp: TopicPartition, records: memoryview) -> VerificationGuard | None:
        """A guard naming the producer and epoch when ``records`` starts with a transactional batch of a producer
        that has no ongoing transaction of that epoch on ``tp`` (which the verifier must then allow, and which
        ``append_records`` checks again); None otherwise."""
        if self.txn_verifier is None or len(records) < BATCH_HEADER_SIZE:
            return None
        header = parse_header(records)
        if not header.is_transactional or header.producer_id < 0:
            return None
        return self.start_txn_verification(tp, header.producer_id, header.producer_epoch)

    def start_txn_verification(
        self, tp: TopicPartition, producer_id: int, producer_epoch: int
    ) -> VerificationGuard | None:
        """KIP-890: None when no verification is needed (none is set up, or the producer's transaction of this
        epoch is ongoing on ``tp``); else the guard of a verification of the producer's transaction on ``tp``,
        Kafka's VerificationGuard, to hand to ``append_records`` once the verifier allowed it."""
        if self.txn_verifier is None:
            return None
        partition = self._partitions.get(tp)
        if partition is None or partition.log.has_ongoing_txn(producer_id, producer_epoch):
            return None
        return partition.log.producer_state.start_verification(producer_id, producer_epoch)

    async def append_txn_marker(
        self,
        tp: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> ErrorCode:
        """As the leader of ``tp``: append a COMMIT or ABORT marker for the producer (ending its ongoing
        transaction there; an aborted one goes into the transaction index), tell the marker listeners, and wait
        until the high watermark passes the marker (REQUEST_TIMED_OUT after ``request_timeout_ms``). Returns
        NO_ERROR or the partition's error (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
        KAFKA_STORAGE_ERROR, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, NOT_ENOUGH_REPLICAS)."""
        try:
            partition = self.leader_partition(tp)
            hw = partition.high_watermark
            info = partition.append_txn_marker_as_leader(producer_id, producer_epoch, coordinator_epoch, commit)
        except KafkaError as e:
            log.debug("Marker for producer %d on %s refused: %s", producer_id, tp, e.message)
            return e.code
        self.fetch_purgatory.check_and_complete(tp)
        if partition.high_watermark != hw:
            self.produce_purgatory.check_and_complete(tp)
        for listener in list(self._txn_marker_listeners):
            try:
                listener(tp, producer_id, commit, info.first_offset)
            except Exception:  # a listener's failure is its own: the marker is written
                log.exception("Transaction marker listener failed for %s", tp)
        return await self.wait_for_commit(tp, info.last_offset + 1, self.request_timeout_ms / 1000.0)

    def add_txn_marker_listener(self, fn: TxnMarkerListener) -> None:
        """``fn(tp, producer_id, commit, marker_offset)`` runs on the loop after a marker is appended here as
        leader."""
        self._txn_marker_listeners.append(fn)

    def committed(self, tp: TopicPartition, end_offset: int) -> ErrorCode | None:
        """Kafka's check of a delayed produce: None while the records below ``end_offset`` are not committed
        (the high watermark is below it); then NO_ERROR, or NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR is
        smaller than ``min.insync.replicas``; NOT_LEADER_OR_FOLLOWER once this broker is no longer the leader."""
        partition = self._partitions.get(tp)
        if partition is None or not partition.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if partition.high_watermark < end_offset:
            return None
        if len(partition.state.isr) < partition.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NO_ERROR

    async def wait_for_commit(self, tp: TopicPartition, end_offset: int, timeout_s: float) -> ErrorCode:
        """Wait in the produce purgatory until ``committed`` answers, or REQUEST_TIMED_OUT after ``timeout_s``
        (the request's ``timeout_ms``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.committed(tp, end_offset)
            if code is not None:
                return code
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return ErrorCode.REQUEST_TIMED_OUT
            await self.produce_purgatory.wait([tp], remaining)

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
        isolation_level: int = 0,
        client_rack: str | None = None,
    ) -> PartitionRead:
        """Read one partition for a consumer (up to the high watermark; with ``isolation_level`` 1, up to the
        last stable offset, with the aborted transactions in range) or a replica (up to the log end).

        ``client_rack`` is a consumer's rack when its fetch carries client metadata (Fetch v11+; "" without a
        rack), None otherwise. With it, a follower in the ISR serves the read (``_read_as_follower``), and the
        leader, when a replica selector is set, may answer with a preferred read replica instead of records."""
        partition = self._partitions.get(tp)
        if partition is None or not partition.is_leader:
            return self._read_not_as_leader(
                tp, partition, fetch_offset, max_bytes, current_leader_epoch, min_one_batch, committed_only,
                isolation_level, client_rack,
            )  # fmt: skip
        try:
            partition.check_leader_epoch(current_leader_epoch)
        except KafkaError as e:
            return PartitionRead(e.code, -1, -1, -1, [], 0)
        # KIP-207: a new leader whose high watermark is below its epoch's start does not know where the committed
        # records end; a consumer already past its high watermark waits (as on a follower).
        if (committed_only and partition.high_watermark_lagging
                and partition.high_watermark < fetch_offset <= partition.log_end_offset):  # fmt: skip
            return PartitionRead(ErrorCode.OFFSET_NOT_AVAILABLE, -1, -1, -1, [], 0)
        if client_rack and self.replica_selector is not None:
            racks = {b.node_id: b.rack for b in self.metadata.brokers()}
            now_ms = int(time.time() * 1000)
            preferred = preferred_read_replica(self.replica_selector, partition, client_rack, fetch_offset, racks,
                                               now_ms)  # fmt: skip
            if preferred >= 0:  # as Kafka: no records, the consumer reads them from that replica
                return PartitionRead(ErrorCode.NO_ERROR, partition.high_watermark, partition.last_stable_offset,
                                     partition.log_start_offset, [], 0, None, preferred)  # fmt: skip
        return self._read_local(partition, fetch_offset, max_bytes, min_one_batch, committed_only, isolation_level)

    def _read_not_as_leader(
        self,
        tp: TopicPartition,
        partition: Partition | None,
        fetch_offset: int,
        max_bytes: int,
        current_leader_epoch: int,
        min_one_batch: bool,
        committed_only: bool,
        isolation_level: int,
        client_rack: str | None,
    ) -> PartitionRead:
        """A read on a broker that does not lead the partition: a consumer's fetch with client metadata is
        served by a follower in the ISR; anything else answers NOT_LEADER_OR_FOLLOWER (a consumer's also when this
        broker holds no replica of a partition the cluster has, as Kafka answers), or UNKNOWN_TOPIC_OR_PARTITION."""
        if partition is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if committed_only and self.has_partition_in_metadata(tp):
                code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            return PartitionRead(code, -1, -1, -1, [], 0)
        if client_rack is None:
            return PartitionRead(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1, -1, [], 0)
        try:
            partition.check_leader_epoch(current_leader_epoch)
        except KafkaError as e:
            return PartitionRead(e.code, -1, -1, -1, [], 0)
        return self._read_as_follower(partition, fetch_offset, max_bytes, min_one_batch, isolation_level)

    def _read_as_follower(
        self, partition: Partition, fetch_offset: int, max_bytes: int, min_one_batch: bool, isolation_level: int
    ) -> PartitionRead:
        """A consumer's read from a follower (KIP-392): only from a follower in the ISR of a partition with a
        leader, and never beyond its high watermark (read_committed: its last stable offset). An offset above the
        high watermark that the log holds answers OFFSET_NOT_AVAILABLE (the consumer retries: the high watermark
        it knows from the leader is ahead of this replica's), one outside the log OFFSET_OUT_OF_RANGE."""
        state = partition.state
        if state.leader < 0 or self.node_id not in state.isr:
            return PartitionRead(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1, -1, [], 0)
        hw = partition.high_watermark
        if hw < fetch_offset <= partition.log_end_offset:
            return PartitionRead(ErrorCode.OFFSET_NOT_AVAILABLE, hw, partition.last_stable_offset,
                                 partition.log_start_offset, [], 0)  # fmt: skip
        return self._read_local(partition, fetch_offset, max_bytes, min_one_batch, True, isolation_level)

    def _read_local(
        self,
        partition: Partition,
        fetch_offset: int,
        max_bytes: int,
        min_one_batch: bool,
        committed_only: bool,
        isolation_level: int,
    ) -> PartitionRead:
        hw = partition.high_watermark
        try:
            if committed_only and isolation_level == READ_COMMITTED:
                data = partition.log.read_committed(fetch_offset, max_bytes, min_one_batch=min_one_batch)
            else:
                data = partition.log.read(
                    fetch_offset,
                    max_bytes,
                    max_offset=hw if committed_only else None,
                    min_one_batch=min_one_batch,
                )
        except KafkaError as e:
            return PartitionRead(e.code, hw, partition.last_stable_offset, partition.log_start_offset, [], 0)
        aborted = None
        if data.aborted_transactions is not None:
            aborted = [(t.producer_id, t.first_offset) for t in data.aborted_transactions]
        return PartitionRead(
            ErrorCode.NO_ERROR,
            hw,
            partition.last_stable_offset,
            partition.log_start_offset,
            data.regions,
            data.size,
            aborted,
        )

    async def wait_for_appends(self, tps: Iterable[TopicPartition], timeout_s: float) -> bool:
        return await self.fetch_purgatory.wait(tps, timeout_s)

    def shutdown(self) -> None:
        self.log_dir_mover.shutdown()
        self.fetch_purgatory.wake_all()
        self.produce_purgatory.close()
