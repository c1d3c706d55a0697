"""A broker's partition states never go back, whatever order ZooKeeper's answers reach it in (a leader's ISR write
answered after the controller's newer change came as a delta; a full re-read after a new session answered after a
newer state), and a change a broker component failed to follow is told to it again, without stopping the other
topics of the same change (real server, real logs)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from tests.integration.zookeeper._mini import start_broker, state, wait_until

from rill.common import TopicPartition
from rill.metadata import zk_layout as zl
from rill.metadata.store import MetadataDelta
from rill.testing.zk_faults import Action, Fault

pytestmark = pytest.mark.timeout(120)
TP = TopicPartition("t", 0)


def test_an_isr_write_answered_after_a_newer_controller_change_does_not_undo_it(connect: str, admin: KazooClient,
                                                                               tmp_path: Path) -> None:  # fmt: skip
    async def main() -> None:
        b0 = await start_broker(connect, 0, data_dir=tmp_path)
        b1 = await start_broker(connect, 1)
        brokers = [b0, b1, await start_broker(connect, 2)]
        try:
            assert b0.rm is not None
            await b0.store.create_topic("t", 1, 3, {}, {0: [0, 1, 2]})
            partition = b0.rm.get_partition(TP)
            await brokers[2].close()  # out of the ISR, then back
            await wait_until(lambda: partition.state.isr == (0, 1), "broker 2 left the ISR")
            brokers[2] = await start_broker(connect, 2)
            await wait_until(lambda: len(b0.store.brokers()) == 3, "broker 2 is back")
            assert partition.is_leader
            # The leader adds broker 2 (caught up) to the ISR; ZooKeeper applies it, the answer is held back.
            isr_write = b0.client.inject(Fault("set", zl.state_path("t", 0), Action.HOLD_ANSWER, within_multi=False))
            b0.rm.update_follower_fetch_state(TP, 2, 0)
            await asyncio.to_thread(isr_write.answered.wait, 20)
            # Meanwhile broker 1 fails: the controller takes it out of the ISR, and the leader learns of it.
            await b1.close()
            await wait_until(lambda: partition.state.isr == (0, 2), "the controller's change reached the leader")
            newest = state(admin, "t")
            assert newest is not None and partition.state.partition_epoch == newest.partition_epoch
            isr_write.release()
            assert b0.rm._expanding is not None
            await b0.rm._expanding
            assert (partition.state.isr, partition.state.partition_epoch) == ((0, 2), newest.partition_epoch)
        finally:
            for b in brokers:
                await b.close()

    asyncio.run(main())


def test_a_full_reread_answered_after_a_newer_state_does_not_undo_it(connect: str, admin: KazooClient) -> None:
    async def main() -> None:
        b0 = await start_broker(connect, 0)
        try:
            await b0.store.create_topic("t", 1, 1, {}, {0: [0]})
            told: list[int] = []

            async def listener(delta: MetadataDelta) -> None:
                told.extend(p.partition_epoch for t in delta.changed if t.name == "t" for p in t.partitions)

            b0.store.add_listener(listener)
            current = state(admin, "t")
            assert current is not None
            version = current.partition_epoch
            # After a new session the broker reads every topic again; that read is answered after a newer state.
            reread = b0.client.inject(Fault("get", zl.state_path("t", 0), Action.HOLD_ANSWER,
                                            source="rill.metadata"))  # fmt: skip
            b0.client.expire_session()
            await asyncio.to_thread(reread.answered.wait, 20)
            data, _ = admin.get(zl.state_path("t", 0))
            admin.set(zl.state_path("t", 0), data, version=version)  # the same state at the next partition epoch
            # Where another reader applies it first, it is applied before the held answer is let through.
            def image_epoch() -> int:
                topic = b0.store.topic("t")
                return -1 if topic is None else topic.partitions[0].partition_epoch

            with contextlib.suppress(AssertionError):  # with one reader only, it is the one held: nothing comes
                await wait_until(lambda: image_epoch() > version, "another read applied the newer state", 3)
            reread.release()
            # (the held read and the newer one may be told apart or as one delta, as the reads race)
            await wait_until(lambda: bool(told) and told[-1] == version + 1, "the newer state was told last")
            await wait_until(lambda: image_epoch() == version + 1 and b0.store.session_alive,
                             "the image has the newest state", 5)  # fmt: skip
            assert told == sorted(told), f"partition epochs told out of order: {told}"
        finally:
            await b0.close()

    asyncio.run(main())


def test_a_topic_a_broker_could_not_follow_is_told_again_and_does_not_stop_the_others(
    connect: str, admin: KazooClient, tmp_path: Path
) -> None:
    async def main() -> None:
        b0 = await start_broker(connect, 0, data_dir=tmp_path)
        try:
            assert b0.rm is not None and b0.logs is not None
            blocker = b0.logs.log_dirs[0] / "a-blocked-0"
            blocker.write_bytes(b"in the way of the log's directory")
            # Both topics reach the broker in one change: its reading of the topic list waits until both exist.
            read = b0.client.inject(Fault("children", zl.TOPICS, Action.HOLD, watch=False,
                                          source="rill.metadata"))  # fmt: skip
            names = ("a-blocked", "b-fine")
            creates = [asyncio.create_task(b0.store.create_topic(n, 1, 1, {}, {0: [0]})) for n in names]
            await asyncio.to_thread(read.wait_reached, 20)
            await wait_until(lambda: all(state(admin, n) is not None for n in names),
                             "the controller elected both")  # fmt: skip
            read.release()
            await asyncio.gather(*creates)
            assert TopicPartition("b-fine", 0) in b0.rm.partitions()
            assert TopicPartition("a-blocked", 0) not in b0.rm.partitions()
            blocker.unlink()
            await wait_until(lambda: TopicPartition("a-blocked", 0) in b0.rm.partitions(),
                             "the broker hosts the partition once its directory can be made")  # fmt: skip
            assert b0.rm.get_partition(TopicPartition("a-blocked", 0)).is_leader
        finally:
            await b0.close()

    asyncio.run(main())

