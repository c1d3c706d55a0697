"""In-process brokers of a cluster, for deterministic ZooKeeper tests: each one a real ``ZkMetadataStore`` (and,
when asked, a ``KafkaController`` and a ``ReplicaManager`` on real logs) on a ``FaultInjectingKazooClient``, against
a real ZooKeeper server. No Kafka listener: what is under test is what the brokers write to and read from
ZooKeeper, and what their replica managers make of it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from rill.controller.controller import KafkaController
from rill.log.log_config import LogConfig
from rill.log.log_manager import LogManager
from rill.metadata import zk_layout as zl
from rill.metadata.store import BrokerInfo
from rill.metadata.zookeeper import ZkMetadataStore
from rill.replica.replica_manager import ReplicaManager
from rill.testing.zk_faults import FaultInjectingKazooClient

SESSION_TIMEOUT_MS = 2000


@dataclass
class MiniBroker:
    node_id: int
    store: ZkMetadataStore
    client: FaultInjectingKazooClient
    controller: KafkaController | None = None
    rm: ReplicaManager | None = None
    logs: LogManager | None = None

    async def start_controller(self) -> KafkaController:
        self.controller = KafkaController(self.client, self.node_id)
        await self.controller.start()
        return self.controller

    async def close(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
        if self.rm is not None:
            self.rm.shutdown()
        await self.store.close()
        if self.logs is not None:
            self.logs.shutdown()


async def start_broker(connect: str, node_id: int, *, controller: bool = True, data_dir: Path | None = None,
                       wait_timeout_s: float = 15.0) -> MiniBroker:  # fmt: skip
    """A broker registered in the cluster at ``connect``; with ``data_dir``, a replica manager on logs there."""
    made: list[FaultInjectingKazooClient] = []

    def client(hosts: str, timeout: float) -> FaultInjectingKazooClient:
        made.append(FaultInjectingKazooClient(hosts=hosts, timeout=timeout))
        return made[-1]

    store = ZkMetadataStore(connect, node_id, BrokerInfo(node_id, "127.0.0.1", 19000 + node_id),
                            session_timeout_ms=SESSION_TIMEOUT_MS, connection_timeout_ms=15000,
                            wait_timeout_s=wait_timeout_s, client_factory=client)  # fmt: skip
    broker = MiniBroker(node_id, store, made[0])
    if data_dir is not None:
        broker.logs = LogManager([data_dir / f"broker-{node_id}"], LogConfig())
        broker.logs.startup()
        broker.rm = ReplicaManager(node_id, broker.logs, store, lambda configs: dict(configs))
        store.on_session_change = broker.rm.on_session_change
    await store.start()
    if broker.rm is not None:
        broker.rm.sync_with_metadata()
    if controller:
        await broker.start_controller()
    return broker


async def wait_until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Wait (polling every 20 ms) until ``condition()``; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        await asyncio.sleep(0.02)


def state(admin: KazooClient, topic: str, partition: int = 0) -> zl.LeaderAndIsr | None:
    """A partition's state as ZooKeeper has it (None before the controller wrote it)."""
    try:
        data, stat = admin.get(zl.state_path(topic, partition))
    except NoNodeError:
        return None
    return zl.decode_state(data, stat.version)


def owner(admin: KazooClient, path: str) -> int:
    """The session owning an ephemeral znode (0: none)."""
    stat = admin.exists(path)
    return 0 if stat is None else int(stat.ephemeralOwner)


def active_controller(admin: KazooClient, brokers: list[MiniBroker]) -> MiniBroker | None:
    """The broker whose controller is active, holds ``/controller`` with its session and has the epoch ZooKeeper
    has; None when there is none."""
    try:
        data, _ = admin.get(zl.CONTROLLER_EPOCH)
    except NoNodeError:
        return None
    held = owner(admin, zl.CONTROLLER)
    for b in brokers:
        c = b.controller
        session = b.client.client_id
        if c is not None and c.active and session is not None and held == session[0] and c.epoch == int(data):
            return b
    return None
