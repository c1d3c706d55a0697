"""The group coordinator's writes wait for the ISR (acks=all), on a real broker's loop and logs: the group's
partition of ``__consumer_offsets`` is given a second replica in its ISR whose fetches the test makes, so the
high watermark moves only when the test says. A commit is answered, and seen by OffsetFetch, once replicated;
writes apply in log order; one not replicated in ``offsets.commit.timeout.ms`` is answered
COORDINATOR_NOT_AVAILABLE and applied when replicated later; a leadership change drops what was not replicated."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

from tests.unit.coordinator.test_group_coordinator import join_member, run

from rill.broker import Broker
from rill.common import TopicPartition
from rill.coordinator.group.group_coordinator import GroupCoordinator
from rill.coordinator.group.group_metadata import GroupState, OffsetAndMetadata
from rill.errors import ErrorCode
from rill.replica.partition import Partition

TP0 = TopicPartition("t", 0)


def _with_follower(gc: GroupCoordinator, group: str) -> Partition:
    """The group's ``__consumer_offsets`` partition, with a second replica in its ISR that has fetched nothing."""
    tp = gc.manager.topic_partition_for(group)
    partition = gc.manager.replica_manager.get_partition(tp)
    partition.update_state(dataclasses.replace(partition.state, replicas=(0, 1), isr=(0, 1)))
    return partition


def _fetch_to(gc: GroupCoordinator, partition: Partition, offset: int | None = None) -> None:
    """The follower fetches from ``offset`` (default: the log end): it has everything below it."""
    end = partition.log_end_offset if offset is None else offset
    gc.manager.replica_manager.update_follower_fetch_state(partition.tp, 1, end)


def _committed(gc: GroupCoordinator, group: str) -> int | None:
    om = gc.fetch_offsets(group, [TP0])[1][TP0]
    return None if om is None else om.offset


def test_a_commit_is_answered_and_seen_once_replicated(tmp_path: Path) -> None:
    async def body(gc: GroupCoordinator, _b: Broker) -> None:
        partition = _with_follower(gc, "g")
        commit = asyncio.ensure_future(gc.commit_offsets("g", "", None, -1, {TP0: OffsetAndMetadata(5)}))
        await asyncio.sleep(0.1)
        assert not commit.done() and _committed(gc, "g") is None
        _fetch_to(gc, partition)
        assert await commit == {TP0: ErrorCode.NO_ERROR}
        assert _committed(gc, "g") == 5

    run(tmp_path, body)


def test_writes_apply_in_log_order(tmp_path: Path) -> None:
    async def body(gc: GroupCoordinator, _b: Broker) -> None:
        partition = _with_follower(gc, "g")
        start = partition.log_end_offset
        first = asyncio.ensure_future(gc.commit_offsets("g", "", None, -1, {TP0: OffsetAndMetadata(10)}))
        second = asyncio.ensure_future(gc.commit_offsets("g", "", None, -1, {TP0: OffsetAndMetadata(20)}))
        await asyncio.sleep(0.05)
        _fetch_to(gc, partition, start + 1)  # the first record only
        assert await first == {TP0: ErrorCode.NO_ERROR}
        assert _committed(gc, "g") == 10 and not second.done()
        third = asyncio.ensure_future(gc.commit_offsets("g", "", None, -1, {TP0: OffsetAndMetadata(30)}))
        await asyncio.sleep(0.05)
        fourth = asyncio.ensure_future(gc.commit_offsets("g", "", None, -1, {TP0: OffsetAndMetadata(25)}))
        await asyncio.sleep(0.05)
        _fetch_to(gc, partition)  # all at once: applied in the order of the log, the last one wins
        assert await asyncio.gather(second, third, fourth) == [{TP0: ErrorCode.NO_ERROR}] * 3
        assert _committed(gc, "g") == 25

    run(tmp_path, body)


