"""A replica that led an epoch the new leader never saw truncates to where their logs agree.

The scenario (Kafka's KIP-279 case): replicas [X, A, C] of one partition. With A paused, X writes records that
C fetches and A does not; C is paused, A resumes, X stops, so A leads epoch 1 from a shorter log and writes records
of its own at the offsets where C holds X's; A dies before C fetches from it; C leads epoch 2. When A comes back
and follows C, the leader has no epoch 1: it answers OffsetForLeaderEpoch(1) with its epoch 0 and the start of
its epoch 2. A must cut its log where its own epoch 0 ends, not at C's end of epoch 0, or it keeps its epoch-1
records at offsets that hold other records on the leader: the replicas diverge, and a consumer reads different
values at one offset once A leads.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from rill.testing.cluster import TestCluster, cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TOPIC = "diverge"


def _produce(bootstrap: str, values: list[str]) -> None:
    """One batch per value: a replica fetching from the middle of them gets whole records, not a batch that
    starts below its log end."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "message.timeout.ms": 20_000})
    failed: list[str] = []
    for value in values:
        producer.produce(TOPIC, value.encode(), partition=0,
                         on_delivery=lambda err, _msg: failed.append(str(err)) if err else None)  # fmt: skip
        assert producer.flush(30) == 0
    assert not failed, failed


def _read(bootstrap: str) -> list[tuple[int, str]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "diverge", "enable.auto.commit": False})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)[1]
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        out: list[tuple[int, str]] = []
        deadline = time.monotonic() + 30
        while (not out or out[-1][0] + 1 < end) and time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.5):
                if msg.error() is None:
                    out.append((msg.offset(), msg.value().decode()))
        return out
    finally:
        consumer.close()


def _log_size(c: TestCluster, broker: int) -> int:
    """The size of the partition's (only) segment on ``broker``: a follower's copy is byte for byte the leader's."""
    path = Path(c.broker(broker).data_dir, "logs", f"{TOPIC}-0", f"{0:020d}.log")
    return path.stat().st_size if path.exists() else -1


def _leader_is(c: TestCluster, broker: int, epoch: int) -> None:
    def leads() -> bool:
        data = c._zk_get(f"/brokers/topics/{TOPIC}/partitions/0/state")
        return data is not None and (json.loads(data)["leader"], json.loads(data)["leader_epoch"]) == (broker, epoch)

    c.wait_for(leads, 30, f"broker {broker} leading at epoch {epoch}")
    time.sleep(1.0)  # the broker applies the new state from its watch


def test_a_replica_that_led_an_epoch_unknown_to_the_leader_does_not_diverge() -> None:
    configs = {"zookeeper.session.timeout.ms": "10000", "replica.lag.time.max.ms": "60000"}
    with cluster(3, configs) as c:
        x = c.controller()  # the only broker not paused when leadership moves to A
        a, follower_c = [b for b in c.brokers if b != x]
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[x, a, follower_c]])])[TOPIC].result(30)
        c.wait_for(lambda: sorted(c.isr(TOPIC, 0)) == c.brokers, 30, "a full ISR")
        bx, ba, bc = (c.broker(b).bootstrap_servers for b in (x, a, follower_c))
        _produce(bx, [f"x-{i}" for i in range(5)])
        c.wait_for(lambda: len(_read(bx)) == 5, 30, "the first records replicated")  # everyone has them

        c.pause(a)
        time.sleep(1.0)  # A's fetch in flight is answered (empty) before the next records come
        _produce(bx, [f"x-{i}" for i in range(5, 15)])  # C fetches these, A does not
        c.wait_for(lambda: _log_size(c, follower_c) == _log_size(c, x), 30, "C holding all of X's records")
        c.pause(follower_c)
        c.stop(x)  # controlled: A, first live replica of the ISR, leads epoch 1 from offset 5
        c.resume(a)
        _leader_is(c, a, 1)
        _produce(ba, [f"a-{i}" for i in range(3)])  # offsets 5..7 on A, at epoch 1
        c.kill(a)
        c.resume(follower_c)  # C leads epoch 2 once A's session ends, from offset 15
        _leader_is(c, follower_c, 2)

        c.start(a)  # A follows C, asks where its epoch 1 ends
        c.wait_for(lambda: a in c.isr(TOPIC, 0), 60, "A back in the ISR")
        on_c = _read(bc)
        c.stop(follower_c)  # A leads
        _leader_is(c, a, 3)
        on_a = _read(ba)
        assert [v for _, v in on_c] == [f"x-{i}" for i in range(15)]
        assert on_a == on_c
