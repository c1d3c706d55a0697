"""Faults for :mod:`rill.testing.chaos`: functions on a :class:`~rill.testing.cluster.TestCluster` that break
something (SIGKILL, SIGSTOP, a controlled stop, ZooKeeper servers killed, network links taken down), wait, and
undo it. Each takes a :class:`FaultContext` and returns what it hit; ``FAULTS`` names them all, and
``NETWORK_FAULTS`` those that need a cluster started with ``network="netns"``. ``healed`` says whether a topic is
whole again: every partition led, every broker in its ISR.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from rill.testing import BrokerStartError
from rill.testing.cluster import TestCluster
from rill.testing.netns import ZOOKEEPER

SESSION_TIMEOUT_S = 4.0  # the cluster's zookeeper.session.timeout.ms (CLUSTER_DEFAULTS)
LAG_TIME_S = 6.0  # the cluster's replica.lag.time.max.ms


@dataclass
class FaultContext:
    topic: str
    partitions: int
    rng: random.Random
    down_s: float = 6.0


Fault = Callable[[TestCluster, FaultContext], str]


def _start(c: TestCluster, broker: int) -> int:
    """Start a killed broker, again while its registration by its old ZooKeeper session is alive (a broker
    refuses to start then, as Kafka's does); returns the number of tries."""
    tries = 1
    deadline = time.monotonic() + 4 * SESSION_TIMEOUT_S
    while True:
        try:
            c.start(broker)
            return tries
        except BrokerStartError:
            if time.monotonic() > deadline:
                raise
            tries += 1
            time.sleep(0.5)


def _some_leader(c: TestCluster, ctx: FaultContext) -> int:
    p = ctx.rng.randrange(ctx.partitions)
    leader = c.leader(ctx.topic, p)
    return leader if leader >= 0 else ctx.rng.choice(c.brokers)


def kill_leader(c: TestCluster, ctx: FaultContext) -> str:
    """SIGKILL the leader of a random partition; start it again after ``down_s``."""
    b = _some_leader(c, ctx)
    c.kill(b)
    time.sleep(ctx.down_s)
    _start(c, b)
    return f"broker {b}"


def kill_controller(c: TestCluster, ctx: FaultContext) -> str:
    """SIGKILL the controller; start it again after ``down_s``."""
    b = c.controller()
    b = b if b >= 0 else ctx.rng.choice(c.brokers)
    c.kill(b)
    time.sleep(ctx.down_s)
    _start(c, b)
    return f"broker {b}"


def kill_two(c: TestCluster, ctx: FaultContext) -> str:
    """SIGKILL a partition leader and one other broker at once (the ISR falls below min.insync.replicas);
    start both again after ``down_s``."""
    first = _some_leader(c, ctx)
    second = ctx.rng.choice([b for b in c.brokers if b != first])
    c.kill(first)
    c.kill(second)
    time.sleep(ctx.down_s)
    _start(c, first)
    _start(c, second)
    return f"brokers {first}, {second}"


def kill_successive_leaders(c: TestCluster, ctx: FaultContext) -> str:
    """SIGKILL a partition leader, then its successor as soon as ZooKeeper names it (before the last replica has
    fetched much of the new epoch); start both again after ``down_s``."""
    p = ctx.rng.randrange(ctx.partitions)
    first = _some_leader(c, ctx) if c.leader(ctx.topic, p) < 0 else c.leader(ctx.topic, p)
    c.kill(first)
    deadline = time.monotonic() + 4 * SESSION_TIMEOUT_S
    second = -1
    while time.monotonic() < deadline and second in (-1, first):
        second = c.leader(ctx.topic, p)
    if second in (-1, first):
        second = ctx.rng.choice([b for b in c.brokers if b != first])
    c.kill(second)
    time.sleep(ctx.down_s)
    _start(c, first)
    _start(c, second)
    return f"brokers {first} then {second} (partition {p})"


def pause_leader(c: TestCluster, ctx: FaultContext) -> str:
    """SIGSTOP a partition leader for twice the ZooKeeper session timeout (its session expires, another replica
    leads), then SIGCONT: the zombie must not acknowledge acks=all writes it cannot commit."""
    b = _some_leader(c, ctx)
    c.pause(b)
    time.sleep(max(ctx.down_s, 2 * SESSION_TIMEOUT_S + 1))
    c.resume(b)
    return f"broker {b}"


def pause_leader_and_follower(c: TestCluster, ctx: FaultContext) -> str:
    """SIGSTOP a partition leader and one other broker past their ZooKeeper sessions (the third replica leads
    alone), then SIGCONT both at once: the paused follower's first fetches may still reach the zombie leader,
    which must not count them toward committing records under its old epoch."""
    b = _some_leader(c, ctx)
    other = ctx.rng.choice([x for x in c.brokers if x != b])
    c.pause(b)
    c.pause(other)
    time.sleep(max(ctx.down_s, 2 * SESSION_TIMEOUT_S + 1))
    c.resume(other)
    c.resume(b)
    return f"brokers {b} (leader), {other}"


def restart_leader_fast(c: TestCluster, ctx: FaultContext) -> str:
    """SIGKILL a partition leader and start it again at once (refused, as Kafka does, while its old ZooKeeper
    session holds its registration: started again until that session has expired)."""
    b = _some_leader(c, ctx)
    c.kill(b)
    return f"broker {b}, started at try {_start(c, b)}"


def stop_leader(c: TestCluster, ctx: FaultContext) -> str:
    """A controlled shutdown (SIGTERM) of a partition leader; start it again after ``down_s``."""
    b = _some_leader(c, ctx)
    c.stop(b)
    time.sleep(ctx.down_s)
    c.start(b)
    return f"broker {b}"


def pause_controller(c: TestCluster, ctx: FaultContext) -> str:
    """SIGSTOP the controller past its ZooKeeper session (another broker becomes controller), then SIGCONT:
    the zombie controller's writes must be fenced."""
    b = c.controller()
    b = b if b >= 0 else ctx.rng.choice(c.brokers)
    c.pause(b)
    time.sleep(max(ctx.down_s, 2 * SESSION_TIMEOUT_S + 1))
    c.resume(b)
    return f"broker {b}"


def kill_zookeeper_node(c: TestCluster, ctx: FaultContext) -> str:
    """SIGKILL the ZooKeeper ensemble's leader; start it again after ``down_s`` (needs ``zookeeper_nodes=3``)."""
    zk = c.zookeeper
    i = zk.leader()
    zk.kill(i)
    time.sleep(ctx.down_s)
    zk.start(i)
    return f"zookeeper server {i} of {zk.size}"


def kill_zookeeper(c: TestCluster, ctx: FaultContext) -> str:
    """SIGKILL every ZooKeeper server; start them again after ``down_s``."""
    zk = c.zookeeper
    for i in range(zk.size):
        zk.kill(i)
    time.sleep(ctx.down_s)
    zk.start()
    return f"all {zk.size} zookeeper servers"


def isolate_leader(c: TestCluster, ctx: FaultContext) -> str:
    """Cut every link of a partition leader (from its followers, ZooKeeper and the clients) for longer than twice
    the ZooKeeper session timeout, then bring them up: its session expires, another replica leads, and the old
    leader must acknowledge no acks=all write it could not commit and, once back, truncate to the new leader's
    log (needs ``network="netns"``)."""
    b = _some_leader(c, ctx)
    c.isolate(b)
    time.sleep(max(ctx.down_s, 2 * SESSION_TIMEOUT_S + 1))
    c.heal(b)
    return f"broker {b}"


def isolate_controller(c: TestCluster, ctx: FaultContext) -> str:
    """Cut every link of the controller past its ZooKeeper session (another broker becomes controller), then
    bring them up (needs ``network="netns"``)."""
    b = c.controller()
    b = b if b >= 0 else ctx.rng.choice(c.brokers)
    c.isolate(b)
    time.sleep(max(ctx.down_s, 2 * SESSION_TIMEOUT_S + 1))
    c.heal(b)
    return f"broker {b}"


def isolate_leader_from_cluster(c: TestCluster, ctx: FaultContext) -> str:
    """Cut a partition leader's links to the other brokers and to ZooKeeper, not to the clients, past twice the
    ZooKeeper session timeout: producers still reach the old leader while another replica leads, and it must
    acknowledge none of their acks=all writes; then bring the links up (needs ``network="netns"``)."""
    b = _some_leader(c, ctx)
    c.isolate_from_cluster(b)
    time.sleep(max(ctx.down_s, 2 * SESSION_TIMEOUT_S + 1))
    c.heal(b)
    return f"broker {b}"


def partition_leader_from_zookeeper(c: TestCluster, ctx: FaultContext) -> str:
    """Cut only the link between a partition leader and ZooKeeper past twice the session timeout: its followers
    and clients still reach it, its session expires and another replica leads (needs ``network="netns"``)."""
    b = _some_leader(c, ctx)
    c.partition(b, ZOOKEEPER)
    time.sleep(max(ctx.down_s, 2 * SESSION_TIMEOUT_S + 1))
    c.heal(b)
    return f"broker {b}"


def isolate_leader_from_followers(c: TestCluster, ctx: FaultContext) -> str:
    """Cut a partition leader's links to the other brokers only: it keeps its ZooKeeper session and its clients,
    its followers fall out of its ISR after ``replica.lag.time.max.ms`` and, below ``min.insync.replicas``, it
    must refuse acks=all writes; the links come up after the lag time (needs ``network="netns"``)."""
    b = _some_leader(c, ctx)
    c.isolate_from_brokers(b)
    time.sleep(max(ctx.down_s, LAG_TIME_S + 2))
    c.heal(b)
    return f"broker {b}"


def partition_leader_and_follower(c: TestCluster, ctx: FaultContext) -> str:
    """Cut the link between a partition leader and one of its followers past ``replica.lag.time.max.ms``: the
    follower leaves the ISR, the other two go on; then bring it up (needs ``network="netns"``)."""
    b = _some_leader(c, ctx)
    other = ctx.rng.choice([x for x in c.brokers if x != b])
    c.partition(b, other)
    time.sleep(max(ctx.down_s, LAG_TIME_S + 2))
    c.heal(b)
    return f"brokers {b} (leader), {other}"


FAULTS: dict[str, Fault] = {
    "kill_leader": kill_leader,
    "kill_controller": kill_controller,
    "kill_two": kill_two,
    "kill_successive_leaders": kill_successive_leaders,
    "pause_leader": pause_leader,
    "pause_leader_and_follower": pause_leader_and_follower,
    "restart_leader_fast": restart_leader_fast,
    "stop_leader": stop_leader,
    "pause_controller": pause_controller,
    "kill_zookeeper_node": kill_zookeeper_node,
    "kill_zookeeper": kill_zookeeper,
    "isolate_leader": isolate_leader,
    "isolate_controller": isolate_controller,
    "isolate_leader_from_cluster": isolate_leader_from_cluster,
    "partition_leader_from_zookeeper": partition_leader_from_zookeeper,
    "isolate_leader_from_followers": isolate_leader_from_followers,
    "partition_leader_and_follower": partition_leader_and_follower,
}
# Faults that take network links down: only on a cluster started with network="netns".
NETWORK_FAULTS = frozenset({"isolate_leader", "isolate_controller", "isolate_leader_from_cluster",
                            "partition_leader_from_zookeeper", "isolate_leader_from_followers",
                            "partition_leader_and_follower"})  # fmt: skip


def healed(c: TestCluster, topic: str, partitions: int) -> bool:
    """Every partition has a leader and every broker in its ISR."""
    try:
        return all(sorted(c.isr(topic, p)) == c.brokers and c.leader(topic, p) >= 0 for p in range(partitions))
    except Exception:
        return False
