"""Watches that outlive their znode: kazoo's children watch stops for good once its znode is deleted, so a parent an
operator deleted and made again (or a cluster's chroot wiped and rebuilt) would never be followed again. Each test
deletes a watched parent, waits until the broker's client has handled the deletion's events, makes the parent again
and checks that a later change below it is still followed."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Awaitable, Callable

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import Callback
from tests.integration.zookeeper._mini import MiniBroker, start_broker, state, wait_until

from rill.metadata import zk_layout as zl
from rill.metadata.zk_acls import type_dir
from rill.metadata.zk_client_metrics import CLIENT_METRICS, subscription_path
from rill.metadata.zk_users import USERS
from rill.metadata.zk_watches import lasting_children_watch
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


def _deletion_handled(broker: MiniBroker) -> None:
    """Wait until the broker's client has run the watch callbacks of every change made so far: ZooKeeper sends a
    watch event before the answer to any later request, and kazoo runs callbacks in order on one thread."""
    broker.client.exists("/")
    done = threading.Event()
    broker.client.handler.dispatch_callback(Callback("watch", done.set, ()))
    assert done.wait(10), "the broker's kazoo callbacks did not drain"


def _wipe(admin: KazooClient, broker: MiniBroker, parent: str) -> None:
    admin.delete(parent, recursive=True)
    _deletion_handled(broker)
    admin.ensure_path(parent)


def _write_topic(admin: KazooClient, name: str, replicas: tuple[int, ...]) -> None:
    """A topic made as another tool would make it: its assignment and its partition list."""
    admin.create(zl.topic_config_path(name), zl.encode_configs({}), makepath=True)
    admin.create(zl.topic_path(name), zl.encode_assignment(zl.Assignment(uuid.uuid4(), {0: replicas})))
    admin.create(zl.partitions_path(name))


# (admin, the broker watching, its zookeeper.connect, brokers the change started) -> whether the broker followed it
Followed = Callable[[], bool]
Change = Callable[[KazooClient, MiniBroker, str, list[MiniBroker]], Awaitable[Followed]]


async def _new_broker(admin: KazooClient, b: MiniBroker, connect: str, started: list[MiniBroker]) -> Followed:
    started.append(await start_broker(connect, 1, controller=False))
    return lambda: any(x.node_id == 1 for x in b.store.brokers())


async def _new_topic(admin: KazooClient, b: MiniBroker, connect: str, started: list[MiniBroker]) -> Followed:
    _write_topic(admin, "t", (0,))
    return lambda: b.store.topic("t") is not None


async def _new_group_config(admin: KazooClient, b: MiniBroker, connect: str, started: list[MiniBroker]) -> Followed:
    admin.create(zl.group_config_path("g"), zl.encode_configs({"consumer.session.timeout.ms": "50000"}))
    return lambda: dict(b.store.group_configs("g")) == {"consumer.session.timeout.ms": "50000"}


async def _new_subscription(admin: KazooClient, b: MiniBroker, connect: str, started: list[MiniBroker]) -> Followed:
    admin.create(subscription_path("s"), zl.encode_configs({"metrics": "*"}))
    return lambda: dict(b.store.client_metrics_configs().get("s", {})) == {"metrics": "*"}


async def _new_user(admin: KazooClient, b: MiniBroker, connect: str, started: list[MiniBroker]) -> Followed:
    cred = credential_from_password("SCRAM-SHA-256", "secret")
    await asyncio.wait_for(b.store.alter_scram_credentials({"alice": {"SCRAM-SHA-256": cred}}), 20)
    return lambda: b.store.scram_credential("alice", "SCRAM-SHA-256") == cred


_PATTERN = ResourcePattern(ResourceType.TOPIC, "t", PatternType.LITERAL)
_ENTRY = AccessControlEntry("User:alice", "*", AclOperation.READ, PermissionType.ALLOW)


async def _new_acl(admin: KazooClient, b: MiniBroker, connect: str, started: list[MiniBroker]) -> Followed:
    await asyncio.wait_for(b.store.alter_acls({_PATTERN: [_ENTRY]}), 20)
    return lambda: _ENTRY in b.store.acls().entries(_PATTERN)


@pytest.mark.parametrize(("parent", "change"), [
    (zl.BROKER_IDS, _new_broker),
    (zl.TOPICS, _new_topic),
    (zl.GROUP_CONFIGS, _new_group_config),
    (CLIENT_METRICS, _new_subscription),
    (USERS, _new_user),
    (type_dir(ResourceType.TOPIC, PatternType.LITERAL), _new_acl),
])  # fmt: skip
def test_the_store_follows_a_parent_made_again(connect: str, admin: KazooClient, parent: str, change: Change) -> None:
    async def main() -> None:
        broker = await start_broker(connect, 0, controller=False)
        started: list[MiniBroker] = []
        try:
            _wipe(admin, broker, parent)
            followed = await change(admin, broker, connect, started)
            await wait_until(followed, f"a change below {parent} made again", timeout=10)
        finally:
            for other in started:
                await other.close()
            await broker.close()

    asyncio.run(main())


def test_the_controller_follows_the_broker_list_made_again(connect: str, admin: KazooClient) -> None:
    async def main() -> None:
        broker = await start_broker(connect, 0)
        other = await start_broker(connect, 1, controller=False)
        try:
            _write_topic(admin, "t", (1,))
            await wait_until(lambda: (s := state(admin, "t")) is not None and s.leader == 1, "broker 1 leading", 10)
            await other.close()
            await wait_until(lambda: (s := state(admin, "t")) is not None and s.leader == -1, "no leader", 10)
            _wipe(admin, broker, zl.BROKER_IDS)
            other = await start_broker(connect, 1, controller=False)
            await wait_until(lambda: (s := state(admin, "t")) is not None and s.leader == 1,
                             "broker 1 leading again once it registers again", 10)  # fmt: skip
        finally:
            await other.close()
            await broker.close()

    asyncio.run(main())


def test_a_lasting_watch_of_a_znode_missing_at_first_follows_it_once_made(admin: KazooClient) -> None:
    seen: list[list[str]] = []
    changed = threading.Condition()

    def on_children(children: list[str]) -> None:
        with changed:
            seen.append(sorted(children))
            changed.notify_all()

    def saw(children: list[str]) -> None:
        with changed:
            assert changed.wait_for(lambda: seen and seen[-1] == children, 10), f"{children} not seen: {seen}"

    lasting_children_watch(admin, "/p", on_children)
    admin.create("/p/a", makepath=True)
    saw(["a"])
    admin.delete("/p", recursive=True)
    admin.create("/p/b", makepath=True)  # deleted and made again before the events are handled
    admin.create("/p/c")
    saw(["b", "c"])
