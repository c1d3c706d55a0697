"""confluent-kafka consumers with ``group.protocol=consumer`` (KIP-848) against one broker: members join and
leave while records are produced, one is SIGKILLed; every record is read, no partition is owned by two members
at once, and committed offsets never go back."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.groups._consumers import ConsumerThread, Ownership

CONFIGS = {
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "4000",
    "group.consumer.min.session.timeout.ms": "1000",
}


def _wait(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([confluent_kafka.TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


@pytest.mark.slow
@pytest.mark.parametrize("assignor", ["uniform", "range"])
@pytest.mark.rill_broker_config(**CONFIGS)
def test_members_join_leave_and_die_under_load(rill_broker, assignor: str) -> None:
    bootstrap, group, topic, partitions = rill_broker.bootstrap_servers, f"kip848-{assignor}", f"load-{assignor}", 6
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    ownership = Ownership()
    produced: list[bytes] = []

    def produce(n: int) -> None:
        for _ in range(n):
            value = f"r{len(produced)}".encode()
            produced.append(value)
            producer.produce(topic, value, partition=len(produced) % partitions)
        producer.flush(30)

    conf = {"group.remote.assignor": assignor}
    members = [ConsumerThread("a", bootstrap, group, topic, ownership, **conf)]
    members[0].start()
    produce(500)
    _wait(lambda: len(ownership.seen) >= 100, 60, "the first member to read")

    # A member to be SIGKILLed: its partitions go to the others after its session times out.
    script = textwrap.dedent(f"""
        import confluent_kafka, sys
        c = confluent_kafka.Consumer({{"bootstrap.servers": {bootstrap!r}, "group.id": {group!r},
            "group.protocol": "consumer", "group.remote.assignor": {assignor!r}, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}})
        c.subscribe([{topic!r}], on_assign=lambda c, ps: (print("assigned", len(ps), flush=True)))
        while True:
            c.poll(0.2)
    """)
    victim = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        for name in ("b", "c"):
            member = ConsumerThread(name, bootstrap, group, topic, ownership, **conf)
            member.start()
            members.append(member)
            produce(500)
        assert victim.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in victim.stdout], daemon=True).start()  # type: ignore[union-attr]
        while True:  # until it holds a partition, so that its death moves one
            line = lines.get(timeout=60)
            if line.startswith("assigned") and int(line.split()[1]) > 0:
                break
        os.kill(victim.pid, signal.SIGKILL)
    finally:
        if victim.poll() is None:
            victim.kill()
        victim.wait(30)
    produce(500)
    members.pop(0).stop()  # a clean leave
    produce(500)
    _wait(lambda: ownership.seen >= set(produced), 120, "every record to be read")
    before = _committed(bootstrap, group, topic, partitions)
    produce(300)
    _wait(lambda: ownership.seen >= set(produced), 120, "the last records to be read")
    for member in members:
        member.stop()
    after = _committed(bootstrap, group, topic, partitions)
    assert not ownership.overlaps(), ownership.overlaps()
    assert all(after[p] >= before[p] for p in before), (before, after)
    assert sum(after.values()) == len(produced)
