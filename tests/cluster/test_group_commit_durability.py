"""An acknowledged offset commit survives the failover of its ``__consumer_offsets`` partition.

The followers of the group's partition are SIGSTOPped (still in the ISR: ``replica.lag.time.max.ms`` is long),
a client commits, the leader is SIGKILLed and a follower is elected. A commit the coordinator acknowledged must
be there afterwards: the coordinator answers only once the record is replicated to the ISR, as Kafka writes
``__consumer_offsets`` with acks=all. Both with a consumer's OffsetCommit and with a transactional producer's
``send_offsets_to_transaction`` then ``commit_transaction`` (where a lost TxnOffsetCommit leaves the output
committed but not the input offsets: the next run would write the output again)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from tests.cluster._helpers import admin, create_topic

from rill.coordinator.group.group_metadata_manager import partition_for
from rill.testing.cluster import TestCluster, cluster
from rill.testing.faults import _start

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

OFFSETS_PARTITIONS = 3
TXN_PARTITIONS = 3
KILL_AFTER_S = 1.0  # how long the commit may take while the followers are paused, before the leader is killed


@pytest.fixture(scope="module")
def gd3() -> Iterator[TestCluster]:
    with cluster(brokers=3, min_insync_replicas=2, num_partitions=1, **{
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
        # paused followers stay in the ISR for the whole test: the leader's acks=all wait covers the pause
        "replica.lag.time.max.ms": "60000",
        # the transactional test keeps its coordinator and its topics off the paused brokers (see below)
        "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
    }) as c:  # fmt: skip
        yield c


def _wait_healthy(c: TestCluster, topic: str, partition: int, brokers: int = 3) -> None:
    c.wait_for(lambda: c.leader(topic, partition) >= 0 and len(c.isr(topic, partition)) == brokers, 60,
               f"{topic}-{partition} led with {brokers} replicas in sync")  # fmt: skip


def _in_background(fn: Callable[[], Any]) -> tuple[threading.Thread, threading.Event, dict[str, Any]]:
    done = threading.Event()
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except Exception as e:  # what the client said, checked by the test
            out["error"] = e
        finally:
            done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done, out


def _committed(c: TestCluster, group: str, tp: TopicPartition, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": group, "enable.auto.commit": False})
        try:
            return int(consumer.committed([tp], timeout=10)[0].offset)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
        finally:
            consumer.close()
        time.sleep(0.5)


def _fail_over(c: TestCluster, leader: int, followers: list[int], partition: int) -> None:
    """Kill the leader of ``__consumer_offsets`` ``partition``, let its paused followers go on, wait for one of
    them to lead, and start the old leader again."""
    c.kill(leader)
    for f in followers:
        c.resume(f)
    c.wait_for(lambda: c.leader("__consumer_offsets", partition) in followers, 60, "a follower elected")
    _start(c, leader)
    _wait_healthy(c, "__consumer_offsets", partition)


def test_an_acknowledged_offset_commit_survives_the_failover(gd3: TestCluster) -> None:
    create_topic(gd3, "gd-plain", 1, 3)
    group = "gd-plain-group"
    p = partition_for(group, OFFSETS_PARTITIONS)
    tp = TopicPartition("gd-plain", 0, 1)
    consumer = Consumer({"bootstrap.servers": gd3.bootstrap_servers, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[tp], asynchronous=False)  # the offsets topic exists, the coordinator is known
        _wait_healthy(gd3, "__consumer_offsets", p)
        leader = gd3.leader("__consumer_offsets", p)
        followers = [b for b in gd3.brokers if b != leader]
        for f in followers:
            gd3.pause(f)
        try:
            thread, done, out = _in_background(
                lambda: consumer.commit(offsets=[TopicPartition("gd-plain", 0, 42)], asynchronous=False)
            )
            answered_while_paused = done.wait(KILL_AFTER_S)
        except BaseException:
            for f in followers:
                gd3.resume(f)
            raise
        _fail_over(gd3, leader, followers, p)
        thread.join(90)
        assert not thread.is_alive()
    finally:
        consumer.close()
    committed = _committed(gd3, group, TopicPartition("gd-plain", 0))
    acknowledged = "error" not in out
    # Not acknowledged while no follower had the record; and what was acknowledged is there after the failover.
    assert not (answered_while_paused and acknowledged), (out, committed)
    if acknowledged:
        assert committed == 42, out
    else:
        assert committed in (1, 42), out


def _txn_id_led_by(c: TestCluster, broker: int) -> str:
    """A transactional id whose ``__transaction_state`` partition (one replica) ``broker`` leads."""
    probe = Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": "gd-probe"})
    probe.init_transactions(60)  # creates __transaction_state
    del probe
    c.wait_for(lambda: all(c.leader("__transaction_state", q) >= 0 for q in range(TXN_PARTITIONS)), 30,
               "__transaction_state led")  # fmt: skip
    wanted = {q for q in range(TXN_PARTITIONS) if c.leader("__transaction_state", q) == broker}
    assert wanted, "every broker leads a partition of __transaction_state"
    return next(f"gd-txn-{i}" for i in range(1000) if partition_for(f"gd-txn-{i}", TXN_PARTITIONS) in wanted)


def test_an_acknowledged_transactional_offset_commit_survives_the_failover(gd3: TestCluster) -> None:
    """The input offsets of a consume-transform-produce transaction are committed with its output, or neither.

    Pausing two of three brokers would stop every write replicated to them; so the transaction's coordinator
    (``__transaction_state`` with one replica) and its topics (one replica) live on the leader of the group's
    ``__consumer_offsets`` partition, which is started again after the failover."""
    group = "gd-txn-group"
    p = partition_for(group, OFFSETS_PARTITIONS)
    tp_in = TopicPartition("gd-tin", 0)
    consumer = Consumer({"bootstrap.servers": gd3.bootstrap_servers, "group.id": group, "enable.auto.commit": False})
    try:
        # a first commit: __consumer_offsets exists and the group's coordinator is known
        create_topic(gd3, "gd-seed", 1, 3)
        consumer.commit(offsets=[TopicPartition("gd-seed", 0, 0)], asynchronous=False)
        _wait_healthy(gd3, "__consumer_offsets", p)
        leader = gd3.leader("__consumer_offsets", p)
        followers = [b for b in gd3.brokers if b != leader]
        client = admin(gd3)  # kept referenced until the futures are done
        alone = {"min.insync.replicas": "1"}
        futures = client.create_topics(
            [NewTopic(t, 1, replica_assignment=[[leader]], config=alone) for t in ("gd-tin", "gd-tout")]
        )
        for f in futures.values():
            f.result(40)
        txn_id = _txn_id_led_by(gd3, leader)
        producer = Producer({"bootstrap.servers": gd3.bootstrap_servers, "transactional.id": txn_id,
                             "transaction.timeout.ms": 120000})  # fmt: skip
        producer.init_transactions(60)
        producer.begin_transaction()
        for i in range(10):
            producer.produce("gd-tout", f"out-{i}".encode(), partition=0)
        assert producer.flush(30) == 0
        for f in followers:
            gd3.pause(f)
        try:
            offsets = [TopicPartition("gd-tin", 0, 10)]
            metadata = consumer.consumer_group_metadata()
            thread, done, out = _in_background(
                lambda: producer.send_offsets_to_transaction(offsets, metadata, 120)
            )
            answered_while_paused = done.wait(KILL_AFTER_S)
        except BaseException:
            for f in followers:
                gd3.resume(f)
            raise
        _fail_over(gd3, leader, followers, p)
        thread.join(150)
        assert not thread.is_alive()
        acknowledged = "error" not in out
        if acknowledged:
            producer.commit_transaction(90)
        else:
            producer.abort_transaction(90)
    finally:
        consumer.close()
    reader = Consumer({"bootstrap.servers": gd3.bootstrap_servers, "group.id": "gd-reader",
                       "isolation.level": "read_committed", "enable.auto.commit": False,
                       "enable.partition.eof": True})  # fmt: skip
    outputs = 0
    try:
        reader.assign([TopicPartition("gd-tout", 0, 0)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = reader.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == -191:  # _PARTITION_EOF: read to the last stable offset
                    break
                continue
            outputs += 1
    finally:
        reader.close()
    committed = _committed(gd3, group, tp_in)
    assert not (answered_while_paused and acknowledged), (out, outputs, committed)
    # Exactly once: the output and the input offsets together, or neither.
    assert (outputs, committed) in ((10, 10), (0, -1001)), (out, outputs, committed)
    assert acknowledged == (outputs == 10), out
