"""Real network partitions for test clusters: every broker, and ZooKeeper, in a Linux network namespace of its
own, joined through a hub namespace by veth pairs; partitions take links down and bring them up again (needs root
and ``ip`` from iproute2).

    with NetworkTopology(3) as net:
        net.address(0)              # "10.A.B.10": broker 0 listens there, inside namespace net.namespace(0)
        net.isolate(0)              # broker 0 reaches nothing, nothing reaches it
        net.heal(0)
        net.isolate_from_cluster(0)  # cut from the other brokers and ZooKeeper; the clients still reach it
        net.partition(0, ZOOKEEPER)  # cut from ZooKeeper only (partition(0, 1): from broker 1 only)
        net.heal()                  # every link up again

The layout, all inside this machine::

    root namespace (the test and its clients): 10.A.B.1/24 on one veth, ``rn<pid>x<n>``, into the hub
      |
    hub namespace: bridge ``br0`` joins the root namespace's veth and every node's ``eth0`` (the "service"
      |            network: clients to brokers, the test to ZooKeeper); one bridge per pair of nodes joins
      |            those two only
    node namespaces (``b0``, ``b1``, ... and ``zk``): ``eth0`` with the node's address (a /32; brokers
                   10.A.B.(10+id), ZooKeeper 10.A.B.5) and a route to 10.A.B.1 only; one link per other node,
                   named after it (``b1``, ``zk``), with a /32 route to that node's address

A node reaches the root namespace only through ``eth0`` and another node only through the link of their pair, so
a partition takes down exactly the links it names. Links are taken down at the hub end: the node's own
interface only loses its carrier, its routes stay, and what it sends is dropped without an error, as when a cable
is pulled or a switch port fails. Once a link is up again the first packet may wait a second (ARP asks again each
second). Nothing is routed outside the machine: the node namespaces have no default route, the hub forwards
frames between its own ports only, and the root namespace gets one /24 route to the hub, on a 10.x subnet that
no route or address of the machine overlaps.

Names carry the process id and a counter (``rn<pid>x<n>-hub``, ``rn<pid>x<n>-b0``, ``rn<pid>x<n>-zk``) so runs
side by side never collide. ``close()`` (or leaving the ``with`` block) deletes the root veth and every
namespace, which removes every link in them; it runs even when the setup failed half way. A process killed
outright leaves them behind: ``ip netns list`` shows them, ``ip netns del NAME`` removes one.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import random
import shutil
import subprocess as sp
from collections.abc import Iterable, Sequence

__all__ = ["NetnsUnavailable", "NetworkTopology", "netns_unavailable_reason"]

_COUNTER = itertools.count()
BROKER_PORT = 9092  # every broker has an address of its own, so each can listen on Kafka's usual port
ZOOKEEPER = "zk"  # the ZooKeeper node, beside the brokers' ids
Node = int | str  # a broker id, or ZOOKEEPER


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, or no ``ip``); the message says which."""


def netns_unavailable_reason() -> str | None:
    """Why network namespaces cannot be used here, None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    return None


def _ip(*args: str, namespace: str | None = None, check: bool = True) -> str:
    cmd = ["ip", *(["-n", namespace] if namespace else []), *args]
    done = sp.run(cmd, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()}")
    return done.stdout


def _used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 destination and address the root namespace has (the default route aside)."""
    nets: list[ipaddress.IPv4Network] = []
    for line in _ip("-4", "-o", "route", "show", "table", "all").splitlines() + _ip("-4", "-o", "addr").splitlines():
        for word in line.split():
            with contextlib.suppress(ValueError):
                if word[0].isdigit():
                    nets.append(ipaddress.IPv4Network(word, strict=False))
    return nets


def _free_subnet(rng: random.Random) -> ipaddress.IPv4Network:
    used = _used_networks()
    for _ in range(200):
        net = ipaddress.IPv4Network(f"10.{rng.randrange(64, 250)}.{rng.randrange(256)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free 10.x.y.0/24 subnet for the test network")


