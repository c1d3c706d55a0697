"""The faults of the transactional checker (``rill.testing.txn_checker``): each a function of no argument that
breaks something, waits until the cluster has healed and says what it hit."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from rill.coordinator.group.group_metadata_manager import partition_for
from rill.testing.faults import _start, healed


def single_broker_fault(b: Any) -> Callable[[], str]:
    """SIGKILL the broker (a subprocess ``TestBroker``) and start it again on its port and data."""

    def fault() -> str:
        b.kill()
        b.start()
        return "broker"

    return fault


def cluster_fault(c: Any, topic: str, partitions: int, rng: random.Random, down_s: float = 1.0) -> Callable[[], str]:
    """SIGKILL the leader of a random partition of ``topic`` of the cluster ``c`` (a ``TestCluster``), start it
    again after ``down_s`` and wait until every partition of ``topic`` is led with its full ISR."""

    def fault() -> str:
        leader = c.leader(topic, rng.randrange(partitions))
        victim = leader if leader >= 0 else rng.choice(c.brokers)
        c.kill(victim)
        time.sleep(down_s)
        _start(c, victim)
        c.wait_for(lambda: healed(c, topic, partitions), 60.0, "healing")
        return f"broker {victim}"

    return fault


def offsets_failover_fault(
    c: Any, group: str, topics: Sequence[tuple[str, int]], pause_s: float = 1.0
) -> Callable[..., str]:
    """SIGSTOP the followers of the group's partition of ``__consumer_offsets`` (they stay in its ISR), SIGKILL
    its leader ``pause_s`` later, SIGCONT the followers; once one of them leads the partition, start the old
    leader again and wait until ``__consumer_offsets``, ``__transaction_state`` and ``topics`` ((name,
    partitions)) are led with full ISRs. An offset commit the coordinator acknowledged meanwhile (a
    TxnOffsetCommit among them) was on no follower: the new leader must have it anyway, or the run writes some
    output twice. (Every write replicated to the paused brokers waits meanwhile: a TxnOffsetCommit gets through
    when the transaction's coordinator is the same broker and the group's partition is in the transaction
    already, see ``colocated_transactional_id``.) ``first`` runs before the pause (the checker waits for the
    application to be between its writes and its last TxnOffsetCommit), ``then`` once the leader is killed and
    the followers go on (the checker kills the application after its next commit)."""

    def fault(first: Callable[[], None] | None = None, then: Callable[[], None] | None = None) -> str:
        offsets_partitions = partition_count(c, "__consumer_offsets")
        p = partition_for(group, offsets_partitions)
        leader = c.leader("__consumer_offsets", p)
        if leader < 0:
            return "nothing: the group's offsets partition has no leader"
        followers = [b for b in c.isr("__consumer_offsets", p) if b != leader]
        if first is not None:
            first()
        for f in followers:
            c.pause(f)
        try:
            time.sleep(pause_s)
            c.kill(leader)
        finally:
            for f in followers:
                c.resume(f)
        if then is not None:
            then()
        c.wait_for(lambda: c.leader("__consumer_offsets", p) not in (-1, leader), 60.0, "a new offsets leader")
        _start(c, leader)
        internal = [(t, partition_count(c, t)) for t in ("__consumer_offsets", "__transaction_state")]
        for topic, partitions in [*internal, *topics]:
            c.wait_for(lambda t=topic, n=partitions: healed(c, t, n), 90.0, f"healing of {topic}")
        return f"broker {leader} (leader of __consumer_offsets-{p}; followers {followers} paused {pause_s:g} s)"

    return fault


def colocated_transactional_id(c: Any, group: str, prefix: str = "txn-app-") -> str:
    """A transactional id whose coordinator (the leader of its ``__transaction_state`` partition) is the
    coordinator of ``group`` now, both internal topics created first (so the first ``offsets_failover_fault``
    pauses no broker the transaction's coordinator needs to answer)."""
    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": group})
    try:
        c.wait_for(lambda: _asks_coordinator(consumer), 60.0, "__consumer_offsets")
    finally:
        consumer.close()
    probe = ck.Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": f"{prefix}probe"})
    probe.init_transactions(60)  # creates __transaction_state
    del probe
    offsets, txn = partition_count(c, "__consumer_offsets"), partition_count(c, "__transaction_state")
    p = partition_for(group, offsets)
    c.wait_for(lambda: c.leader("__consumer_offsets", p) >= 0, 60.0, "a leader of the group's partition")
    leader = c.leader("__consumer_offsets", p)
    led = {q for q in range(txn) if c.leader("__transaction_state", q) == leader}
    return next((f"{prefix}{i}" for i in range(10_000) if partition_for(f"{prefix}{i}", txn) in led), f"{prefix}1")


def _asks_coordinator(consumer: Any) -> bool:
    """FindCoordinator for the consumer's group (it creates ``__consumer_offsets``); True once answered."""
    import confluent_kafka as ck

    try:
        consumer.committed([ck.TopicPartition("__consumer_offsets", 0)], timeout=5)
        return True
    except ck.KafkaException:
        return False


def partition_count(c: Any, topic: str) -> int:
    data = c._zk_get(f"/brokers/topics/{topic}")
    return 0 if data is None else len(json.loads(data)["partitions"])
