"""Real network partitions: brokers and ZooKeeper in network namespaces, links taken down at the hub.

The first test checks the topology itself with plain TCP listeners in the namespaces: what each partition cuts,
what it leaves, and that closing removes every namespace and link. The second runs the fault checker with every
partition fault against a three-broker cluster (replication factor 3, min.insync.replicas=2): no acknowledged
write is lost and no offset ever holds two values. Both need root and ``ip`` (iproute2); they skip otherwise.
"""

from __future__ import annotations

import json
import socket
import subprocess as sp
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from rill.testing.chaos import run
from rill.testing.cluster import cluster
from rill.testing.faults import NETWORK_FAULTS
from rill.testing.netns import ZOOKEEPER, NetworkTopology, Node, netns_unavailable_reason

REASON = netns_unavailable_reason()
pytestmark = [pytest.mark.skipif(REASON is not None, reason=REASON or "")]

PORT = 7000
# Accepts connections on the namespace's address for at most a minute, answering each with one byte.
LISTENER = """
import socket, sys, time
s = socket.create_server((sys.argv[1], int(sys.argv[2])))
s.settimeout(1.0)
print("ready", flush=True)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        conn, _ = s.accept()
    except TimeoutError:
        continue
    conn.sendall(b"!")
    conn.close()
"""
# Connects from inside a namespace; prints ok or the error. Three seconds: once a link is up again, resolving the
# peer's address can take a second (ARP asks again each second).
CONNECT = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3.0) as s:
        print("ok" if s.recv(1) == b"!" else "no answer")
except OSError as e:
    print(type(e).__name__)
