"""The controller's ZooKeeper reads per topic created do not grow with the topics that exist (it used to read every
topic's assignment and every partition's state after each change), and what it must still see it sees: a broker
that fails moves the leadership of every partition it led, whichever topics changed last."""

from __future__ import annotations

import asyncio

import pytest
from kazoo.client import KazooClient
from tests.integration.zookeeper._mini import MiniBroker, active_controller, start_broker, state, wait_until

from rill.testing.zk_faults import Fault

pytestmark = pytest.mark.timeout(180)

EXISTING = 40


def _counter() -> Fault:
    """Counts the controller's reads of topic assignments and partition states (never acts)."""
    return Fault("get", "/brokers/topics/*", nth=1 << 62, source="rill.controller")


def test_the_controllers_reads_per_created_topic_do_not_grow_with_the_topics(connect: str, admin: KazooClient) -> None:
    async def main() -> None:
        brokers: list[MiniBroker] = [await start_broker(connect, 0)]
        brokers += [await start_broker(connect, i, controller=False) for i in (1, 2)]
        try:
            await wait_until(lambda: active_controller(admin, brokers) is brokers[0], "broker 0 is the controller")
            client = brokers[0].client
            store = brokers[0].store
            reads: list[int] = []
            for i in range(EXISTING):
                counter = client.inject(_counter())
                await store.create_topic(f"t{i}", 2, 2, {}, {0: [1, 2], 1: [2, 1]})
                await wait_until(lambda i=i: state(admin, f"t{i}", 1) is not None, f"t{i} has leaders")  # type: ignore[misc]
                reads.append(counter.seen)
                client.clear_faults()
            # A topic's assignment and its two partition states, read by a pass or two: not the topics before it.
            print("controller reads per topic created:", reads)
            assert max(reads[EXISTING // 2 :]) <= 12, reads
            # A failed broker: every partition it led, in every topic, gets a new leader.
            await brokers[1].close()
            await wait_until(lambda: all((s := state(admin, f"t{i}", p)) is not None and s.leader == 2
                                         for i in range(EXISTING) for p in (0, 1)),
                             "broker 2 leads every partition")  # fmt: skip
        finally:
            for b in brokers:
                await b.close()

    asyncio.run(main())
