"""A source partition moving between the processes of one mirror: the process that takes it over translates
consumer group offsets with the offset syncs its previous owner wrote, not with those it read at its own
start, so a group carried to the target never skips a record."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from rill.mirror import MirrorConfig, MirrorMaker, MirrorStats
from rill.testing import TestBroker, broker

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def clusters() -> Iterator[tuple[TestBroker, TestBroker]]:
    with broker({}) as source, broker({}) as target:
        yield source, target


class _Process:
    """One process of the mirror, in a thread; ``looping`` is set once it copies (its syncs read)."""

    def __init__(self, config: MirrorConfig) -> None:
        self.mirror = MirrorMaker(config)
        self.stop = threading.Event()
        self.looping = threading.Event()
        self.thread = threading.Thread(target=self.mirror.run, args=(self.stop, self._status), daemon=True)
        self.thread.start()

    def _status(self, _stats: MirrorStats) -> None:
        self.looping.set()

    def end(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for v in values:
        producer.produce(topic, v, partition=0)
    assert producer.flush(30) == 0


# With a prefix, the syncs name the target topic ("dc1.events") and the partitions copied are known by their
# source topic ("events"): the syncs read back must be filed under the source topic to be found.
@pytest.mark.parametrize("prefix", ["", "dc1."])
def test_group_offsets_translated_after_a_takeover_use_the_previous_owners_syncs(
    clusters: tuple[TestBroker, TestBroker], prefix: str
) -> None:
    source, target = clusters
    src, dst = source.bootstrap_servers, target.bootstrap_servers
    config = MirrorConfig(src, dst, "events", name="pair", prefix=prefix, refresh_interval_s=0.5,
                          commit_interval_s=0.3, group_sync_interval_s=0.3)  # fmt: skip
    # Both processes start (and read the offset syncs, none yet) before the topic exists.
    first, second = _Process(config), _Process(config)
    try:
        for process in (first, second):
            assert process.looping.wait(60), "a mirror process did not start"
        source_admin = AdminClient({"bootstrap.servers": src})
        source_admin.create_topics([NewTopic("events", 1)])["events"].result(15)
        _produce(src, "events", [b"e%03d" % i for i in range(100)])
        # A group has read half of it on the source.
        group = Consumer({"bootstrap.servers": src, "group.id": "app", "enable.auto.commit": False})
        group.commit(offsets=[TopicPartition("events", 0, 50)], asynchronous=False)
        group.close()
        _wait(lambda: first.mirror.stats.records + second.mirror.stats.records >= 100, 60, "the records copied")
        owner, other = (first, second) if first.mirror.stats.assigned else (second, first)
        # The owner stops (its position committed); the other takes the partition over and copies more.
        owner.end()
        _wait(lambda: other.mirror.stats.assigned == 1, 60, "the partition taken over")
        _produce(src, "events", [b"e%03d" % i for i in range(100, 110)])
        _wait(lambda: other.mirror.stats.records >= 10, 60, "the new records copied by the new owner")
    finally:
        for process in (first, second):
            process.end()  # a process carries the groups' offsets over once more as it stops

    admin = AdminClient({"bootstrap.servers": dst})
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("app")])["app"].result(15)
    assert [(tp.topic, tp.partition, tp.offset) for tp in offsets.topic_partitions] == [(f"{prefix}events", 0, 50)]
    resumed = Consumer({"bootstrap.servers": dst, "group.id": "app", "enable.auto.commit": False})
    resumed.subscribe([f"{prefix}events"])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 60 and time.monotonic() < deadline:
        values += [m.value() for m in resumed.consume(100, 0.5) if not m.error()]
    resumed.close()
    assert values == [b"e%03d" % i for i in range(50, 110)]
