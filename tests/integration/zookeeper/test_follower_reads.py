"""A broker follows ZooKeeper in proportion to the change: a leader change of one partition of a topic of many costs
it one read of that partition's state znode (it used to read the whole topic again: its assignment and every
partition's state, after kazoo's watch had read the znode once), and its replica manager acts on that partition
only. What it must still see it sees: a state
change racing a change of the topic's configs, a read that fails (tried again), and the other partitions of a topic
one of whose state znodes another tool wrote in a form it cannot read, and every partition after its connection to
ZooKeeper was lost (kazoo drops every watch then, even when the session goes on)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState
from tests.integration.zookeeper._mini import MiniBroker, active_controller, start_broker, state, wait_until

from rill.common import TopicPartition
from rill.metadata import zk_layout as zl
from rill.testing.zk_faults import Action, Fault

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 200


def _move_leader(admin: KazooClient, topic: str, partition: int, leader: int) -> int:
    """Write a new leader for one partition as a controller would (leader epoch + 1, conditionally on the
    version); returns the new leader epoch."""
    data, stat = admin.get(zl.state_path(topic, partition))
    s = zl.decode_state(data, stat.version)
    admin.set(zl.state_path(topic, partition), zl.encode_state(zl.LeaderAndIsr(leader, s.leader_epoch + 1, s.isr,
              s.controller_epoch)), version=stat.version)  # fmt: skip
    return s.leader_epoch + 1


def _shows(broker: MiniBroker, topic: str, partition: int, leader: int, epoch: int) -> bool:
    t = broker.store.topic(topic)
    return t is not None and (t.partitions[partition].leader, t.partitions[partition].leader_epoch) == (leader, epoch)


async def _cluster(connect: str, admin: KazooClient, tmp_path: Path | None = None) -> list[MiniBroker]:
    """Broker 0 (the controller) and broker 1 (with a replica manager when ``tmp_path`` is given), and a topic
    "wide" of ``PARTITIONS`` partitions on both, led by broker 0, in broker 1's image."""
    brokers = [await start_broker(connect, 0)]
    brokers.append(await start_broker(connect, 1, controller=False, data_dir=tmp_path))
    await wait_until(lambda: active_controller(admin, brokers) is brokers[0], "broker 0 is the controller")
    await brokers[0].store.create_topic("wide", PARTITIONS, 2, {}, {p: [0, 1] for p in range(PARTITIONS)})

    def led() -> bool:
        t = brokers[1].store.topic("wide")
        return t is not None and all(p.leader == 0 for p in t.partitions)

    await wait_until(led, "broker 1's image shows every partition led")
    return brokers


def test_a_leader_change_of_one_partition_costs_one_read(connect: str, admin: KazooClient, tmp_path: Path) -> None:
    async def main() -> None:
        brokers = await _cluster(connect, admin, tmp_path)
        b1 = brokers[1]
        assert b1.rm is not None
        touched: list[TopicPartition] = []
        wake = b1.rm.fetch_purgatory.check_and_complete

        def counted(tp: TopicPartition) -> None:
            touched.append(tp)
            wake(tp)

        b1.rm.fetch_purgatory.check_and_complete = counted  # type: ignore[method-assign]
        try:
            reads: list[int] = []
            woken: list[int] = []
            for p in (3, 4, 5):  # reads the creation's watches still caused may add to one round, not to all
                # Every read of the topic's znodes by broker 1's client (its store's and kazoo's own threads').
                counter = b1.client.inject(Fault("get", "/brokers/topics/*", nth=1 << 62))
                touched.clear()
                epoch = _move_leader(admin, "wide", p, 1)
                await wait_until(lambda p=p, e=epoch: _shows(b1, "wide", p, 1, e), f"broker 1 follows wide-{p}")  # type: ignore[misc]
                reads.append(counter.seen)
                woken.append(len(set(touched)))
                b1.client.clear_faults()
                assert b1.rm.partitions()[TopicPartition("wide", p)].is_leader
            print("broker reads per single-partition leader change:", reads, "partitions acted on:", woken)
            assert min(reads) == 1, reads  # the partition's state znode (the whole topic: PARTITIONS + 1)
            assert min(woken) == 1, woken
            # Every other partition as it was: led by broker 0, followed by broker 1's replica manager.
            t = b1.store.topic("wide")
            assert t is not None
            assert [p.partition for p in t.partitions if p.leader != 0] == [3, 4, 5]
            assert not any(b1.rm.partitions()[TopicPartition("wide", p)].is_leader for p in range(6, PARTITIONS))
        finally:
            for b in brokers:
                await b.close()

    asyncio.run(main())


def test_a_state_change_racing_a_topic_change_and_a_failed_read(connect: str, admin: KazooClient) -> None:
    async def main() -> None:
        brokers = await _cluster(connect, admin)
        b1 = brokers[1]
        try:
            # The read of wide-7's state is held; meanwhile the topic's configs change and wide-8 gets a new leader.
            held = b1.client.inject(Fault("get", zl.state_path("wide", 7), Action.HOLD,
                                          source="rill.metadata"))  # fmt: skip
            e7 = _move_leader(admin, "wide", 7, 1)
            await asyncio.to_thread(held.wait_reached)
            await brokers[0].store.set_topic_configs("wide", {"retention.ms": "12345"})
            e8 = _move_leader(admin, "wide", 8, 1)
            held.release()
            b1.client.clear_faults()

            def followed() -> bool:
                t = b1.store.topic("wide")
                return (t is not None and t.configs.get("retention.ms") == "12345"
                        and _shows(b1, "wide", 7, 1, e7) and _shows(b1, "wide", 8, 1, e8))  # fmt: skip

            await wait_until(followed, "broker 1 follows both states and the configs")
            # A read that fails (the connection lost) is made again: the partition stays marked.
            failed = b1.client.inject(Fault("get", zl.state_path("wide", 9), source="rill.metadata"))
            e9 = _move_leader(admin, "wide", 9, 1)
            await asyncio.to_thread(failed.wait_reached)
            await wait_until(lambda: _shows(b1, "wide", 9, 1, e9), "broker 1 follows wide-9 after a failed read")
        finally:
            for b in brokers:
                await b.close()

    asyncio.run(main())


