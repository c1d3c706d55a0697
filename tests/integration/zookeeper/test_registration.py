"""A broker registers again after every new ZooKeeper session, whatever the order in which its event loop runs
kazoo's state events, and however its registration write fails (real server, real session expiry)."""

from __future__ import annotations

import asyncio

import pytest
from kazoo.client import KazooClient, KazooState
from tests.integration.zookeeper._mini import owner, start_broker, wait_until

from rill.metadata import zk_layout as zl
from rill.testing.zk_faults import Action, Fault

pytestmark = pytest.mark.timeout(120)


def test_a_new_session_that_connects_before_the_loop_ran_the_loss_still_registers_the_broker(
    connect: str, admin: KazooClient
) -> None:
    async def main() -> None:
        b = await start_broker(connect, 1, controller=False)
        try:
            old = b.client.client_id[0]
            assert owner(admin, zl.broker_path(1)) == old
            b.client.hold_session_events()
            b.client.expire_session()
            await asyncio.to_thread(b.client.wait_for_events, KazooState.LOST, KazooState.CONNECTED, timeout=20)
            # Delivered back to back on the loop's thread: as with a three-server ensemble right after SIGCONT, the
            # new session connects before the loop has run what the loss scheduled.
            b.client.release_session_events()
            await wait_until(lambda: b.store.session_alive and owner(admin, zl.broker_path(1)) == b.client.client_id[0]
                             != old, "the broker registered with its new session")  # fmt: skip
        finally:
            await b.close()

    asyncio.run(main())


def test_a_registration_that_fails_after_a_new_session_is_tried_again(connect: str, admin: KazooClient) -> None:
    async def main() -> None:
        b = await start_broker(connect, 1, controller=False)
        try:
            old = b.client.client_id[0]
            lost = b.client.inject(Fault("create", zl.broker_path(1), Action.FAIL, times=2))
            b.client.expire_session()
            await asyncio.to_thread(lost.wait_reached, 20)
            await wait_until(lambda: b.store.session_alive and owner(admin, zl.broker_path(1)) not in (0, old),
                             "the broker registered again")  # fmt: skip
            assert lost.acted == 2
        finally:
            await b.close()

    asyncio.run(main())


def test_a_registration_applied_but_answered_connection_loss_is_taken_as_made(connect: str,
                                                                               admin: KazooClient) -> None:  # fmt: skip
    async def main() -> None:
        b = await start_broker(connect, 1, controller=False)
        try:
            old = b.client.client_id[0]
            lost = b.client.inject(Fault("create", zl.broker_path(1), Action.APPLY_THEN_FAIL))
            b.client.expire_session()
            await asyncio.to_thread(lost.wait_reached, 20)
            await wait_until(lambda: b.store.session_alive and owner(admin, zl.broker_path(1)) not in (0, old),
                             "the broker counts itself registered")  # fmt: skip
        finally:
            await b.close()

    asyncio.run(main())
