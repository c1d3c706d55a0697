"""A znode that a change's transaction creates under a parent that is gone (deleted by an operator or another tool
after the broker made it at start): the transaction fails with NoNode every time, which a re-read cannot cure. The
write makes the parent again and succeeds, rather than retrying the same transaction for ever on a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from kazoo.client import KazooClient
from tests.integration.zookeeper._mini import MiniBroker, start_broker

from rill.metadata import zk_layout as zl
from rill.metadata.client_quotas import QuotaEntity
from rill.metadata.zk_acls import LITERAL_CHANGES
from rill.metadata.zk_quotas import CONFIG_CHANGES
from rill.security.acl import (
    AccessControlEntry,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
)
from rill.security.scram import credential_from_password

pytestmark = pytest.mark.timeout(120)


def _scram(b: MiniBroker) -> Awaitable[None]:
    cred = credential_from_password("SCRAM-SHA-256", "secret")
    return b.store.alter_scram_credentials({"alice": {"SCRAM-SHA-256": cred}})


def _quota(b: MiniBroker) -> Awaitable[None]:
    return b.store.alter_client_quotas({QuotaEntity(user="alice"): {"producer_byte_rate": 1024.0}})


def _acl(b: MiniBroker) -> Awaitable[None]:
    entry = AccessControlEntry("User:alice", "*", AclOperation.READ, PermissionType.ALLOW)
    return b.store.alter_acls({ResourcePattern(ResourceType.TOPIC, "t", PatternType.LITERAL): [entry]})


@pytest.mark.parametrize(("parent", "change"), [
    (CONFIG_CHANGES, _scram), (CONFIG_CHANGES, _quota), (LITERAL_CHANGES, _acl),
])  # fmt: skip
def test_a_change_whose_notice_parent_was_deleted_is_made(
    connect: str, admin: KazooClient, parent: str, change: Callable[[MiniBroker], Awaitable[None]]
) -> None:
    async def main() -> None:
        broker = await start_broker(connect, 0)
        try:
            admin.delete(parent, recursive=True)
            await asyncio.wait_for(change(broker), 20)
            assert admin.get_children(parent)  # the notice the other brokers follow
        finally:
            await broker.close()

    asyncio.run(main())


def test_a_topic_deletion_whose_mark_parent_was_deleted_is_made(connect: str, admin: KazooClient) -> None:
    async def main() -> None:
        broker = await start_broker(connect, 0)
        try:
            await broker.store.create_topic("t", 1, 1, {}, {0: [0]})
            admin.delete(zl.DELETE_TOPICS, recursive=True)
            await asyncio.wait_for(broker.store.delete_topics(["t"]), 20)
            assert broker.store.topic("t") is None
        finally:
            await broker.close()

    asyncio.run(main())