@pytest.mark.parametrize("malformed", [
    b'{"leader":"x"}',
    # JSON that reads as infinity: int() of it raises OverflowError, not ValueError
    b'{"version":1,"leader":1e999,"leader_epoch":0,"isr":[0],"controller_epoch":1}',
])  # fmt: skip
def test_a_malformed_state_znode_holds_up_no_other_partition(
    connect: str, admin: KazooClient, malformed: bytes
) -> None:
    async def main() -> None:
        brokers = await _cluster(connect, admin)
        b1 = brokers[1]
        try:
            before = state(admin, "wide", 5)
            admin.set(zl.state_path("wide", 5), malformed)  # another tool's write
            e6 = _move_leader(admin, "wide", 6, 1)
            await wait_until(lambda: _shows(b1, "wide", 6, 1, e6), "broker 1 follows wide-6")
            t = b1.store.topic("wide")
            assert t is not None and before is not None
            assert (t.partitions[5].leader, t.partitions[5].leader_epoch) == (before.leader, before.leader_epoch)
            # Still following: the partition written again in a form it reads is taken.
            admin.set(zl.state_path("wide", 5), zl.encode_state(zl.LeaderAndIsr(1, before.leader_epoch + 1,
                      before.isr, before.controller_epoch)))  # fmt: skip
            await wait_until(lambda: _shows(b1, "wide", 5, 1, before.leader_epoch + 1), "broker 1 follows wide-5")
        finally:
            for b in brokers:
                await b.close()

    asyncio.run(main())


def test_the_state_watches_are_set_again_in_a_new_session(connect: str, admin: KazooClient) -> None:
    """A state znode's watch is set by the read of it; a session that ends takes every watch with it, and the new
    session's full re-read sets them again: a single partition's change afterwards is still followed."""

    async def main() -> None:
        brokers = await _cluster(connect, admin)
        b1 = brokers[1]
        try:
            session = b1.client.client_id
            b1.client.expire_session()
            # The controller handles broker 1's new registration as a bounce: it leaves the ISRs (the leaders' new
            # epochs reach broker 1 through its new session).
            def bounced() -> bool:
                s, t = state(admin, "wide", 11), b1.store.topic("wide")
                if s is None or t is None or s.isr != (0,) or b1.client.client_id == session:
                    return False
                return (t.partitions[11].leader_epoch, t.partitions[11].isr) == (s.leader_epoch, s.isr)

            await wait_until(bounced, "broker 1's new session follows the controller's handling of its bounce")
            e = _move_leader(admin, "wide", 11, 0)
            await wait_until(lambda: _shows(b1, "wide", 11, 0, e), "broker 1 follows wide-11 in its new session")
        finally:
            for b in brokers:
                await b.close()

    asyncio.run(main())


async def _drop_connection(broker: MiniBroker) -> None:
    """Break the broker's ZooKeeper connection and wait until it is connected again, in the same session."""
    session = broker.client.client_id
    seen: list[str] = []

    def listener(state: str) -> None:
        seen.append(state)

    broker.client.add_listener(listener)
    try:
        broker.client.drop_connection()
        await wait_until(lambda: KazooState.SUSPENDED in seen and seen[-1] == KazooState.CONNECTED,
                         "the broker connected again")  # fmt: skip
    finally:
        broker.client.remove_listener(listener)
    assert broker.client.client_id == session


def test_the_state_watches_are_set_again_after_a_connection_loss(connect: str, admin: KazooClient) -> None:
    """kazoo drops every watch when its connection is lost and sets none again when it connects within the same
    session (its DataWatch recipe read its znode again; a plain watch is gone): single-partition changes afterwards
    are still followed."""

    async def main() -> None:
        brokers = await _cluster(connect, admin)
        b1 = brokers[1]
        try:
            await _drop_connection(b1)
            e = _move_leader(admin, "wide", 11, 1)
            await wait_until(lambda: _shows(b1, "wide", 11, 1, e), "broker 1 follows wide-11 after a connection loss")
        finally:
            for b in brokers:
                await b.close()

    asyncio.run(main())


def test_a_malformed_state_znode_leaves_the_others_followed_after_a_connection_loss(
    connect: str, admin: KazooClient
) -> None:
    """The whole re-read after a connection loss meets wide-5 in a form it cannot read: wide-5 stays as the image had
    it, and the partitions after it are still read (and watched) and followed."""

    async def main() -> None:
        brokers = await _cluster(connect, admin)
        b1 = brokers[1]
        try:
            before = state(admin, "wide", 5)
            assert before is not None
            admin.set(zl.state_path("wide", 5), b'{"leader":"x"}')  # another tool's write
            e6 = _move_leader(admin, "wide", 6, 1)
            await wait_until(lambda: _shows(b1, "wide", 6, 1, e6), "broker 1 follows wide-6")
            await _drop_connection(b1)
            e11 = _move_leader(admin, "wide", 11, 1)
            await wait_until(lambda: _shows(b1, "wide", 11, 1, e11), "broker 1 follows wide-11")
            t = b1.store.topic("wide")
            assert t is not None
            assert (t.partitions[5].leader, t.partitions[5].leader_epoch) == (before.leader, before.leader_epoch)
        finally:
            for b in brokers:
                await b.close()

    asyncio.run(main())