"""


@pytest.fixture
def net() -> Iterator[NetworkTopology]:
    with NetworkTopology(2) as topology:
        listeners = []
        try:
            for node in topology.nodes:
                proc = sp.Popen([*topology.exec_prefix(node), sys.executable, "-c", LISTENER,
                                 topology.address(node), str(PORT)], stdout=sp.PIPE, text=True)  # fmt: skip
                listeners.append(proc)
                assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            yield topology
        finally:
            for proc in listeners:
                proc.kill()
                proc.wait(10)


def _from(net: NetworkTopology, src: Node, dst: Node) -> bool:
    """Whether ``src`` (a node, or "host": the root namespace) opens a connection to ``dst`` and is answered."""
    if src == "host":
        try:
            with socket.create_connection((net.address(dst), PORT), timeout=3.0) as s:
                return s.recv(1) == b"!"
        except OSError:
            return False
    out = sp.run([*net.exec_prefix(src), sys.executable, "-c", CONNECT, net.address(dst), str(PORT)],
                 capture_output=True, text=True, timeout=30)  # fmt: skip
    return out.stdout.strip() == "ok"


def _reach(net: NetworkTopology) -> set[tuple[Node, Node]]:
    """Every (from, to) pair that connects, all tried at once."""
    pairs = [(a, b) for a in ["host", *net.nodes] for b in net.nodes if a != b]
    with ThreadPoolExecutor(len(pairs)) as pool:
        ok = list(pool.map(lambda pair: _from(net, *pair), pairs))
    return {pair for pair, reached in zip(pairs, ok, strict=True) if reached}


def _reaches(net: NetworkTopology, expected: set[tuple[Node, Node]], timeout: float = 10.0) -> bool:
    """Whether the reachability becomes ``expected`` within ``timeout`` (a link brought up again takes a moment
    to pass traffic on a busy machine: the bridge port, the neighbours' ARP entries)."""
    deadline = time.monotonic() + timeout
    while True:
        got = _reach(net)
        if got == expected or time.monotonic() > deadline:
            assert got == expected, (sorted(map(str, got - expected)), sorted(map(str, expected - got)))
            return True
        time.sleep(0.5)


def test_partitions_cut_exactly_the_links_they_name(net: NetworkTopology) -> None:
    everything = {(a, b) for a in ["host", 0, 1, ZOOKEEPER] for b in (0, 1, ZOOKEEPER) if a != b}
    assert _reaches(net, everything)

    net.isolate(0)  # nothing reaches broker 0, and it reaches nothing
    assert _reaches(net, {p for p in everything if 0 not in p})
    net.heal(0)
    assert _reaches(net, everything)

    net.isolate_from_brokers(0)  # ZooKeeper and the host still reach it
    assert _reaches(net, everything - {(0, 1), (1, 0)})
    net.heal()

    net.isolate_from_cluster(1)  # only the host reaches it
    assert _reaches(net, everything - {(0, 1), (1, 0), (1, ZOOKEEPER), (ZOOKEEPER, 1)})
    net.heal(1)

    net.partition(0, ZOOKEEPER)
    assert _reaches(net, everything - {(0, ZOOKEEPER), (ZOOKEEPER, 0)})
    net.heal()
    assert _reaches(net, everything) and net.down == []


def test_names_are_unique_and_close_removes_everything() -> None:
    with NetworkTopology(1) as a, NetworkTopology(1) as b:
        assert a.name != b.name and a.subnet != b.subnet
        names = [a.hub, a.namespace(0), a.namespace(ZOOKEEPER), b.hub, b.namespace(0)]
        listed = sp.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
        assert all(n in listed.split() for n in names)
    listed = sp.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert not any(n in listed.split() for n in names)
    deadline = time.monotonic() + 10
    links = ""
    while time.monotonic() < deadline:  # the kernel removes a deleted namespace's links in the background
        links = sp.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
        if str(a.host_address) not in links and str(b.host_address) not in links:
            break
        time.sleep(0.1)
    assert a.host_address not in links and b.host_address not in links


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_partitions_lose_no_acknowledged_write() -> None:
    schedule = ["isolate_leader", "isolate_leader_from_cluster", "isolate_controller",
                "partition_leader_from_zookeeper", "isolate_leader_from_followers",
                "partition_leader_and_follower"]  # fmt: skip
    assert set(schedule) == NETWORK_FAULTS
    with cluster(3, network="netns") as c:
        report = run(c, schedule, down_s=5.0, quiet_s=2.0, seed=13)
    print(json.dumps(report, indent=1, default=str))
    assert report["acknowledged"] > 0
    assert report["lost"] == 0, report["examples"]
    assert report["inconsistent"] == 0, report["examples"]
    assert report["duplicates"] == 0, report["examples"]
    assert report["reordered"] == 0, report["examples"]
    assert all(f["healed"] for f in report["faults"]), report["faults"]


def _read(bootstrap: str, topic: str) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "zombie", "enable.auto.commit": False})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[tuple[int, str]] = []
        deadline = time.monotonic() + 30
        while (not out or out[-1][0] + 1 < end) and time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.5):
                if msg.error() is None:
                    out.append((msg.offset(), msg.value().decode()))
        return [v for _, v in out]
    finally:
        consumer.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_leader_cut_off_from_the_cluster_acknowledges_nothing_and_truncates_on_heal() -> None:
    """Producers still reach a leader cut off from its followers and from ZooKeeper: it must acknowledge none of
    their acks=all writes (its followers cannot fetch them, its ISR cannot shrink without ZooKeeper); once the
    links are up it follows the new leader, dropping what it wrote alone."""
    topic = "zombie"
    with cluster(3, network="netns") as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        new = NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})
        admin.create_topics([new])[topic].result(30)
        c.wait_for(lambda: sorted(c.isr(topic, 0)) == c.brokers, 30, "a full ISR")
        old = c.leader(topic, 0)
        acked: list[str] = []
        failed: list[str] = []

        def report(err: Any, msg: Any) -> None:
            (failed if err is not None else acked).append(msg.value().decode())

        def produce(bootstrap: str, values: list[str], timeout_ms: int) -> None:
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": timeout_ms,
                                 "request.timeout.ms": 3000, "retry.backoff.ms": 200})  # fmt: skip
            for v in values:
                producer.produce(topic, v.encode(), partition=0, on_delivery=report)
            producer.flush(timeout_ms / 1000 + 10)

        produce(c.broker(old).bootstrap_servers, [f"before-{i}" for i in range(5)], 10_000)
        assert acked == [f"before-{i}" for i in range(5)]

        c.isolate_from_cluster(old)
        # Only the old leader is asked: it still believes it leads, and appends what it is sent.
        produce(c.broker(old).bootstrap_servers, [f"alone-{i}" for i in range(5)], 10_000)
        assert not [v for v in acked if v.startswith("alone")], acked
        assert sorted(failed) == [f"alone-{i}" for i in range(5)]
        new_leader = c.leader(topic, 0)
        assert new_leader not in (old, -1)  # its session has expired: another replica leads

        # Not through the old leader: cut off, it still names itself the leader in its metadata answers.
        others = ",".join(c.broker(b).bootstrap_servers for b in c.brokers if b != old)
        produce(others, [f"after-{i}" for i in range(5)], 30_000)
        assert [v for v in acked if v.startswith("after")] == [f"after-{i}" for i in range(5)]
        c.heal(old)
        c.wait_for(lambda: sorted(c.isr(topic, 0)) == c.brokers, 60, "the old leader back in the ISR")
        expected = [f"before-{i}" for i in range(5)] + [f"after-{i}" for i in range(5)]
        assert _read(c.bootstrap_servers, topic) == expected
        for other in (b for b in c.brokers if b != old):  # the old leader leads again: the same records
            c.stop(other)
        c.wait_for(lambda: c.leader(topic, 0) == old, 30, "the old leader leading again")
        assert _read(c.broker(old).bootstrap_servers, topic) == expected
