"""The transaction coordinator (Kafka's TransactionCoordinator): InitProducerId with a transactional id,
AddPartitionsToTxn (and its KIP-890 verification), AddOffsetsToTxn, EndTxn, DescribeTransactions,
ListTransactions, and the timers that abort transactions past their timeout and remove idle ids.

Every change follows the same order: the request is checked against the id's state (a refused request
changes nothing), the new state is written to ``__transaction_state`` and acknowledged, and only then applied
(``TransactionStateManager.append``). EndTxn writes PrepareCommit or PrepareAbort and answers; the markers then
go to every partition of the transaction (``TransactionMarkerChannelManager``), and once all are acknowledged
CompleteCommit or CompleteAbort is written. Until then the id answers CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rill.common import TopicPartition
from rill.config.broker_config import effective_broker_value
from rill.coordinator.transaction.transaction_marker_channel import TransactionMarkerChannelManager
from rill.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransition,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from rill.coordinator.transaction.transaction_state_manager import TransactionStateManager, TxnPartition
from rill.errors import ErrorCode, KafkaError
from rill.metadata.store import TRANSACTION_STATE_TOPIC, MetadataDelta, dynamic_broker_configs
from rill.protocol import ApiKey

log = logging.getLogger(__name__)

S = TransactionState
COMPLETION_RETRY_S = 0.2
_RETRIABLE_FOR_PRODUCE = frozenset({
    ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.NETWORK_EXCEPTION,
})  # fmt: skip


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionCoordinator:
    @classmethod
    def create(cls, services: Any) -> TransactionCoordinator:
        manager = TransactionStateManager(services.config, services.metadata, services.replica_manager)
        markers = TransactionMarkerChannelManager(
            services.node_id, services.metadata, services.replica_manager, services.config
        )
        coordinator = cls(services.config, manager, markers, services.producer_ids)
        services.metadata.add_listener(coordinator.on_metadata_delta)
        coordinator.startup()
        services.replica_manager.txn_verifier = coordinator.verify_partition
        return coordinator

    def __init__(
        self, config: Any, manager: TransactionStateManager, markers: TransactionMarkerChannelManager, producer_ids: Any
    ) -> None:
        self.config = config
        self.manager = manager
        self.markers = markers
        self.producer_ids = producer_ids
        self.max_timeout_ms = int(config.get("transaction.max.timeout.ms"))
        self.abort_interval_ms = int(config.get("transaction.abort.timed.out.transaction.cleanup.interval.ms"))
        self.expire_interval_ms = int(config.get("transaction.remove.expired.transaction.cleanup.interval.ms"))
        self.id_expiration_ms = int(config.get("transactional.id.expiration.ms"))
        self.outcomes = {"committed": 0, "aborted": 0, "timed_out": 0, "expired_ids": 0}
        self._tasks: set[asyncio.Task[Any]] = set()
        manager.on_loaded = self._on_partition_loaded

    @property
    def active(self) -> bool:
        return self.manager.active

    def startup(self) -> None:
        self.manager.follow_leadership()
        self._spawn(self._every(self.abort_interval_ms, self.abort_timed_out_transactions), "txn-abort-timed-out")
        self._spawn(self._every(self.expire_interval_ms, self.remove_expired_transactional_ids), "txn-expire-ids")

    async def shutdown(self) -> None:
        self.manager.shutdown()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.markers.close()

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _every(self, interval_ms: int, fn: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                fn()
            except Exception:
                log.exception("%s failed", getattr(fn, "__name__", fn))

    async def on_metadata_delta(self, delta: MetadataDelta) -> None:
        if self.active and any(t.name == TRANSACTION_STATE_TOPIC for t in delta.changed):
            self.manager.follow_leadership()

    def _on_partition_loaded(self, partition: int, loaded: TxnPartition) -> None:
        """A loaded transaction that was preparing to commit or abort has its markers sent (again)."""
        for md in loaded.ids.values():
            if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT) and not md.pending_transition_in_progress:
                transit = md.prepare_complete(_now_ms())
                name = f"txn-complete-{md.transactional_id}"
                self._spawn(self._complete(md, loaded.coordinator_epoch, transit), name)

    # -- InitProducerId ----------------------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> InitResult:
        if not transactional_id:
            return InitResult(ErrorCode.INVALID_REQUEST)
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return InitResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        code, part = self.manager.get(transactional_id)
        if part is None:
            return InitResult(code)
        md = part.ids.get(transactional_id)
        new_pid: int | None = None
        if md is None or md.is_producer_epoch_exhausted:
            new_pid = await self.producer_ids.generate()
            code, part = self.manager.get(transactional_id)  # checked again after the wait
            if part is None:
                return InitResult(code)
            md = part.ids.get(transactional_id)
            if md is None:
                md = TransactionMetadata(
                    transactional_id,
                    producer_id=new_pid,
                    previous_producer_id=NO_PRODUCER_ID,
                    producer_epoch=NO_PRODUCER_EPOCH,
                    last_producer_epoch=NO_PRODUCER_EPOCH,
                    txn_timeout_ms=timeout_ms,
                    state=S.EMPTY,
                    txn_last_update_ms=_now_ms(),
                )
                part.ids[transactional_id] = md
        coordinator_epoch = part.coordinator_epoch
        prepared = self._prepare_init(md, timeout_ms, expected, new_pid)
        if isinstance(prepared, ErrorCode):
            return InitResult(prepared)
        if prepared.state == S.PREPARE_EPOCH_FENCE:
            # The previous instance's transaction is aborted first (with the epoch bumped so that instance is
            # fenced); the new one is told to retry, and its retry bumps the epoch again.
            code = await self._end_transaction(transactional_id, prepared.producer_id, prepared.producer_epoch,
                                               commit=False, from_client=False)  # fmt: skip
            if md.pending_state == S.PREPARE_EPOCH_FENCE:
                md.abort_pending()
            return InitResult(code if code != ErrorCode.NO_ERROR else ErrorCode.CONCURRENT_TRANSACTIONS)
        code = await self.manager.append(md, coordinator_epoch, prepared)
        if code != ErrorCode.NO_ERROR:
            return InitResult(code)
        log.info("Initialized transactional id %s: producer id %d, epoch %d", transactional_id,
                 prepared.producer_id, prepared.producer_epoch)  # fmt: skip
        return InitResult(ErrorCode.NO_ERROR, prepared.producer_id, prepared.producer_epoch)

    def _prepare_init(
        self, md: TransactionMetadata, timeout_ms: int, expected: tuple[int, int] | None, new_pid: int | None
    ) -> TxnTransitMetadata | ErrorCode:
        if md.pending_transition_in_progress:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if expected is not None and not self._valid_expected(md, expected):
            return ErrorCode.PRODUCER_FENCED
        now = _now_ms()
        if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if md.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            if md.is_producer_epoch_exhausted and (expected is None or expected[1] == md.producer_epoch):
                if new_pid is None:  # exhausted meanwhile: the client retries and gets a new id then
                    return ErrorCode.CONCURRENT_TRANSACTIONS
                return md.prepare_producer_id_rotation(new_pid, timeout_ms, now, expected is not None)
            transit = md.prepare_increment_producer_epoch(timeout_ms, None if expected is None else expected[1], now)
            return ErrorCode.PRODUCER_FENCED if transit is None else transit
        if md.state == S.ONGOING:
            try:
                return md.prepare_fence_producer_epoch(now)
            except IllegalTransition as e:
                log.error("%s", e)
                return ErrorCode.UNKNOWN_SERVER_ERROR
        log.error("%s: InitProducerId found the id in state %s", md.transactional_id, md.state.display)
        return ErrorCode.UNKNOWN_SERVER_ERROR

    @staticmethod
    def _valid_expected(md: TransactionMetadata, expected: tuple[int, int]) -> bool:
        """KIP-360: the producer id and epoch a producer gives must be the id's current producer id (the
        epoch is checked by the bump), or the previous one with an exhausted epoch (a retry of a rotation)."""
        pid, epoch = expected
        return (
            md.producer_epoch == NO_PRODUCER_EPOCH
            or pid == md.producer_id
            or (pid == md.previous_producer_id and epoch >= 0x7FFF - 1)
        )

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------------------

    def _check_producer(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, TransactionMetadata | None, int]:
        code, part = self.manager.get(transactional_id)
        if part is None:
            return code, None, -1
        md = part.ids.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None, -1
        if md.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED, None, -1
        if md.pending_transition_in_progress or md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS, None, -1
        return ErrorCode.NO_ERROR, md, part.coordinator_epoch

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        code, md, coordinator_epoch = self._check_producer(transactional_id, producer_id, producer_epoch)
        if md is None:
            return code
        wanted = set(partitions)
        if md.state == S.ONGOING and wanted <= md.partitions:
            return ErrorCode.NO_ERROR
        transit = md.prepare_add_partitions(wanted, _now_ms())
        return await self.manager.append(md, coordinator_epoch, transit)

    def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """KIP-890's check (AddPartitionsToTxn verify_only): is each partition in the producer's open
        transaction? (top-level error, per-partition errors: NO_ERROR or INVALID_TXN_STATE)."""
        code, md, _ = self._check_producer(transactional_id, producer_id, producer_epoch)
        if md is None:
            return code, {}
        return ErrorCode.NO_ERROR, {
            tp: ErrorCode.NO_ERROR if md.state == S.ONGOING and tp in md.partitions else ErrorCode.INVALID_TXN_STATE
            for tp in partitions
        }

    async def verify_partition(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> ErrorCode:
        """``ReplicaManager.txn_verifier``: asks this coordinator, or the id's coordinator on another broker
        (AddPartitionsToTxn v4 verify_only). Coordinator errors become NOT_ENOUGH_REPLICAS (retriable for the
        producer), a fenced producer INVALID_PRODUCER_EPOCH, as Kafka's partition leaders answer. Off (every
        write allowed) while ``transaction.partition.verification.enable`` (a dynamic config) is false."""
        if not self._verification_enabled():
            return ErrorCode.NO_ERROR
        leader = self.manager.leader_of(transactional_id)
        if leader == self.markers.node_id:
            code, results = self.verify_partitions(transactional_id, producer_id, producer_epoch, [tp])
            code = results.get(tp, code) if code == ErrorCode.NO_ERROR else code
        elif leader < 0:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            code = await self._verify_remote(leader, transactional_id, producer_id, producer_epoch, tp)
        if code == ErrorCode.PRODUCER_FENCED:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if code in _RETRIABLE_FOR_PRODUCE:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return code

    def _verification_enabled(self) -> bool:
        dynamic = dynamic_broker_configs(self.manager.metadata)
        return bool(effective_broker_value(self.config, "transaction.partition.verification.enable", dynamic))

    async def _verify_remote(
        self, leader: int, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> ErrorCode:
        body = {
            "transactions": [
                {
                    "transactional_id": transactional_id,
                    "producer_id": producer_id,
                    "producer_epoch": producer_epoch,
                    "verify_only": True,
                    "topics": [{"name": tp.topic, "partitions": [tp.partition]}],
                }
            ]
        }
        try:
            response = await self.markers.client.request(leader, ApiKey.ADD_PARTITIONS_TO_TXN, body, version=4)
        except (KafkaError, OSError) as e:
            log.debug("verifying %s of %s with broker %d failed: %s", tp, transactional_id, leader, e)
            return ErrorCode.NETWORK_EXCEPTION
        if response is None:
            return ErrorCode.NETWORK_EXCEPTION
        top = ErrorCode(response.body.get("error_code", 0))
        if top != ErrorCode.NO_ERROR:
            return top
        for result in response.body.get("results_by_transaction", []):
            for topic in result.get("topic_results", []):
                for p in topic.get("results_by_partition", []):
                    if topic["name"] == tp.topic and p["partition_index"] == tp.partition:
                        return ErrorCode(p["partition_error_code"])
        return ErrorCode.UNKNOWN_SERVER_ERROR

    # -- EndTxn ------------------------------------------------------------------------------------------

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        return await self._end_transaction(
            transactional_id, producer_id, producer_epoch, commit=commit, from_client=True
        )

    async def _end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, *, commit: bool, from_client: bool
    ) -> ErrorCode:
        code, part = self.manager.get(transactional_id)
        if part is None:
            return code
        md = part.ids.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if (from_client and producer_epoch != md.producer_epoch) or producer_epoch < md.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        fencing = md.pending_state == S.PREPARE_EPOCH_FENCE
        if md.pending_transition_in_progress and not fencing:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        state = md.state
        if state == S.ONGOING:
            next_state = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            fenced = producer_epoch if fencing and next_state == S.PREPARE_ABORT else None
            if fencing and fenced is None:
                return ErrorCode.CONCURRENT_TRANSACTIONS
            transit = md.prepare_abort_or_commit(next_state, _now_ms(), fenced_epoch=fenced)
        elif state == S.COMPLETE_COMMIT:
            return ErrorCode.NO_ERROR if commit else ErrorCode.INVALID_TXN_STATE
        elif state == S.COMPLETE_ABORT:
            return ErrorCode.NO_ERROR if not commit else ErrorCode.INVALID_TXN_STATE
        elif state == S.PREPARE_COMMIT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE
        elif state == S.PREPARE_ABORT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if not commit else ErrorCode.INVALID_TXN_STATE
        else:
            return ErrorCode.INVALID_TXN_STATE
        coordinator_epoch = part.coordinator_epoch
        code = await self.manager.append(md, coordinator_epoch, transit)
        if code != ErrorCode.NO_ERROR:
            return code
        complete = md.prepare_complete(_now_ms())
        self._spawn(self._complete(md, coordinator_epoch, complete), f"txn-complete-{transactional_id}")
        return ErrorCode.NO_ERROR

    async def _complete(self, md: TransactionMetadata, coordinator_epoch: int, complete: TxnTransitMetadata) -> None:
        """Send the markers of a prepared commit or abort, then write its completion."""
        commit = complete.state == S.COMPLETE_COMMIT
        txn_id = md.transactional_id
        p = self.manager.partition_for(txn_id)

        def still_valid() -> bool:
            part = self.manager.partitions.get(p)
            return part is not None and part.coordinator_epoch == coordinator_epoch and part.ids.get(txn_id) is md

        sent = await self.markers.send(
            txn_id, md.producer_id, md.producer_epoch, coordinator_epoch, commit, set(md.partitions), still_valid
        )
        if not sent:
            if md.pending_state == complete.state:
                md.pending_state = None
            return
        while True:
            code = await self.manager.append(md, coordinator_epoch, complete)
            if code == ErrorCode.NO_ERROR:
                self.outcomes["committed" if commit else "aborted"] += 1
                log.debug("%s: transaction %s", txn_id, complete.state.display)
                return
            if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) or not still_valid():
                return  # the new coordinator sends the markers again and completes it
            await asyncio.sleep(COMPLETION_RETRY_S)
            if not still_valid() or md.pending_transition_in_progress:
                return
            complete = md.prepare_complete(_now_ms())

    # -- timeouts and expiration -------------------------------------------------------------------------

    def abort_timed_out_transactions(self) -> int:
        """Abort (with the producer's epoch bumped, as Kafka does) every open transaction past its timeout."""
        now = _now_ms()
        count = 0
        for _, md in self.manager.all_metadata():
            if md.state != S.ONGOING or md.pending_transition_in_progress:
                continue
            if md.txn_start_ms + md.txn_timeout_ms >= now:
                continue
            try:
                transit = md.prepare_fence_producer_epoch(now)
            except IllegalTransition as e:
                log.error("%s", e)
                continue
            log.info("Aborting transaction of %s (producer id %d): open for %d ms, over its timeout of %d ms",
                     md.transactional_id, md.producer_id, now - md.txn_start_ms, md.txn_timeout_ms)  # fmt: skip
            self._spawn(self._abort_timed_out(md, transit), f"txn-timeout-{md.transactional_id}")
            count += 1
        return count

    async def _abort_timed_out(self, md: TransactionMetadata, transit: TxnTransitMetadata) -> None:
        code = await self._end_transaction(md.transactional_id, transit.producer_id, transit.producer_epoch,
                                           commit=False, from_client=False)  # fmt: skip
        if md.pending_state == S.PREPARE_EPOCH_FENCE:
            md.abort_pending()
        if code == ErrorCode.NO_ERROR:
            self.outcomes["timed_out"] += 1
        else:
            log.info("Aborting the timed-out transaction of %s failed: %s", md.transactional_id, code.name)

    def remove_expired_transactional_ids(self) -> int:
        """Remove (tombstone) the ids with no open transaction and no use for ``transactional.id.expiration.ms``."""
        now = _now_ms()
        count = 0
        for coordinator_epoch, md in self.manager.all_metadata():
            if md.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) or md.pending_transition_in_progress:
                continue
            if md.txn_last_update_ms + self.id_expiration_ms > now:
                continue
            transit = md.prepare_dead(now)
            self._spawn(self._expire(md, coordinator_epoch, transit), f"txn-expire-{md.transactional_id}")
            count += 1
        return count

    async def _expire(self, md: TransactionMetadata, coordinator_epoch: int, transit: TxnTransitMetadata) -> None:
        code = await self.manager.append(md, coordinator_epoch, transit)
        if code == ErrorCode.NO_ERROR:
            self.outcomes["expired_ids"] += 1
            log.info("Removed transactional id %s: unused for %d ms", md.transactional_id, self.id_expiration_ms)

    # -- metrics -----------------------------------------------------------------------------------------

    def metric_values(self) -> dict[str, float]:
        """Gauges under the names Kafka's transaction coordinator metrics take through the JMX exporter."""
        loads = self.manager.load_times_ms
        open_txns = sum(1 for _, md in self.manager.all_metadata() if md.state == S.ONGOING)
        return {
            "kafka_server_transaction_coordinator_metrics_partition_load_time_max": max(loads, default=0.0),
            "kafka_server_transaction_coordinator_metrics_partition_load_time_avg": (
                sum(loads) / len(loads) if loads else 0.0
            ),
            "rill_transaction_coordinator_markers_in_flight": self.markers.in_flight,
            "rill_transaction_coordinator_ongoing_transactions": open_txns,
            "rill_transaction_coordinator_transactional_ids": sum(1 for _ in self.manager.all_metadata()),
        }

    # -- DescribeTransactions / ListTransactions ---------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        code, part = self.manager.get(transactional_id)
        if part is None:
            return code, None
        md = part.ids.get(transactional_id)
        if md is None or md.state == S.DEAD:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NO_ERROR, md

    def list_transactions(
        self, states: list[str], producer_ids: list[int], duration_ms: int = -1
    ) -> tuple[ErrorCode, list[str], list[TransactionMetadata]]:
        """(error, unknown state filters, matching transactions) over the partitions this broker coordinates."""
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [], []
        if self.manager.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [], []
        wanted = {s for name in states if (s := S.from_name(name)) is not None}
        unknown = [name for name in states if S.from_name(name) is None]
        pids = set(producer_ids)
        now = _now_ms()
        out = []
        for _, md in self.manager.all_metadata():
            if md.state == S.DEAD:
                continue
            if pids and md.producer_id not in pids:
                continue
            if states and md.state not in wanted:
                continue
            if duration_ms >= 0 and now - md.txn_start_ms <= duration_ms:
                continue
            out.append(md)
        return ErrorCode.NO_ERROR, unknown, out
