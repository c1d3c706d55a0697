"""A throwaway Rill cluster for tests: a ZooKeeper server and N brokers, each a ``rill broker`` process on a
free 127.0.0.1 port, all stopped (and their data removed) on exit.

``cluster(brokers=3)`` is a context manager giving a :class:`TestCluster`: ``.bootstrap_servers``, ``.brokers``
(ids), ``.leader(topic, partition)``, ``.controller()``, ``.kill(id)`` (SIGKILL), ``.pause(id)`` /
``.resume(id)`` (SIGSTOP/SIGCONT), ``.restart(id)``, ``.stop(id)`` (controlled), ``.start(id)``. Leaders and
the controller are read from ZooKeeper, the source of truth. With ``metrics=True`` each broker serves its
Prometheus metrics on a port of its own (``.metrics_port(id)``, kept across restarts);
``broker_overrides={id: {...}}`` gives one broker configs of its own (``broker.rack``, say).
``zookeeper_nodes=3`` runs a three-server ZooKeeper ensemble (``.zookeeper``, a :class:`ZooKeeperEnsemble`,
kills, pauses and restarts its servers); ``zookeeper_options`` go to it (``jvm_options``, ``config``,
``secure_client_port``); brokers with ``zookeeper.ssl.client.enable=true`` are given its TLS ports.

``interceptors=True`` puts a :class:`~rill.testing.interceptor.RequestInterceptor` (a TCP proxy in the test
process) in front of each broker's inter-broker listener: broker ``i`` listens for clients on ``PLAINTEXT`` and
for brokers on ``REPLICATION``, and registers the proxy's address as its ``REPLICATION`` endpoint, so
``.interceptor(i)`` holds, delays, cuts or rewrites chosen requests that other brokers send it.

``network="netns"`` (root only) puts each broker in a network namespace of its own
(:class:`~rill.testing.netns.NetworkTopology`, ``.network``) and ZooKeeper in another: broker ``i`` listens on
``10.A.B.(10+i):9092``, ZooKeeper on ``10.A.B.5``, the test's clients sit on the host side (``10.A.B.1``), and
``.isolate(id)``, ``.isolate_from_brokers(id)``, ``.isolate_from_cluster(id)``, ``.partition(a, b)`` and
``.heal(id)`` take real links down and up again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rill.testing import TestBroker
from rill.testing.interceptor import RequestInterceptor
from rill.testing.netns import BROKER_PORT, ZOOKEEPER, NetworkTopology, Node
from rill.testing.zookeeper import ZooKeeperEnsemble

CLUSTER_DEFAULTS = {
    # Failover in seconds, not the 18 s of Kafka's default session timeout (ZooKeeper's minimum is 2 ticks).
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "6000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "controlled.shutdown.retry.backoff.ms": "2000",
    "offsets.topic.replication.factor": "3",
    "default.replication.factor": "3",
}


class TestCluster:
    """N brokers sharing one ZooKeeper; see the module docstring."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    def __init__(self, brokers: int = 3, overrides: Mapping[str, Any] | None = None, *, tick_ms: int = 500,
                 data_dir: str | Path | None = None, metrics: bool = False,
                 broker_overrides: Mapping[int, Mapping[str, Any]] | None = None,
                 zookeeper_nodes: int = 1, network: str = "loopback", interceptors: bool = False,
                 zookeeper_options: Mapping[str, Any] | None = None) -> None:  # fmt: skip
        if network not in ("loopback", "netns"):
            raise ValueError(f"network is 'loopback' or 'netns', not {network!r}")
        if interceptors and network != "loopback":
            raise ValueError("interceptors need network='loopback'")
        self._interceptors: dict[int, RequestInterceptor] | None = {} if interceptors else None
        self.network = NetworkTopology(brokers) if network == "netns" else None
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir if data_dir is not None else tempfile.mkdtemp(prefix="rill-cluster-"))
        net = self.network
        try:
            self.zookeeper = ZooKeeperEnsemble(
                zookeeper_nodes, tick_ms=tick_ms, data_dir=self.data_dir / "zookeeper",
                host=net.zookeeper_address if net is not None else "127.0.0.1",
                command_prefix=net.exec_prefix(ZOOKEEPER) if net is not None else (),
                **(zookeeper_options or {}),
            )  # fmt: skip
        except BaseException:
            if self.network is not None:
                self.network.close()
            raise
        self.chroot = "/rill"
        props = {**CLUSTER_DEFAULTS, **{k: str(v) for k, v in (overrides or {}).items()}}
        props.setdefault("offsets.topic.replication.factor", str(min(3, brokers)))
        props.setdefault("default.replication.factor", str(min(3, brokers)))
        props.setdefault("transaction.state.log.replication.factor", str(min(3, brokers)))
        props.setdefault("transaction.state.log.min.isr", str(min(2, brokers)))
        props["transaction.state.log.replication.factor"] = str(
            min(int(props["transaction.state.log.replication.factor"]), brokers)
        )
        props.setdefault("share.coordinator.state.topic.replication.factor", str(min(3, brokers)))
        props.setdefault("share.coordinator.state.topic.min.isr", str(min(2, brokers)))
        for name in ("share.coordinator.state.topic.replication.factor", "share.coordinator.state.topic.min.isr"):
            props[name] = str(min(int(props[name]), brokers))
        props["offsets.topic.replication.factor"] = str(min(int(props["offsets.topic.replication.factor"]), brokers))
        props["default.replication.factor"] = str(min(int(props["default.replication.factor"]), brokers))
        self._props = props
        self._brokers: dict[int, TestBroker] = {}
        self.size = brokers
        self._metrics = metrics
        self._broker_props = {i: {k: str(v) for k, v in o.items()} for i, o in (broker_overrides or {}).items()}

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self, broker_id: int | None = None) -> TestCluster:
        """Start ZooKeeper and every broker, or (``broker_id``) one broker again."""
        if broker_id is not None:
            self._brokers[broker_id].start()
            return self
        self.zookeeper.start()
        for i in range(self.size):
            props = {**self._props, "node.id": str(i), "zookeeper.connect": self._zookeeper_connect()}
            props.update(self._broker_props.get(i, {}))
            if self._metrics:
                props["metrics.port"] = str(_free_port())
            if self._interceptors is not None:
                props.update(self._intercepted_listeners(i))
            prefix: list[str] = []
            if self.network is not None:
                props["listeners"] = f"PLAINTEXT://{self.network.address(i)}:{BROKER_PORT}"
                prefix = self.network.exec_prefix(i)
            b = TestBroker(props, subprocess=True, data_dir=self.data_dir / f"broker-{i}", command_prefix=prefix)
            self._brokers[i] = b
            b.start()
        return self

    def _zookeeper_connect(self) -> str:
        """What the brokers are given: the servers' TLS ports when the brokers speak TLS to ZooKeeper."""
        tls = self._props.get("zookeeper.ssl.client.enable", "false").lower() == "true"
        return (self.zookeeper.secure_connect_string if tls else self.zookeeper.connect_string) + self.chroot

    def _intercepted_listeners(self, broker_id: int) -> dict[str, str]:
        """The listener configs of a broker whose inter-broker endpoint is a proxy in the test process."""
        assert self._interceptors is not None
        client_port, broker_port = _free_port(), _free_port()
        proxy = self._interceptors[broker_id] = RequestInterceptor("127.0.0.1", broker_port)
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{client_port},REPLICATION://127.0.0.1:{broker_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{client_port},REPLICATION://127.0.0.1:{proxy.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION",
        }

    def interceptor(self, broker_id: int) -> RequestInterceptor:
        """The proxy of the requests other brokers send broker ``broker_id`` (a cluster started with
        ``interceptors=True``)."""
        if self._interceptors is None:
            raise RuntimeError("interceptors need a cluster started with interceptors=True")
        return self._interceptors[broker_id]

    def close(self) -> None:
        try:
            for b in self._brokers.values():
                with contextlib.suppress(Exception):
                    b.kill() if b.running else None
            for proxy in (self._interceptors or {}).values():
                proxy.close()
        finally:
            try:
                self.zookeeper.close()
            finally:
                if self.network is not None:
                    self.network.close()
                if self._own_dir:
                    shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> TestCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what tests ask ----------------------------------------------------------------------------------

    @property
    def brokers(self) -> list[int]:
        return sorted(self._brokers)

    def broker(self, broker_id: int) -> TestBroker:
        return self._brokers[broker_id]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap_servers for _, b in sorted(self._brokers.items()))

    def metrics_port(self, broker_id: int) -> int:
        """The broker's ``metrics.port`` (started with ``metrics=True``)."""
        return int(self._brokers[broker_id].overrides["metrics.port"])

    def _zk_get(self, path: str) -> bytes | None:
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError

        client = KazooClient(hosts=self.zookeeper.connect_string + self.chroot, timeout=5.0)
        client.start(10)
        try:
            return bytes(client.get(path)[0])
        except NoNodeError:
            return None
        finally:
            client.stop()
            client.close()

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader as ZooKeeper has it (-1: none)."""
        data = self._zk_get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return -1 if data is None else int(json.loads(data)["leader"])

    def isr(self, topic: str, partition: int) -> list[int]:
        data = self._zk_get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return [] if data is None else [int(r) for r in json.loads(data)["isr"]]

    def controller(self) -> int:
        data = self._zk_get("/controller")
        return -1 if data is None else int(json.loads(data)["brokerid"])

    def wait_for(self, condition: Any, timeout: float = 30.0, what: str = "the condition") -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not hold within {timeout:g} s")
            time.sleep(0.05)

    # -- faults ------------------------------------------------------------------------------------------

    def kill(self, broker_id: int) -> None:
        self._brokers[broker_id].kill()

    def stop(self, broker_id: int) -> None:
        """A controlled shutdown (SIGTERM): leadership moves off the broker before it stops."""
        self._brokers[broker_id].stop(timeout=60.0)

    def restart(self, broker_id: int, *, kill: bool = False) -> None:
        self._brokers[broker_id].restart(kill=kill)

    def pid(self, broker_id: int) -> int:
        runner = self._brokers[broker_id]._runner
        proc = getattr(runner, "_proc", None)
        if proc is None:
            raise RuntimeError(f"broker {broker_id} is not running")
        return int(proc.pid)

    def pause(self, broker_id: int) -> None:
        os.kill(self.pid(broker_id), signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        os.kill(self.pid(broker_id), signal.SIGCONT)

    # -- partitions (network="netns") -----------------------------------------------------------------------

    def _net(self) -> NetworkTopology:
        if self.network is None:
            raise RuntimeError("network partitions need a cluster started with network='netns'")
        return self.network

    def isolate(self, broker_id: int) -> None:
        """Cut every link of the broker: no broker, no ZooKeeper server and no client reaches it."""
        self._net().isolate(broker_id)

    def isolate_from_brokers(self, broker_id: int) -> None:
        """Cut the broker's links to the other brokers; ZooKeeper and the clients still reach it."""
        self._net().isolate_from_brokers(broker_id)

    def isolate_from_cluster(self, broker_id: int) -> None:
        """Cut the broker's links to the other brokers and to ZooKeeper; only the clients still reach it."""
        self._net().isolate_from_cluster(broker_id)

    def partition(self, a: Node, b: Node) -> None:
        """Cut the link between two brokers (or a broker and ZooKeeper: ``ZOOKEEPER``)."""
        self._net().partition(a, b)

    def heal(self, broker_id: int | None = None) -> None:
        """Bring the broker's links (default: every link taken down) up again."""
        self._net().heal(broker_id)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def cluster(brokers: int = 3, overrides: Mapping[str, Any] | None = None, *, metrics: bool = False,
            broker_overrides: Mapping[int, Mapping[str, Any]] | None = None, zookeeper_nodes: int = 1,
            network: str = "loopback", interceptors: bool = False,
            **configs: Any) -> Iterator[TestCluster]:  # fmt: skip
    """Start a cluster (ZooKeeper, ``zookeeper_nodes`` servers, and ``brokers`` brokers); everything is stopped and
    removed on exit."""
    props = dict(overrides or {})
    props.update({k.replace("_", "."): v for k, v in configs.items()})
    c = TestCluster(brokers, props, metrics=metrics, broker_overrides=broker_overrides, zookeeper_nodes=zookeeper_nodes,
                    network=network, interceptors=interceptors)  # fmt: skip
    try:
        c.start()
        yield c
    finally:
        c.close()