class NetworkTopology:
    """``brokers`` broker namespaces and a ZooKeeper namespace around a hub; see the module docstring."""

    def __init__(self, brokers: int) -> None:
        reason = netns_unavailable_reason()
        if reason is not None:
            raise NetnsUnavailable(reason)
        self.size = brokers
        self.name = f"rn{os.getpid()}x{next(_COUNTER)}"
        self.hub = f"{self.name}-hub"
        self.host_link = self.name  # the root namespace's end of its veth into the hub (15 characters at most)
        self.subnet = _free_subnet(random.Random())
        self.host_address = str(self.subnet.network_address + 1)
        self.nodes: list[Node] = [*range(brokers), ZOOKEEPER]
        self._made: list[str] = []  # namespaces made so far, deleted by close()
        self._down: set[str] = set()  # hub-side links taken down
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # -- names -------------------------------------------------------------------------------------------

    def namespace(self, node: Node) -> str:
        return f"{self.name}-{_tag(node)}"

    def address(self, node: Node) -> str:
        """A broker's address (10.A.B.(10+id)), or ZooKeeper's (10.A.B.5)."""
        return str(self.subnet.network_address + (5 if node == ZOOKEEPER else 10 + int(node)))

    @property
    def zookeeper_address(self) -> str:
        return self.address(ZOOKEEPER)

    def exec_prefix(self, node: Node) -> list[str]:
        """The command prefix that runs a program inside a node's namespace (``ip netns exec`` execs it in place)."""
        return ["ip", "netns", "exec", self.namespace(node)]

    @staticmethod
    def _service_port(node: Node) -> str:
        return f"s{_tag(node)}"  # the hub end of the node's eth0

    @staticmethod
    def _pair_port(node: Node, other: Node) -> str:
        return f"p{_tag(node)}{_tag(other)}"  # the hub end of node's link to other

    # -- building and removing ----------------------------------------------------------------------------

    def _add_namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self._made.append(name)
        _ip("link", "set", "lo", "up", namespace=name)

    def _build(self) -> None:
        self._add_namespace(self.hub)
        _ip("link", "add", "br0", "type", "bridge", namespace=self.hub)
        _ip("link", "set", "br0", "up", namespace=self.hub)
        _ip("link", "add", "name", self.host_link, "type", "veth", "peer", "name", "host", "netns", self.hub)
        _ip("link", "set", "host", "master", "br0", "up", namespace=self.hub)
        _ip("addr", "add", f"{self.host_address}/{self.subnet.prefixlen}", "dev", self.host_link)
        _ip("link", "set", self.host_link, "up")
        for node in self.nodes:
            ns = self.namespace(node)
            self._add_namespace(ns)
            self._link(ns, "eth0", self._service_port(node), "br0")
            _ip("addr", "add", f"{self.address(node)}/32", "dev", "eth0", namespace=ns)
            _ip("route", "add", f"{self.host_address}/32", "dev", "eth0", "src", self.address(node), namespace=ns)
        for a, b in itertools.combinations(self.nodes, 2):
            bridge = f"q{_tag(a)}{_tag(b)}"
            _ip("link", "add", bridge, "type", "bridge", namespace=self.hub)
            _ip("link", "set", bridge, "up", namespace=self.hub)
            for me, other in ((a, b), (b, a)):
                ns = self.namespace(me)
                self._link(ns, _tag(other), self._pair_port(me, other), bridge)
                _ip("route", "add", f"{self.address(other)}/32", "dev", _tag(other), "src", self.address(me),
                    namespace=ns)  # fmt: skip

    def _link(self, ns: str, inner: str, hub_end: str, bridge: str) -> None:
        _ip("link", "add", "name", inner, "netns", ns, "type", "veth", "peer", "name", hub_end, "netns", self.hub)
        _ip("link", "set", hub_end, "master", bridge, "up", namespace=self.hub)
        _ip("link", "set", inner, "up", namespace=ns)

    def close(self) -> None:
        """Delete the host veth and every namespace (with every link in them); safe to call twice."""
        _ip("link", "del", self.host_link, check=False)
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        self._made.clear()

    def __enter__(self) -> NetworkTopology:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- partitions ---------------------------------------------------------------------------------------

    def _set(self, links: Iterable[str], up: bool) -> None:
        for link in links:
            _ip("link", "set", link, "up" if up else "down", namespace=self.hub)
            (self._down.discard if up else self._down.add)(link)

    def isolate(self, node: Node) -> None:
        """Cut every link of a broker (or of ZooKeeper): it reaches no broker, no ZooKeeper server, no client."""
        self._set([self._service_port(node), *(self._pair_port(node, o) for o in self._others(node))], False)

    def isolate_from_brokers(self, broker: int) -> None:
        """Cut a broker's links to the other brokers: ZooKeeper and the clients still reach it."""
        self._set([self._pair_port(broker, o) for o in self._others(broker) if o != ZOOKEEPER], False)

    def isolate_from_cluster(self, broker: int) -> None:
        """Cut a broker's links to the other brokers and to ZooKeeper: only the clients still reach it."""
        self._set([self._pair_port(broker, o) for o in self._others(broker)], False)

    def partition(self, a: Node, b: Node) -> None:
        """Cut the link between two nodes only (two brokers, or a broker and ZooKeeper)."""
        self._set([self._pair_port(a, b)], False)

    def heal(self, node: Node | None = None) -> None:
        """Bring up every link of a node (both ends of its pair links), or every link taken down."""
        if node is None:
            self._set(sorted(self._down), True)
            return
        ports = [self._service_port(node)]
        for o in self._others(node):
            ports += [self._pair_port(node, o), self._pair_port(o, node)]
        self._set([p for p in ports if p in self._down], True)

    @property
    def down(self) -> list[str]:
        """The hub-side links taken down now."""
        return sorted(self._down)

    def _others(self, node: Node) -> Sequence[Node]:
        return [o for o in self.nodes if o != node]


def _tag(node: Node) -> str:
    return node if isinstance(node, str) else f"b{node}"