def test_a_commit_not_replicated_in_time_fails_and_applies_when_replicated(tmp_path: Path) -> None:
    async def body(gc: GroupCoordinator, _b: Broker) -> None:
        partition = _with_follower(gc, "g")
        codes = await gc.commit_offsets("g", "", None, -1, {TP0: OffsetAndMetadata(7)})
        assert codes == {TP0: ErrorCode.COORDINATOR_NOT_AVAILABLE} and _committed(gc, "g") is None
        _fetch_to(gc, partition)  # the record is in the log: replicated later, it counts
        for _ in range(100):
            if _committed(gc, "g") == 7:
                break
            await asyncio.sleep(0.01)
        assert _committed(gc, "g") == 7

    run(tmp_path, body, **{"offsets.commit.timeout.ms": "200"})


def test_a_sync_group_is_answered_once_the_assignment_is_replicated(tmp_path: Path) -> None:
    async def body(gc: GroupCoordinator, _b: Broker) -> None:
        a = await join_member(gc)
        partition = _with_follower(gc, "g")
        sync = asyncio.ensure_future(gc.sync_group("g", 1, a.member_id, None, None, None, {a.member_id: b"A"}))
        await asyncio.sleep(0.1)
        assert not sync.done() and gc.groups["g"].state is GroupState.COMPLETING_REBALANCE
        _fetch_to(gc, partition)
        assert (await sync).assignment == b"A"
        assert gc.groups["g"].state is GroupState.STABLE

    run(tmp_path, body)


def test_a_deleted_group_is_dead_until_its_tombstone_is_replicated(tmp_path: Path) -> None:
    async def body(gc: GroupCoordinator, _b: Broker) -> None:
        assert await gc.commit_offsets("g", "", None, -1, {TP0: OffsetAndMetadata(3)}) == {TP0: ErrorCode.NO_ERROR}
        partition = _with_follower(gc, "g")
        _fetch_to(gc, partition)
        delete = asyncio.ensure_future(gc.delete_groups(["g"]))
        await asyncio.sleep(0.1)
        assert not delete.done() and gc.groups["g"].state is GroupState.DEAD
        assert await gc.commit_offsets("g", "", None, -1, {TP0: OffsetAndMetadata(4)}) == {
            TP0: ErrorCode.COORDINATOR_NOT_AVAILABLE
        }
        _fetch_to(gc, partition)
        assert await delete == {"g": ErrorCode.NO_ERROR}
        assert "g" not in gc.groups

    run(tmp_path, body)


def test_writes_not_replicated_when_leadership_moves_are_dropped(tmp_path: Path) -> None:
    async def body(gc: GroupCoordinator, _b: Broker) -> None:
        partition = _with_follower(gc, "g")
        commit = asyncio.ensure_future(gc.commit_offsets("g", "", None, -1, {TP0: OffsetAndMetadata(9)}))
        await asyncio.sleep(0.05)
        state = partition.state
        partition.update_state(dataclasses.replace(state, leader_epoch=state.leader_epoch + 1))
        gc.manager.replica_manager.produce_purgatory.check_and_complete(partition.tp)
        assert await commit == {TP0: ErrorCode.NOT_COORDINATOR}
        assert _committed(gc, "g") is None

    run(tmp_path, body)


def test_refused_verifications_leave_no_state_past_the_producer_id_expiration(tmp_path: Path) -> None:
    """A TxnOffsetCommit of producer ids the transaction coordinator does not know is refused; the verification
    guards each one took on the group's partition go with ``producer.id.expiration.ms``, as Kafka's verification
    entries do (a client sending made-up producer ids would otherwise grow the broker's memory without end)."""

    async def body(gc: GroupCoordinator, broker: Broker) -> None:
        tp = gc.manager.topic_partition_for("g")
        state = gc.manager.replica_manager.get_partition(tp).log.producer_state
        for pid in range(1000, 1020):
            codes = await gc.txn_commit_offsets("g", "no-such-txn", pid, 0, "", None, -1, {TP0: OffsetAndMetadata(1)})
            assert codes[TP0] != ErrorCode.NO_ERROR
        assert len(state.verification_guards) == 20  # taken before the coordinator answered
        assert broker.log_manager is not None
        broker.log_manager.remove_expired_producers(int(time.time() * 1000) + 60_000)
        assert state.verification_guards == {}

    run(tmp_path, body, **{"producer.id.expiration.ms": "10000"})
