"""Every replica holds the same records: after a leader is killed under load and comes back, each broker in turn
is made the only one up (the other two stop in a controlled way) and the topic is read back from it alone. And a
consumer group keeps its committed offsets while its coordinator stops in a controlled way."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from tests.cluster._helpers import create_topic, read_all
from tests.cluster.test_failover import PARTITIONS, LoadProducer, _wait_full_isr

from rill.testing.cluster import TestCluster

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(180)
def test_each_replica_holds_every_acked_record_after_a_leader_was_killed(rill3: TestCluster) -> None:
    create_topic(rill3, "rp-kill", partitions=PARTITIONS)
    _wait_full_isr(rill3, ["rp-kill"])
    load = LoadProducer(rill3.bootstrap_servers, "rp-kill").start()
    try:
        time.sleep(1.0)
        victim = rill3.leader("rp-kill", 0)
        rill3.kill(victim)
        rill3.wait_for(lambda: rill3.leader("rp-kill", 0) not in (victim, -1), 20, "a new leader")
        time.sleep(1.0)
        rill3.start(victim)
        _wait_full_isr(rill3, ["rp-kill"])
        time.sleep(0.5)
    finally:
        load.stop()
    assert load.errors == []
    acked = {p: [seq for seq, _s, _a in recs] for p, recs in load.acked.items()}
    _wait_full_isr(rill3, ["rp-kill"])
    for only in rill3.brokers:
        others = [b for b in rill3.brokers if b != only]
        for b in others:
            rill3.stop(b)
        try:
            rill3.wait_for(lambda b=only: all(rill3.leader("rp-kill", p) == b for p in range(PARTITIONS)), 20,
                           f"broker {only} leading every partition")  # fmt: skip
            got = read_all(rill3, "rp-kill", PARTITIONS, load.acked_count(), timeout=30)
            for p in range(PARTITIONS):
                read = [int(v) for _k, v in got[p]]
                assert len(read) == len(set(read)), f"broker {only}, partition {p}: duplicates"
                assert read == sorted(read), f"broker {only}, partition {p}: out of order"
                lost = set(acked.get(p, [])) - set(read)
                assert not lost, f"broker {only}, partition {p}: {len(lost)} acked records missing"
        finally:
            for b in others:
                rill3.start(b)
        _wait_full_isr(rill3, ["rp-kill"])


def _commit(consumer: Consumer) -> None:
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as e:
        if e.args[0].code() != KafkaError._NO_OFFSET:  # nothing new to commit
            raise


@pytest.mark.timeout(120)
def test_group_offsets_survive_a_controlled_shutdown_of_the_coordinator(rill3: TestCluster) -> None:
    create_topic(rill3, "rp-group", partitions=PARTITIONS)
    load = LoadProducer(rill3.bootstrap_servers, "rp-group", rate=2000)
    load.start()
    time.sleep(1.0)
    load.stop()
    total = load.acked_count()
    conf = {"bootstrap.servers": rill3.bootstrap_servers, "group.id": "rp-group-1", "auto.offset.reset": "earliest",
            "enable.auto.commit": False}  # fmt: skip
    seen: list[int] = []
    consumer = Consumer(conf)
    consumer.subscribe(["rp-group"])
    stopped: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < total and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            seen.append(int(msg.value()))
            if len(seen) % 100 == 0:
                _commit(consumer)
            if len(seen) == total // 3 and not stopped:
                # the group's coordinator: the leader of its __consumer_offsets partition
                coordinator = {rill3.leader("__consumer_offsets", p) for p in range(5)}
                victim = min(coordinator)
                _commit(consumer)
                rill3.stop(victim)
                stopped.append(victim)
        _commit(consumer)
    finally:
        consumer.close()
        for b in stopped:
            rill3.start(b)
    assert sorted(set(seen)) == list(range(total))
    second = Consumer(conf)
    second.subscribe(["rp-group"])
    extra = second.poll(5.0)
    second.close()
    assert extra is None or extra.error() is not None, "the restarted consumer read again what was committed"
