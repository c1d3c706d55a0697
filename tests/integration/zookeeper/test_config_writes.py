"""Changes made of several ZooKeeper writes (client quotas and their change notices, ACLs of several resources,
SCRAM credentials read and written back) are made whole or not at all, and never lose another broker's write
(real server, faults at exact calls)."""

from __future__ import annotations

import asyncio

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from tests.integration.zookeeper._mini import start_broker, wait_until

from rill.metadata.client_quotas import QuotaEntity
from rill.metadata.zk_acls import resource_path
from rill.security.acl import (
    AccessControlEntry,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
)
from rill.security.scram import ScramCredential
from rill.testing.zk_faults import Action, Fault

pytestmark = pytest.mark.timeout(120)


def test_a_quota_is_never_written_without_the_change_notice_brokers_follow(connect: str, admin: KazooClient) -> None:
    async def main() -> None:
        b0, b1 = await start_broker(connect, 0, controller=False), await start_broker(connect, 1, controller=False)
        try:
            alice = QuotaEntity("alice", None)
            lost = b0.client.inject(Fault("create", "/config/changes/config_change_*", Action.FAIL))
            with pytest.raises(ConnectionLoss):
                await b0.store.alter_client_quotas({alice: {"producer_byte_rate": 1024.0}})
            assert lost.acted == 1
            assert admin.exists("/config/users/alice") is None or b"1024" not in admin.get("/config/users/alice")[0]
            await b0.store.alter_client_quotas({alice: {"producer_byte_rate": 2048.0}})  # the client's retry
            await wait_until(lambda: b1.store.client_quotas().get(alice).get("producer_byte_rate") == 2048.0,
                             "the other broker follows the quota")  # fmt: skip
        finally:
            await b0.close()
            await b1.close()

    asyncio.run(main())


def _acl(principal: str) -> AccessControlEntry:
    return AccessControlEntry(principal, "*", AclOperation.READ, PermissionType.ALLOW)


def test_acls_of_several_resources_are_written_whole_or_not_at_all(connect: str, admin: KazooClient) -> None:
    async def main() -> None:
        b0 = await start_broker(connect, 0, controller=False)
        try:
            first = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
            second = ResourcePattern(ResourceType.TOPIC, "payments", PatternType.LITERAL)
            b0.client.inject(Fault("create", resource_path(second), Action.FAIL))
            with pytest.raises(ConnectionLoss):
                await b0.store.alter_acls({first: [_acl("User:alice")], second: [_acl("User:bob")]})
            assert admin.exists(resource_path(first)) is None
            await b0.store.alter_acls({first: [_acl("User:alice")], second: [_acl("User:bob")]})
            assert b0.store.acls().entries(first) == frozenset({_acl("User:alice")})
            assert b0.store.acls().entries(second) == frozenset({_acl("User:bob")})
        finally:
            await b0.close()

    asyncio.run(main())


def _credential(n: int) -> ScramCredential:
    return ScramCredential(bytes([n]) * 16, bytes([n + 1]) * 32, bytes([n + 2]) * 32, 4096)


def test_two_brokers_changing_one_users_credentials_at_once_lose_neither_change(connect: str) -> None:
    async def main() -> None:
        b0, b1 = await start_broker(connect, 0, controller=False), await start_broker(connect, 1, controller=False)
        try:
            await b0.store.alter_scram_credentials({"alice": {"SCRAM-SHA-512": _credential(1)}})
            # Broker 0 adds a SHA-256 credential: it has read alice, its write waits ...
            write = b0.client.inject(Fault("set", "/config/users/alice", Action.HOLD))
            adding = asyncio.create_task(b0.store.alter_scram_credentials({"alice": {"SCRAM-SHA-256": _credential(5)}}))
            await asyncio.to_thread(write.wait_reached, 20)
            # ... while broker 1 changes her SHA-512 one.
            await b1.store.alter_scram_credentials({"alice": {"SCRAM-SHA-512": _credential(9)}})
            write.release()
            await adding
            await wait_until(lambda: b1.store.scram_credential("alice", "SCRAM-SHA-256") == _credential(5),
                             "broker 1 has the SHA-256 credential")  # fmt: skip
            assert b1.store.scram_credential("alice", "SCRAM-SHA-512") == _credential(9)
            assert b0.store.scram_credential("alice", "SCRAM-SHA-512") == _credential(9)
        finally:
            await b0.close()
            await b1.close()

    asyncio.run(main())


def test_a_deletion_of_several_topics_that_fails_deletes_none(connect: str, admin: KazooClient) -> None:
    async def main() -> None:
        b0 = await start_broker(connect, 0)
        try:
            for name in ("a", "b"):
                await b0.store.create_topic(name, 1, 1, {}, {0: [0]})
            b0.client.inject(Fault("create", "/admin/delete_topics/b", Action.FAIL))
            with pytest.raises(ConnectionLoss):
                await b0.store.delete_topics(["a", "b"])
            assert admin.get_children("/admin/delete_topics") == [] and b0.store.topic("a") is not None
            await b0.store.delete_topics(["a", "b"])
            assert b0.store.topic("a") is None and b0.store.topic("b") is None
        finally:
            await b0.close()

    asyncio.run(main())
