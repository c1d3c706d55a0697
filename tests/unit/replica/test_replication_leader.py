"""The leader's side of replication on real logs: the high watermark is the smallest log end offset in the
ISR as followers' fetches report it; an acks=all produce waits in the produce purgatory until its records are
committed, its timeout passes, or leadership moves; ISR shrink and expand candidates follow Kafka's rules."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.unit.log.logtest_util import make_batch

from rill.common import TopicPartition
from rill.errors import ErrorCode
from rill.log.log_config import LogConfig
from rill.log.log_manager import LogManager
from rill.metadata.embedded import EmbeddedMetadataStore
from rill.metadata.store import BrokerInfo, PartitionState, TopicState
from rill.replica.replica_manager import ReplicaManager

TP = TopicPartition("t", 0)


def _run(tmp_path: Path, isr: tuple[int, ...], body: Callable[[ReplicaManager], Awaitable[None]],
         min_isr: str = "1") -> None:  # fmt: skip
    async def main() -> None:
        manager = LogManager([tmp_path / "logs"], LogConfig())
        manager.startup()
        store = EmbeddedMetadataStore(tmp_path / "logs", 0, BrokerInfo(0, "127.0.0.1", 9092))
        rm = ReplicaManager(0, manager, store, lambda configs: {"min.insync.replicas": min_isr, **configs})
        state = PartitionState(0, leader=0, leader_epoch=3, replicas=(0, 1, 2), isr=isr)
        rm._host([TopicState("t", uuid.uuid4(), (state,))])
        try:
            await body(rm)
        finally:
            rm.shutdown()
            manager.shutdown()
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 20))


def _append(rm: ReplicaManager, n: int = 3) -> Any:
    return rm.append_records(TP, memoryview(bytearray(make_batch(n))), -1)


def test_the_high_watermark_waits_for_every_in_sync_follower(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager) -> None:
        info = _append(rm, 3)
        partition = rm.get_partition(TP)
        assert partition.high_watermark == 0 and rm.committed(TP, info.last_offset + 1) is None
        rm.update_follower_fetch_state(TP, 1, 3)
        assert partition.high_watermark == 0  # broker 2 has nothing yet
        rm.update_follower_fetch_state(TP, 2, 2)
        assert partition.high_watermark == 2
        rm.update_follower_fetch_state(TP, 2, 3)
        assert partition.high_watermark == 3
        assert rm.committed(TP, 3) is ErrorCode.NO_ERROR

    _run(tmp_path, (0, 1, 2), body)


def test_an_acks_all_produce_waits_until_committed(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager) -> None:
        info = _append(rm, 5)
        waiter = asyncio.create_task(rm.wait_for_commit(TP, info.last_offset + 1, 10.0))
        await asyncio.sleep(0.05)
        assert not waiter.done() and rm.produce_purgatory.size == 1
        rm.update_follower_fetch_state(TP, 1, 5)
        await asyncio.sleep(0.01)
        assert not waiter.done()
        rm.update_follower_fetch_state(TP, 2, 5)
        assert await asyncio.wait_for(waiter, 1) is ErrorCode.NO_ERROR

    _run(tmp_path, (0, 1, 2), body)


def test_an_acks_all_produce_times_out(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager) -> None:
        info = _append(rm)
        assert await rm.wait_for_commit(TP, info.last_offset + 1, 0.1) is ErrorCode.REQUEST_TIMED_OUT

    _run(tmp_path, (0, 1, 2), body)


def test_committed_with_too_small_an_isr_is_not_enough_replicas_after_append(tmp_path: Path) -> None:
    """Kafka's DelayedProduce: records committed while the ISR is below min.insync.replicas answer
    NOT_ENOUGH_REPLICAS_AFTER_APPEND (they are in the log, but not on enough replicas)."""

    async def body(rm: ReplicaManager) -> None:
        info = _append(rm)
        waiter = asyncio.create_task(rm.wait_for_commit(TP, info.last_offset + 1, 10.0))
        await asyncio.sleep(0.01)
        # The ISR shrinks to the leader and broker 1 (the metadata brings it back), then broker 1 catches up.
        partition = rm.get_partition(TP)
        rm._host([TopicState("t", uuid.uuid4(), (PartitionState(0, 0, 3, (0, 1, 2), (0, 1)),))])
        rm.update_follower_fetch_state(TP, 1, 3)
        assert partition.high_watermark == 3
        assert await asyncio.wait_for(waiter, 1) is ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    _run(tmp_path, (0, 1, 2), body, min_isr="3")


def test_losing_leadership_ends_the_wait(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager) -> None:
        info = _append(rm)
        waiter = asyncio.create_task(rm.wait_for_commit(TP, info.last_offset + 1, 10.0))
        await asyncio.sleep(0.01)
        rm._host([TopicState("t", uuid.uuid4(), (PartitionState(0, 1, 4, (0, 1, 2), (1, 2)),))])
        assert await asyncio.wait_for(waiter, 1) is ErrorCode.NOT_LEADER_OR_FOLLOWER

    _run(tmp_path, (0, 1, 2), body)


def test_isr_shrink_and_expand_candidates(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager) -> None:
        partition = rm.get_partition(TP)
        _append(rm, 4)
        assert partition.out_of_sync_replicas(now_ms=1_000, lag_time_max_ms=30_000) == []  # the clock starts
        partition.update_follower_fetch_state(1, 4, now_ms=2_000)  # caught up
        partition.update_follower_fetch_state(2, 1, now_ms=2_000)  # behind
        assert partition.out_of_sync_replicas(now_ms=31_500, lag_time_max_ms=30_000) == [2]
        assert partition.out_of_sync_replicas(now_ms=32_500, lag_time_max_ms=30_000) == [1, 2]
        # Out of the ISR, broker 2 may come back once it reaches the high watermark.
        rm._host([TopicState("t", uuid.uuid4(), (PartitionState(0, 0, 3, (0, 1, 2), (0, 1)),))])
        partition.update_follower_fetch_state(1, 4, now_ms=40_000)
        assert partition.high_watermark == 4
        assert partition.catching_up_replicas() == []
        partition.update_follower_fetch_state(2, 4, now_ms=40_000)
        assert partition.catching_up_replicas() == [2]

    _run(tmp_path, (0, 1, 2), body)


def test_a_broker_that_is_no_replica_cannot_report_a_position(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager) -> None:
        _append(rm)
        try:
            rm.update_follower_fetch_state(TP, 9, 3)
        except Exception as e:
            assert getattr(e, "code", None) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        else:
            raise AssertionError("a position from a non-replica was taken")
        assert rm.get_partition(TP).high_watermark == 0

    _run(tmp_path, (0, 1, 2), body)


def test_a_follower_position_outside_the_log_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager) -> None:
        _append(rm, 3)
        partition = rm.get_partition(TP)
        rm.update_follower_fetch_state(TP, 1, 3)
        for bad in (4, 100, -1):
            try:
                rm.update_follower_fetch_state(TP, 2, bad)
            except Exception as e:
                assert getattr(e, "code", None) == ErrorCode.OFFSET_OUT_OF_RANGE
            else:
                raise AssertionError(f"position {bad} past the log end was taken")
            assert partition.high_watermark == 0 and partition.followers[2].log_end_offset == -1

    _run(tmp_path, (0, 1, 2), body)


def test_an_isr_shrink_from_the_controller_moves_the_high_watermark(tmp_path: Path) -> None:
    """The controller takes a follower out of the ISR (a metadata change, not this leader's own shrink): the
    high watermark is recomputed at once, and the acks=all produce that follower held up is answered."""

    async def body(rm: ReplicaManager) -> None:
        info = _append(rm, 3)
        rm.update_follower_fetch_state(TP, 1, 3)
        waiter = asyncio.create_task(rm.wait_for_commit(TP, info.last_offset + 1, 10.0))
        await asyncio.sleep(0.01)
        assert rm.get_partition(TP).high_watermark == 0 and not waiter.done()
        rm._host([TopicState("t", uuid.uuid4(), (PartitionState(0, 0, 3, (0, 1, 2), (0, 1)),))])
        assert rm.get_partition(TP).high_watermark == 3
        assert await asyncio.wait_for(waiter, 1) is ErrorCode.NO_ERROR

    _run(tmp_path, (0, 1, 2), body)
