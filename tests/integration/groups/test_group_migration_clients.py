"""Online migration with real clients: a group of three confluent-kafka consumers of the classic protocol reads
a topic while records are produced; its members restart one by one with ``group.protocol=consumer`` (the group
becomes a consumer group at the first, its classic members served inside it), then one by one with the classic
protocol again (it becomes a classic group when the last consumer-protocol member leaves). Every record is read,
no partition is owned by two members at once, and the committed offsets never go back."""

from __future__ import annotations

import threading
import time
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.broker._wire import Wire
from tests.integration.groups._consumers import ConsumerThread, Ownership

from rill.protocol import ApiKey

CONFIGS = {
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "4000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
}
PARTITIONS = 6


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


class Producing(threading.Thread):
    """Records produced without pause until stopped; each value unique."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic = topic
        self.produced: list[bytes] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            for _ in range(20):
                value = f"r{len(self.produced)}".encode()
                self.produced.append(value)
                self.producer.produce(self.topic, value, partition=len(self.produced) % PARTITIONS)
            self.producer.poll(0)
            time.sleep(0.02)
        self.producer.flush(30)

    def stop(self) -> list[bytes]:
        self.stop_event.set()
        self.join(60)
        return self.produced


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
@pytest.mark.rill_broker_config(**CONFIGS)
def test_a_group_migrates_to_the_consumer_protocol_and_back_under_load(rill_broker, strategy: str) -> None:
    bootstrap, group, topic = rill_broker.bootstrap_servers, f"migrate-{strategy}", f"migrate-{strategy}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    ownership = Ownership()
    wire = Wire(bootstrap, timeout=30)
    committed: dict[int, int] = {}

    def group_type() -> str | None:
        groups = wire.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})["groups"]
        return next((g["group_type"] for g in groups if g["group_id"] == group), None)

    def check_committed() -> None:
        """The group's committed offsets, each no lower than the last time."""
        c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            tps = c.committed([confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        finally:
            c.close()
        for tp in tps:
            assert tp.offset >= committed.get(tp.partition, -1001), (tp, committed)
            committed[tp.partition] = tp.offset

    def member(name: str, protocol: str) -> ConsumerThread:
        conf: dict[str, Any] = {"group.protocol": protocol}
        if protocol == "classic":
            conf.update({"partition.assignment.strategy": strategy, "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 300})  # fmt: skip
        thread = ConsumerThread(name, bootstrap, group, topic, ownership, **conf)
        thread.start()
        return thread

    def settled(name: str) -> bool:
        """Every partition owned by someone, and ``name`` owns at least one."""
        with ownership.lock:
            open_spans = [s for s in ownership.spans if s[3] is None]
        return len({s[0] for s in open_spans}) == PARTITIONS and any(s[1] == name for s in open_spans)

    producing = Producing(bootstrap, topic)
    producing.start()
    members = [member(f"classic-{i}", "classic") for i in range(3)]
    try:
        _wait(lambda: all(settled(m.name) for m in members), 120, "the classic group to share the partitions")
        assert group_type() == "classic"
        check_committed()
        # Upgrade: each member restarts with the consumer protocol.
        for i in range(3):
            members[i].stop()
            members[i] = member(f"consumer-{i}", "consumer")
            _wait(lambda m=members[i]: settled(m.name), 120, f"{members[i].name} to get partitions")
            assert group_type() == "consumer"
            check_committed()
        # Downgrade: each restarts with the classic protocol; the last consumer-protocol member leaving makes the
        # group classic again.
        for i in range(3):
            members[i].stop()
            members[i] = member(f"classic-again-{i}", "classic")
            _wait(lambda m=members[i]: settled(m.name), 120, f"{members[i].name} to get partitions")
            check_committed()
        assert group_type() == "classic"
        produced = producing.stop()
        _wait(lambda: ownership.seen >= set(produced), 120, "every record to be read")
        for m in members:
            m.stop()
        check_committed()
    finally:
        producing.stop_event.set()
        for m in members:
            m.stop_event.set()
        wire.close()
    assert not ownership.overlaps(), ownership.overlaps()
    assert sum(committed.values()) == len(produced)


@pytest.mark.rill_broker_config(**CONFIGS, **{"group.consumer.migration.policy": "disabled"})
def test_a_consumer_protocol_member_is_refused_when_migration_is_disabled(rill_broker) -> None:
    bootstrap, group, topic = rill_broker.bootstrap_servers, "no-migration", "no-migration"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    ownership = Ownership()
    classic_conf: dict[str, Any] = {"group.protocol": "classic", "session.timeout.ms": 6000,
                                    "heartbeat.interval.ms": 300}  # fmt: skip
    members = [ConsumerThread(f"classic-{i}", bootstrap, group, topic, ownership, **classic_conf) for i in range(2)]
    for m in members:
        m.start()
    errors: list[confluent_kafka.KafkaError] = []
    refused = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                                        "error_cb": errors.append})  # fmt: skip
    # librdkafka hands the fatal error to poll() as an error event (and may to error_cb as well)
    try:
        _wait(lambda: len({s[0] for s in ownership.spans if s[3] is None}) == PARTITIONS, 60, "the classic group")
        refused.subscribe([topic])
        deadline = time.monotonic() + 60
        def fatal(e: confluent_kafka.KafkaError) -> bool:
            return bool(e.fatal() or e.code() == confluent_kafka.KafkaError._FATAL)

        while not any(fatal(e) for e in errors):
            assert time.monotonic() < deadline, f"the consumer-protocol member was not refused: {errors}"
            msg = refused.poll(0.2)
            if msg is not None and msg.error() is not None:
                errors.append(msg.error())
        # As Kafka answers: GROUP_ID_NOT_FOUND, fatal for the consumer; the classic group carries on untouched.
        assert any("group id does not exist" in e.str().lower() for e in errors if fatal(e)), errors
        assert not refused.assignment()
        wire = Wire(bootstrap, timeout=30)
        try:
            groups = wire.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})["groups"]
            assert [(g["group_id"], g["group_type"]) for g in groups] == [(group, "classic")]
        finally:
            wire.close()
        with ownership.lock:
            open_spans = [s for s in ownership.spans if s[3] is None]
        assert len({s[0] for s in open_spans}) == PARTITIONS
        assert {s[1] for s in open_spans} <= {"classic-0", "classic-1"}
    finally:
        refused.close()
        for m in members:
            m.stop()
    assert not ownership.overlaps()
