"""A leader's ISR changes against a real ZooKeeper, with the state write held or its answer lost on purpose.

One broker's metadata store (``ZkMetadataStore``) and replica manager run in the test, on real logs; the test
plays the controller (it writes the topic's znodes) and the followers (their fetch positions). Its ZooKeeper
client is a ``FaultInjectingKazooClient``, so each race is a sequence of steps:

- maximal ISR (Kafka's PendingExpandIsr/PendingShrinkIsr): while the write that adds a follower to the ISR is
  in flight, the high watermark already counts that follower (once the write lands it is in the ISR, and every
  record below the high watermark must be on it); while a shrink is in flight, the leaving follower still counts;
- a write whose answer is lost (ConnectionLoss) is resolved by reading the znode again: made, it is taken; not
  made, it is made.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from tests.unit.log.logtest_util import make_batch

from rill.common import TopicPartition
from rill.log.log_config import LogConfig
from rill.log.log_manager import LogManager
from rill.metadata import zk_layout as zl
from rill.metadata.store import BrokerInfo
from rill.metadata.zookeeper import ZkMetadataStore
from rill.replica.partition import Partition
from rill.replica.replica_manager import ReplicaManager
from rill.testing.zk_faults import Action, Fault, FaultInjectingKazooClient
from rill.testing.zookeeper import ZooKeeperEnsemble

pytestmark = pytest.mark.timeout(120)

TP = TopicPartition("t", 0)
STATE = zl.state_path("t", 0)


@pytest.fixture(scope="module")
def zk_server() -> Iterator[ZooKeeperEnsemble]:
    with ZooKeeperEnsemble(1) as running:
        yield running


Body = Callable[[ReplicaManager, FaultInjectingKazooClient, Partition], Awaitable[None]]


def _run(zk_server: ZooKeeperEnsemble, tmp_path: Path, isr: tuple[int, ...], body: Body) -> None:
    async def main() -> None:
        chroot = f"/isr-{uuid.uuid4().hex[:8]}"
        made: list[FaultInjectingKazooClient] = []

        def client(hosts: str, timeout: float) -> FaultInjectingKazooClient:
            made.append(FaultInjectingKazooClient(hosts=hosts, timeout=timeout))
            return made[-1]

        store = ZkMetadataStore(zk_server.connect_string + chroot, 0, BrokerInfo(0, "127.0.0.1", 9092),
                                session_timeout_ms=4000, connection_timeout_ms=10000,
                                client_factory=client)  # fmt: skip
        await store.start()
        manager = LogManager([tmp_path / "logs"], LogConfig())
        manager.startup()
        rm = ReplicaManager(0, manager, store, lambda configs: {"min.insync.replicas": "1", **configs})
        try:

            def create() -> None:  # as the controller does, in one transaction
                tx = store.zk.transaction()
                tx.create(zl.topic_path("t"), zl.encode_assignment(zl.Assignment(uuid.uuid4(), {0: (0, 1, 2)})))
                tx.create(zl.partitions_path("t"))
                tx.create(f"{zl.partitions_path('t')}/0")
                tx.create(STATE, zl.encode_state(zl.LeaderAndIsr(0, 0, isr, 1)))
                assert not [r for r in tx.commit() if isinstance(r, Exception)]

            await asyncio.to_thread(create)
            async with asyncio.timeout(20):
                while TP not in rm.partitions() or not rm.partitions()[TP].is_leader:
                    await asyncio.sleep(0.02)
            await body(rm, made[0], rm.get_partition(TP))
        finally:
            if made:
                made[0].clear_faults()  # whatever a failed step left held goes on
            rm.shutdown()
            manager.shutdown()
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def _append(rm: ReplicaManager, n: int) -> None:
    rm.append_records(TP, memoryview(bytearray(make_batch(n))), 1)


async def _zk_isr(faulty: FaultInjectingKazooClient) -> tuple[int, ...]:
    data, stat = await asyncio.to_thread(faulty.get, STATE)
    return zl.decode_state(data, stat.version).isr


async def _until(condition: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.01)


def test_a_follower_being_added_counts_for_the_high_watermark_while_the_write_is_in_flight(
    zk_server: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    async def body(rm: ReplicaManager, faulty: FaultInjectingKazooClient, partition: Partition) -> None:
        _append(rm, 5)
        rm.update_follower_fetch_state(TP, 1, 5)
        assert partition.high_watermark == 5
        held = faulty.inject(Fault("set", STATE, Action.HOLD))
        rm.update_follower_fetch_state(TP, 2, 5)  # broker 2 reached the high watermark: it is added
        await asyncio.to_thread(held.wait_reached)
        _append(rm, 3)
        rm.update_follower_fetch_state(TP, 1, 8)
        assert partition.high_watermark == 5, "records past broker 2's log counted as committed"
        held.release()
        await _until(lambda: 2 in partition.state.isr, "the ISR with broker 2")
        assert await _zk_isr(faulty) == (0, 1, 2)
        assert partition.high_watermark == 5
        rm.update_follower_fetch_state(TP, 2, 8)
        assert partition.high_watermark == 8

    _run(zk_server, tmp_path, (0, 1), body)


def test_a_follower_being_removed_still_counts_until_the_write_lands(
    zk_server: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    async def body(rm: ReplicaManager, faulty: FaultInjectingKazooClient, partition: Partition) -> None:
        _append(rm, 5)
        rm.update_follower_fetch_state(TP, 1, 5)
        rm.update_follower_fetch_state(TP, 2, 5)
        held = faulty.inject(Fault("set", STATE, Action.HOLD))
        shrink = asyncio.create_task(rm._alter_isr(partition, [0, 1], "shrink"))
        await asyncio.to_thread(held.wait_reached)
        _append(rm, 3)
        rm.update_follower_fetch_state(TP, 1, 8)
        assert partition.high_watermark == 5, "broker 2 stopped counting before it left the ISR"
        held.release()
        await shrink
        assert partition.state.isr == (0, 1) and await _zk_isr(faulty) == (0, 1)
        assert partition.high_watermark == 8

    _run(zk_server, tmp_path, (0, 1, 2), body)


def test_an_expansion_whose_answer_was_lost_is_read_back(zk_server: ZooKeeperEnsemble, tmp_path: Path) -> None:
    """The write lands but its answer is lost (ConnectionLoss). The watch that would bring the new state is held
    back (the store's read of the state znode waits), so only reading the znode again tells the leader that broker 2
    is in the ISR: until it knows, the high watermark must not pass broker 2's log end."""

    async def body(rm: ReplicaManager, faulty: FaultInjectingKazooClient, partition: Partition) -> None:
        _append(rm, 5)
        rm.update_follower_fetch_state(TP, 1, 5)
        # the store's reads of the partition's state (not the leader's read back, from its change's module)
        rereads = faulty.inject(Fault("get", STATE, Action.HOLD, times=1_000_000, source="rill.metadata.zk_image"))
        lost = faulty.inject(Fault("set", STATE, Action.APPLY_THEN_FAIL))
        rm.update_follower_fetch_state(TP, 2, 5)
        await asyncio.to_thread(lost.wait_reached)
        await _until(lambda: TP not in rm._isr_changing, "the expansion's end")
        assert await _zk_isr(faulty) == (0, 1, 2)
        assert partition.state.isr == (0, 1, 2), "the expansion that was made is not known"
        _append(rm, 3)
        rm.update_follower_fetch_state(TP, 1, 8)
        assert partition.high_watermark == 5
        rereads.release()

    _run(zk_server, tmp_path, (0, 1), body)


def test_an_expansion_lost_before_it_was_made_is_made(zk_server: ZooKeeperEnsemble, tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, faulty: FaultInjectingKazooClient, partition: Partition) -> None:
        _append(rm, 5)
        rm.update_follower_fetch_state(TP, 1, 5)
        lost = faulty.inject(Fault("set", STATE, Action.FAIL))
        rm.update_follower_fetch_state(TP, 2, 5)
        await asyncio.to_thread(lost.wait_reached)
        await _until(lambda: TP not in rm._isr_changing, "the expansion's end")
        assert await _zk_isr(faulty) == (0, 1, 2), "the expansion was not made after the lost write"
        assert partition.state.isr == (0, 1, 2)

    _run(zk_server, tmp_path, (0, 1), body)


def test_a_late_answer_never_takes_the_state_back(zk_server: ZooKeeperEnsemble, tmp_path: Path) -> None:
    """The expansion is written, but its answer reaches the leader only after the store's watch brought that
    state and a later one (the controller took broker 1 out): the leader keeps the later state."""

    async def body(rm: ReplicaManager, faulty: FaultInjectingKazooClient, partition: Partition) -> None:
        _append(rm, 5)
        rm.update_follower_fetch_state(TP, 1, 5)
        late = faulty.inject(Fault("set", STATE, Action.HOLD_ANSWER))
        rm.update_follower_fetch_state(TP, 2, 5)
        assert await asyncio.to_thread(late.answered.wait, 10), "the expansion was not made"  # its answer held

        def controller_shrinks() -> None:
            data, stat = faulty.get(STATE)
            s = zl.decode_state(data, stat.version)
            faulty.set(STATE, zl.encode_state(zl.LeaderAndIsr(0, 0, (0, 2), s.controller_epoch)),
                              version=stat.version)  # fmt: skip

        await asyncio.to_thread(controller_shrinks)
        await _until(lambda: partition.state.isr == (0, 2), "the controller's ISR")
        late.release()
        await _until(lambda: TP not in rm._isr_changing, "the expansion's end")
        assert partition.state.isr == (0, 2), "the late answer took the ISR back"
        assert partition.state.partition_epoch == 2

    _run(zk_server, tmp_path, (0, 1), body)


def test_an_expansion_whose_answer_was_lost_is_read_back_while_the_connection_is_still_down(
    zk_server: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    """The write lands, its answer is lost, and the first reads back meet the connection still down: the leader reads
    again until it knows (it used to give up at the first, forgetting a follower that ZooKeeper has in the ISR)."""

    async def body(rm: ReplicaManager, faulty: FaultInjectingKazooClient, partition: Partition) -> None:
        _append(rm, 5)
        rm.update_follower_fetch_state(TP, 1, 5)
        rereads = faulty.inject(Fault("get", STATE, Action.HOLD, times=1_000_000, source="rill.metadata.zk_image"))
        faulty.inject(Fault("set", STATE, Action.APPLY_THEN_FAIL))
        # the leader's reads of the znode after its first one (the read before the write): two fail
        down = faulty.inject(Fault("get", STATE, nth=2, times=2, source="rill.metadata.zk_changes"))
        rm.update_follower_fetch_state(TP, 2, 5)
        await asyncio.to_thread(down.wait_reached)
        await _until(lambda: TP not in rm._isr_changing, "the expansion's end")
        assert down.acted == 2
        assert await _zk_isr(faulty) == (0, 1, 2)
        assert partition.state.isr == (0, 1, 2), "the expansion that was made is not known"
        _append(rm, 3)
        rm.update_follower_fetch_state(TP, 1, 8)
        assert partition.high_watermark == 5
        rereads.release()

    _run(zk_server, tmp_path, (0, 1), body)


def test_an_expansion_whose_outcome_stays_unknown_keeps_counting_the_follower(
    zk_server: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    """The write lands, its answer is lost, and no read back gets through within the session timeout: the outcome is
    unknown, so broker 2 keeps counting for the high watermark (Kafka keeps its pending ISR) until the store brings
    the partition's newer state."""

    async def body(rm: ReplicaManager, faulty: FaultInjectingKazooClient, partition: Partition) -> None:
        _append(rm, 5)
        rm.update_follower_fetch_state(TP, 1, 5)
        faulty.inject(Fault("get", STATE, Action.HOLD, times=1_000_000, source="rill.metadata.zk_image"))
        faulty.inject(Fault("set", STATE, Action.APPLY_THEN_FAIL))
        down = faulty.inject(Fault("get", STATE, nth=2, times=1_000_000, source="rill.metadata.zk_changes"))
        rm.update_follower_fetch_state(TP, 2, 5)
        await asyncio.to_thread(down.wait_reached)
        await _until(lambda: TP not in rm._isr_changing, "the expansion's end")
        assert await _zk_isr(faulty) == (0, 1, 2)
        assert partition.state.isr == (0, 1)
        _append(rm, 3)
        rm.update_follower_fetch_state(TP, 1, 8)
        assert partition.high_watermark == 5, "records past broker 2's log counted as committed"
        faulty.clear_faults()  # the store's held read goes on: it brings the ISR written
        await _until(lambda: partition.state.isr == (0, 1, 2) and partition.pending_isr is None, "the state read")
        assert partition.high_watermark == 5

    _run(zk_server, tmp_path, (0, 1), body)


def test_an_answer_after_the_session_was_lost_does_not_make_the_broker_lead_again(
    zk_server: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    """The expansion is written, its answer comes only after the session was lost (the broker stopped leading at
    once): taking it would make the broker lead again, without a session, while the controller moves leadership."""

    async def body(rm: ReplicaManager, faulty: FaultInjectingKazooClient, partition: Partition) -> None:
        store = rm.metadata
        assert isinstance(store, ZkMetadataStore)
        store.on_session_change = rm.on_session_change
        _append(rm, 5)
        rm.update_follower_fetch_state(TP, 1, 5)
        # the store's reads of the state are held: only the late answer could bring the expansion
        faulty.inject(Fault("get", STATE, Action.HOLD, times=1_000_000, source="rill.metadata.zk_image"))
        late = faulty.inject(Fault("set", STATE, Action.HOLD_ANSWER))
        # the registration in the new session waits: the broker stays without one
        faulty.inject(Fault("create", zl.broker_path(0), Action.HOLD, times=1_000_000))
        rm.update_follower_fetch_state(TP, 2, 5)
        assert await asyncio.to_thread(late.answered.wait, 10), "the expansion was not made"
        await asyncio.to_thread(faulty.expire_session)
        await _until(lambda: not partition.is_leader, "the broker stops leading")
        late.release()
        await _until(lambda: TP not in rm._isr_changing, "the expansion's end")
        assert not partition.is_leader, "a late answer made the broker lead again without a session"

    _run(zk_server, tmp_path, (0, 1), body)
