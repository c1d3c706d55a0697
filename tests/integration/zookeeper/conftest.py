"""A ZooKeeper server shared by a module's tests (each test under a chroot of its own), with a short tick so that
sessions can be short, and a plain kazoo client on the test's chroot to look at what the brokers wrote."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from rill.testing.zookeeper import ZooKeeperEnsemble


@pytest.fixture(scope="module")
def zk_server() -> Iterator[ZooKeeperEnsemble]:
    with ZooKeeperEnsemble(1, tick_ms=200) as zk:
        yield zk


@pytest.fixture
def connect(zk_server: ZooKeeperEnsemble) -> str:
    """``zookeeper.connect`` of a cluster of its own: the shared server, under a fresh chroot."""
    return f"{zk_server.connect_string}/t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def admin(connect: str) -> Iterator[KazooClient]:
    """A plain client on the test's chroot (made here: the brokers find it there)."""
    hosts, chroot = connect.rsplit("/", 1)
    maker = KazooClient(hosts=hosts)
    maker.start(15)
    maker.ensure_path("/" + chroot)
    maker.stop()
    maker.close()
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(15)
    try:
        yield client
    finally:
        client.stop()
        client.close()
