"""ReplicaManager.append_txn_marker on real logs: the marker waits for the high watermark, the listeners hear of
it, refusals change nothing; read_committed reads stop at the last stable offset."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.log.log_config import LogConfig
from rill.log.log_manager import LogManager
from rill.metadata.embedded import EmbeddedMetadataStore
from rill.metadata.store import BrokerInfo, PartitionState, TopicState
from rill.records.builder import build_batch
from rill.records.record import Record
from rill.replica.replica_manager import ReplicaManager

TP = TopicPartition("t", 0)


def _run(tmp_path: Path, isr: tuple[int, ...], body: Callable[[ReplicaManager], Awaitable[None]]) -> None:
    async def main() -> None:
        manager = LogManager([tmp_path / "logs"], LogConfig())
        manager.startup()
        store = EmbeddedMetadataStore(tmp_path / "logs", 0, BrokerInfo(0, "127.0.0.1", 9092))
        rm = ReplicaManager(0, manager, store, lambda configs: {"min.insync.replicas": "2", **configs})
        state = PartitionState(0, leader=0, leader_epoch=3, replicas=(0, 1, 2), isr=isr)
        rm._host([TopicState("t", uuid.uuid4(), (state,))])
        try:
            await body(rm)
        finally:
            rm.shutdown()
            manager.shutdown()
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 20))


def _txn(pid: int, seq: int, epoch: int = 0) -> memoryview:
    records = [Record(0, 1_700_000_000_000, b"k%d" % i, b"v") for i in range(2)]
    batch = build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    return memoryview(bytearray(batch))


def test_a_marker_waits_for_the_followers_and_is_heard(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager) -> None:
        heard: list[tuple[TopicPartition, int, bool, int]] = []
        rm.add_txn_marker_listener(lambda *args: heard.append(args))
        rm.request_timeout_ms = 5000
        rm.append_records(TP, _txn(7, 0), -1)
        partition = rm.get_partition(TP)
        rm.update_follower_fetch_state(TP, 1, 2)
        assert partition.last_stable_offset == 0  # pid 7's transaction is open from offset 0
        task = asyncio.ensure_future(rm.append_txn_marker(TP, 7, 0, 1, True))
        await asyncio.sleep(0.05)
        assert not task.done() and heard == [(TP, 7, True, 2)]
        assert partition.last_stable_offset == 0  # the marker is not replicated yet
        rm.update_follower_fetch_state(TP, 1, 3)
        assert await task is ErrorCode.NO_ERROR
        assert partition.last_stable_offset == partition.high_watermark == 3
        read = rm.read(TP, 0, 1 << 20, isolation_level=1)
        assert read.last_stable_offset == 3 and read.aborted_transactions == []
        # fenced markers change nothing and tell nobody
        leo = partition.log_end_offset
        assert await rm.append_txn_marker(TP, 7, 0, 0, False) is ErrorCode.TRANSACTION_COORDINATOR_FENCED
        assert await rm.append_txn_marker(TP, 7, -1 + 0, 1, False) is ErrorCode.INVALID_PRODUCER_EPOCH
        assert partition.log_end_offset == leo and len(heard) == 1
        assert await rm.append_txn_marker(TopicPartition("nope", 0), 7, 0, 1, False) is (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )

    _run(tmp_path, (0, 1), body)


def test_aborted_transactions_in_a_read_committed_read(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager) -> None:
        rm.request_timeout_ms = 200
        rm.append_records(TP, _txn(1, 0), -1)  # 0-1
        rm.append_records(TP, _txn(2, 0), -1)  # 2-3
        rm.update_follower_fetch_state(TP, 1, 4)
        read = rm.read(TP, 0, 1 << 20, isolation_level=1)
        assert read.last_stable_offset == 0 and read.size == 0
        uncommitted = rm.read(TP, 0, 1 << 20)
        assert uncommitted.high_watermark == 4 and uncommitted.size > 0 and uncommitted.aborted_transactions is None
        # the follower does not fetch: the marker times out waiting, but it is written
        assert await rm.append_txn_marker(TP, 1, 0, 0, False) is ErrorCode.REQUEST_TIMED_OUT
        rm.update_follower_fetch_state(TP, 1, 5)
        read = rm.read(TP, 0, 1 << 20, isolation_level=1)
        assert read.last_stable_offset == 2 and read.aborted_transactions == [(1, 0)]
        assert await rm.append_txn_marker(TP, 2, 0, 0, True) is ErrorCode.REQUEST_TIMED_OUT
        rm.update_follower_fetch_state(TP, 1, 6)
        read = rm.read(TP, 3, 1 << 20, isolation_level=1)
        assert read.last_stable_offset == 6 and read.aborted_transactions == [(1, 0)]
        # below min.insync.replicas no marker is written
        rm.get_partition(TP).update_state(PartitionState(0, leader=0, leader_epoch=3, replicas=(0, 1, 2), isr=(0,)))
        leo = rm.get_partition(TP).log_end_offset
        rm.append_records(TP, _txn(3, 0), 1)
        assert await rm.append_txn_marker(TP, 3, 0, 0, True) is ErrorCode.NOT_ENOUGH_REPLICAS
        assert rm.get_partition(TP).log_end_offset == leo + 2

    _run(tmp_path, (0, 1), body)


def test_verification_is_asked_only_to_open_a_transaction(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager) -> None:
        assert rm.needs_txn_verification(TP, _txn(1, 0)) is None  # no verifier set

        async def verifier(txn_id: str, pid: int, epoch: int, tp: TopicPartition) -> ErrorCode:
            return ErrorCode.NO_ERROR

        rm.txn_verifier = verifier
        guard = rm.needs_txn_verification(TP, _txn(1, 0, epoch=4))
        assert guard is not None and (guard.producer_id, guard.producer_epoch) == (1, 4)
        rm.append_records(TP, _txn(1, 0, epoch=4), 1, verification_guard=guard)
        assert rm.needs_txn_verification(TP, _txn(1, 2, epoch=4)) is None  # ongoing here
        plain = memoryview(bytearray(build_batch([Record(0, 1, b"k", b"v")])))
        assert rm.needs_txn_verification(TP, plain) is None
        # a transaction of an older epoch still open here is not the producer's current one: verified
        bumped = rm.needs_txn_verification(TP, _txn(1, 0, epoch=5))
        assert bumped is not None and bumped.producer_epoch == 5

    _run(tmp_path, (0,), body)


def test_a_marker_during_the_verification_refuses_the_verified_batch(tmp_path: Path) -> None:
    """Kafka's VerificationGuard: while the coordinator's answer is on its way the transaction is aborted (its
    marker lands here, with nothing of the producer's to end); the verified batch must not open a transaction
    then: none of the coordinator's markers would close it, the last stable offset would stop there, and the
    producer's next commit would make the aborted batch visible."""

    async def body(rm: ReplicaManager) -> None:
        async def verifier(txn_id: str, pid: int, epoch: int, tp: TopicPartition) -> ErrorCode:
            return ErrorCode.NO_ERROR

        rm.txn_verifier = verifier
        rm.request_timeout_ms = 1000
        partition = rm.get_partition(TP)
        guard = rm.needs_txn_verification(TP, _txn(9, 0))
        assert guard is not None
        marker = asyncio.ensure_future(rm.append_txn_marker(TP, 9, 0, 0, False))  # aborted meanwhile
        await asyncio.sleep(0)
        leo = partition.log_end_offset
        rm.update_follower_fetch_state(TP, 1, leo)
        assert await marker is ErrorCode.NO_ERROR
        try:
            rm.append_records(TP, _txn(9, 0), 1, verification_guard=guard)
            refused = None
        except KafkaError as e:
            refused = e.code
        assert refused is ErrorCode.INVALID_TXN_STATE
        assert partition.log_end_offset == leo and not partition.log.has_ongoing_txn(9)
        assert partition.last_stable_offset == partition.high_watermark
        # verified again, the next transaction opens as usual
        again = rm.needs_txn_verification(TP, _txn(9, 0))
        assert again is not None and again is not guard
        rm.append_records(TP, _txn(9, 0), 1, verification_guard=again)
        assert partition.log.has_ongoing_txn(9, 0)

    _run(tmp_path, (0, 1), body)
