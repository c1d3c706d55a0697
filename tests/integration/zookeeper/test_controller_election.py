"""Controller election and broker epochs against a real ZooKeeper, with faults at exact calls: whatever fails in
the election (a write lost before ZooKeeper applied it, one applied but answered ConnectionLoss, the epoch raised
by someone else meanwhile), the cluster ends with an active controller, which re-elects the partitions of a broker
that fails afterwards; a broker registered again faster than the controller saw it gone (a new broker epoch) is
handled as failed, then back (KIP-380)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from kazoo.client import KazooClient
from tests.integration.zookeeper._mini import MiniBroker, active_controller, start_broker, state, wait_until

from rill.metadata import zk_layout as zl
from rill.testing.zk_faults import Action, Fault

pytestmark = pytest.mark.timeout(120)


async def _cluster(connect: str, admin: KazooClient, fault: Fault | None,
                   meanwhile: Callable[[Fault], Awaitable[None]] | None = None) -> list[MiniBroker]:  # fmt: skip
    """Three brokers of a cluster that had controllers before (controller epoch 3); broker 0 campaigns first, with
    ``fault`` on its client (waited for, then ``meanwhile``, then released), the others after."""
    admin.create(zl.CONTROLLER_EPOCH, b"3")
    brokers = [await start_broker(connect, i, controller=False) for i in range(3)]
    if fault is not None:
        brokers[0].client.inject(fault)
    await brokers[0].start_controller()
    if fault is not None:
        await asyncio.to_thread(fault.wait_reached, 20)
        if meanwhile is not None:
            await meanwhile(fault)
        fault.release()
    for b in brokers[1:]:
        await b.start_controller()
    return brokers


async def _a_failure_is_handled(admin: KazooClient, brokers: list[MiniBroker]) -> None:
    """The cluster has an active controller: a new partition gets a leader, and when its leader's broker fails the
    partition is led by the other replica at the next leader epoch."""
    await wait_until(lambda: active_controller(admin, brokers) is not None, "an active controller", 15)
    await brokers[0].store.create_topic("t", 1, 2, {}, {0: [1, 2]})
    first = state(admin, "t")
    assert first is not None and first.leader == 1
    await brokers[1].close()
    await wait_until(lambda: (s := state(admin, "t")) is not None and s.leader == 2
                     and s.leader_epoch == first.leader_epoch + 1, "broker 2 leads after broker 1 failed")  # fmt: skip


def _run(connect: str, admin: KazooClient, fault: Fault | None,
         meanwhile: Callable[[Fault], Awaitable[None]] | None = None) -> None:  # fmt: skip
    async def main() -> None:
        brokers = await _cluster(connect, admin, fault, meanwhile)
        try:
            await _a_failure_is_handled(admin, brokers)
        finally:
            for b in brokers:
                await b.close()

    asyncio.run(main())


def test_a_controller_epoch_write_lost_before_zookeeper_applied_it(connect: str, admin: KazooClient) -> None:
    _run(connect, admin, Fault("set", zl.CONTROLLER_EPOCH, Action.FAIL))


def test_a_controller_znode_created_but_answered_connection_loss_is_held(connect: str, admin: KazooClient) -> None:
    _run(connect, admin, Fault("create", zl.CONTROLLER, Action.APPLY_THEN_FAIL))


def test_a_controller_epoch_raised_by_another_between_the_read_and_the_write(connect: str,
                                                                             admin: KazooClient) -> None:  # fmt: skip
    async def bump(_: Fault) -> None:
        data, _stat = admin.get(zl.CONTROLLER_EPOCH)
        admin.set(zl.CONTROLLER_EPOCH, str(int(data) + 5).encode())

    _run(connect, admin, Fault("set", zl.CONTROLLER_EPOCH, Action.HOLD), bump)


def test_a_broker_registered_again_before_the_controller_saw_it_gone_loses_its_leadership(
    connect: str, admin: KazooClient
) -> None:
    async def main() -> None:
        brokers = [await start_broker(connect, 0)]
        brokers += [await start_broker(connect, i) for i in (1, 2)]
        try:
            await wait_until(lambda: active_controller(admin, brokers) is brokers[0], "broker 0 is the controller")
            await brokers[0].store.create_topic("t", 1, 2, {}, {0: [1, 2]})
            before = state(admin, "t")
            assert before is not None and before.leader == 1 and before.isr == (1, 2)
            old_epoch = admin.exists(zl.broker_path(1)).czxid
            # The controller's next pass stops at its start until the restarted broker has registered again.
            pass_start = brokers[0].client.inject(Fault("children", zl.DELETE_TOPICS, Action.HOLD, watch=False,
                                                        source="rill.controller"))  # fmt: skip
            await brokers[1].close()
            await asyncio.to_thread(pass_start.wait_reached, 20)
            brokers[1] = await start_broker(connect, 1)
            assert admin.exists(zl.broker_path(1)).czxid != old_epoch
            pass_start.release()
            await wait_until(lambda: (s := state(admin, "t")) is not None and s.leader_epoch > before.leader_epoch,
                             "a new leader epoch for the partition the restarted broker led")  # fmt: skip
            after = state(admin, "t")
            assert after is not None and after.leader == 2 and after.isr == (2,)
        finally:
            for b in brokers:
                await b.close()

    asyncio.run(main())
