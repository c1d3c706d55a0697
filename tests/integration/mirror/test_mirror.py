"""``rill mirror`` between two brokers on this machine: topics (configs, partitions, records in order, keys,
headers, timestamps), topics and partitions added while it runs, consumer group offsets translated so a group
resumes on the target without missing records; and the command killed (SIGKILL) and started again while a
producer writes: every source record reaches the target at least once, in order per partition."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from rill.mirror import MirrorConfig, MirrorMaker
from rill.testing import TestBroker, broker

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def clusters() -> Iterator[tuple[TestBroker, TestBroker]]:
    with broker({}) as source, broker({}) as target:
        yield source, target


def _create(bootstrap: str, *topics: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(list(topics)).values():
        future.result(15)


def _produce(bootstrap: str, topic: str, values: list[bytes], **extra: Any) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for v in values:
        producer.produce(topic, v, **extra)
    assert producer.flush(30) == 0


def _read_all(bootstrap: str, topic: str, group: str | None = None, idle_s: float = 3.0) -> dict[int, list[Any]]:
    """Every record of ``topic`` per partition (value, key, headers, timestamp); with a group, from its
    committed offsets."""
    conf = {"bootstrap.servers": bootstrap, "group.id": group or "reader", "enable.auto.commit": False,
            "auto.offset.reset": "earliest"}  # fmt: skip
    consumer = Consumer(conf)
    if group is None:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    else:
        consumer.subscribe([topic])
    got: dict[int, list[Any]] = {}
    last = time.monotonic()
    try:
        while time.monotonic() - last < idle_s:
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    continue
                last = time.monotonic()
                got.setdefault(msg.partition(), []).append((msg.value(), msg.key(), msg.headers(), msg.timestamp()[1]))
    finally:
        consumer.close()
    return got


def _run_mirror(config: MirrorConfig) -> tuple[MirrorMaker, threading.Event, threading.Thread]:
    mirror = MirrorMaker(config)
    stop = threading.Event()
    thread = threading.Thread(target=mirror.run, args=(stop,), daemon=True)
    thread.start()
    return mirror, stop, thread


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_mirror_copies_topics_configs_records_and_group_offsets(clusters: tuple[TestBroker, TestBroker]) -> None:
    source, target = clusters
    src, dst = source.bootstrap_servers, target.bootstrap_servers
    _create(src, NewTopic("orders", 3, config={"retention.ms": "86400000", "max.message.bytes": "200000"}),
            NewTopic("payments", 2), NewTopic("private", 1))  # fmt: skip
    stamp = 1_700_000_000_000
    _produce(src, "orders", [b"o%d" % i for i in range(600)], key=b"k", headers=[("h", b"1")], timestamp=stamp)
    for p in range(3):
        _produce(src, "orders", [b"p%d-%d" % (p, i) for i in range(100)], partition=p)
    _produce(src, "payments", [b"pay%d" % i for i in range(50)])
    _produce(src, "private", [b"secret"])
    # A group that has read part of orders on the source (up to offset 80 of each partition).
    consumer = Consumer({"bootstrap.servers": src, "group.id": "billing", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("orders", p, 80) for p in range(3)], asynchronous=False)
    consumer.close()

    config = MirrorConfig(src, dst, "orders|payments|later", refresh_interval_s=1.0, group_sync_interval_s=0.5)
    mirror, stop, thread = _run_mirror(config)
    try:
        _wait(lambda: mirror.stats.records >= 950, 60, "the existing records copied")
        # A matching topic created, and a partition added, while the mirror runs.
        _create(src, NewTopic("later", 1))
        _produce(src, "later", [b"l%d" % i for i in range(10)])
        source_admin = AdminClient({"bootstrap.servers": src})
        source_admin.create_partitions([NewPartitions("payments", 3)])["payments"].result(15)
        _produce(src, "payments", [b"new%d" % i for i in range(10)], partition=2)
        _wait(lambda: mirror.stats.records >= 970, 60, "the new topic and partition copied")
        _wait(lambda: mirror.stats.group_offsets_written >= 3, 30, "the group's offsets carried over")
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()

    admin = AdminClient({"bootstrap.servers": dst})
    topics = admin.list_topics(timeout=10).topics
    assert "private" not in topics and "later" in topics
    assert len(topics["orders"].partitions) == 3 and len(topics["payments"].partitions) == 3
    configs = admin.describe_configs([ConfigResource("topic", "orders")])
    entries = next(iter(configs.values())).result(10)
    assert entries["retention.ms"].value == "86400000" and entries["max.message.bytes"].value == "200000"
    # Records: the same per partition, in order, with keys, headers and timestamps.
    for topic in ("orders", "payments", "later"):
        assert _read_all(dst, topic) == _read_all(src, topic), topic
    # The group moves to the target: it reads from where it was (offset 80 of each partition), nothing missed.
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("billing")])["billing"].result(10)
    assert sorted((tp.topic, tp.partition, tp.offset) for tp in offsets.topic_partitions) == [
        ("orders", p, 80) for p in range(3)
    ]
    resumed = _read_all(dst, "orders", group="billing")
    full = _read_all(src, "orders")
    assert resumed == {p: full[p][80:] for p in full if full[p][80:]}


def _source_values(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    return {p: [r[0] for r in records] for p, records in _read_all(bootstrap, topic).items()}


class _Writer:
    """Writes unique values (``<prefix><n>``) to ``topic`` in a thread until stopped."""

    def __init__(self, bootstrap: str, topic: str, prefix: bytes) -> None:
        self.written = 0
        self._stop = threading.Event()
        self._args = (bootstrap, topic, prefix)
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        bootstrap, topic, prefix = self._args
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "enable.idempotence": True})
        while not self._stop.is_set():
            for _ in range(50):
                producer.produce(topic, prefix + b"%07d" % self.written, key=b"%d" % (self.written % 16))
                self.written += 1
            producer.poll(0)
            time.sleep(0.02)
        assert producer.flush(30) == 0

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


class _Mirrors:
    """Two ``rill mirror`` processes of one mirror, each SIGKILLed and started again in turn."""

    def __init__(self, command: list[str], logs_dir: Path) -> None:
        self._command = command
        self._dir = logs_dir
        self.logs: list[Path] = []
        self.procs = [self._start(), self._start()]
        self.proc_logs = self.logs[-2:]

    def _start(self) -> subprocess.Popen[bytes]:
        self.logs.append(self._dir / f"mirror-{len(self.logs)}.log")
        with open(self.logs[-1], "wb") as log:
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            return subprocess.Popen(self._command, env=env, stdout=subprocess.DEVNULL, stderr=log)

    def kill_in_turn(self, rounds: int, every_s: float) -> None:
        for round_ in range(rounds):
            time.sleep(every_s)
            victim = round_ % 2
            self.procs[victim].kill()
            self.procs[victim].wait()
            self.procs[victim] = self._start()
            self.proc_logs[victim] = self.logs[-1]

    def last_log(self) -> str:
        return self.logs[-1].read_text()[-3000:]

    def stop(self) -> None:
        """SIGTERM both; each must exit 0 (after committing what it copied)."""
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=60)
            finally:
                proc.kill()
        for proc, log in zip(self.procs, self.proc_logs, strict=True):
            assert proc.returncode == 0, log.read_text()[-2000:]


@pytest.mark.slow
def test_mirror_killed_and_restarted_copies_every_record_in_order(
    clusters: tuple[TestBroker, TestBroker], tmp_path: Path
) -> None:
    """Two mirror processes share the work; each is SIGKILLed and started again several times while a producer
    writes. The target then holds every source record, each partition in the source's order once repeats
    (records copied again after a kill) are set aside; a group that committed on the source resumes on the
    target without missing a record."""
    source, target = clusters
    src, dst = source.bootstrap_servers, target.bootstrap_servers
    _create(src, NewTopic("events", 4))
    command = [sys.executable, "-m", "rill.cli.mirror", "--source", src, "--target", dst, "--topics", "events",
               "--name", "killed", "--refresh-interval", "2", "--status-interval", "0"]  # fmt: skip
    writer = _Writer(src, "events", b"e")
    mirrors = _Mirrors(command, tmp_path)
    try:
        mirrors.kill_in_turn(4, 2.5)
        # A group reads part of the data on the source and commits.
        group = Consumer({"bootstrap.servers": src, "group.id": "ledger", "enable.auto.commit": False,
                          "auto.offset.reset": "earliest"})  # fmt: skip
        group.assign([TopicPartition("events", p, 0) for p in range(4)])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 2000 and time.monotonic() < deadline:
            seen += sum(1 for m in group.consume(500, 0.5) if not m.error())
        group.commit(asynchronous=False)
        committed = {tp.partition: tp.offset for tp in group.committed([TopicPartition("events", p) for p in range(4)])}
        group.close()
        time.sleep(2.0)
    finally:
        writer.stop()
    try:
        expected = _source_values(src, "events")
        assert sum(len(v) for v in expected.values()) == writer.written

        state: dict[str, Any] = {}

        def caught_up() -> bool:
            admin = AdminClient({"bootstrap.servers": dst})
            offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("ledger")])["ledger"].result(10)
            state["group"] = {tp.partition: tp.offset for tp in offsets.topic_partitions}
            state["copied"] = {p: len(v) for p, v in _source_values(dst, "events").items()}
            state["expected"] = {p: len(v) for p, v in expected.items()}
            carried = {p for p, off in state["group"].items() if off >= 0}
            return all(state["copied"].get(p, 0) >= n for p, n in state["expected"].items()) and carried == {
                p for p, off in committed.items() if off >= 0}  # fmt: skip

        try:
            _wait(caught_up, 90, "the mirror to catch up and carry the group's offsets")
        except AssertionError as e:
            raise AssertionError(f"{e}: {state}, source group {committed}; last log: {mirrors.last_log()}") from None
    finally:
        mirrors.stop()
    copied = _source_values(dst, "events")
    repeats = 0
    for p, values in expected.items():
        got = copied[p]
        first_seen: list[bytes] = []
        seen_values: set[bytes] = set()
        for v in got:
            if v in seen_values:
                repeats += 1
            else:
                seen_values.add(v)
                first_seen.append(v)
        assert first_seen == values, f"partition {p}: the target's records are not the source's, in order"
    assert repeats < writer.written // 2
    # The group on the target resumes without missing anything after its source position.
    resumed = _source_values_from_group(dst, "ledger")
    for p, values in expected.items():
        after = values[max(0, committed[p]):]
        assert set(after) <= set(resumed.get(p, [])), f"partition {p}: records missed after the group's position"


def _source_values_from_group(bootstrap: str, group: str) -> dict[int, list[bytes]]:
    return {p: [r[0] for r in records] for p, records in _read_all(bootstrap, "events", group=group).items()}


def test_mirror_command_refuses_a_bad_pattern_and_an_unreachable_cluster() -> None:
    bad = subprocess.run([sys.executable, "-m", "rill.cli.mirror", "--source", "127.0.0.1:1", "--target",
                          "127.0.0.1:1", "--topics", "("], capture_output=True, timeout=30)  # fmt: skip
    assert bad.returncode == 2 and b"invalid --topics pattern" in bad.stderr, bad.stderr
    unreachable = subprocess.run([sys.executable, "-m", "rill.cli.mirror", "--source", "127.0.0.1:1", "--target",
                                  "127.0.0.1:1", "--topics", ".*", "--timeout", "1"], capture_output=True,
                                 timeout=30)  # fmt: skip
    assert unreachable.returncode == 1 and len(unreachable.stderr.decode().strip().splitlines()) == 1


def test_mirror_command_refuses_client_properties_that_break_delivery(tmp_path: Path) -> None:
    config = tmp_path / "source.properties"
    config.write_text("security.protocol=PLAINTEXT\nenable.auto.commit=true\n")
    refused = subprocess.run([sys.executable, "-m", "rill.cli.mirror", "--source", "127.0.0.1:1", "--target",
                              "127.0.0.1:1", "--topics", ".*", "--source-config", str(config)], capture_output=True,
                             timeout=30)  # fmt: skip
    lines = refused.stderr.decode().strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr
    assert "--source-config: enable.auto.commit=true is not allowed: the mirror commits its positions" in lines[0]


@pytest.mark.slow
def test_exactly_once_mirror_killed_and_restarted_holds_every_record_once(
    clusters: tuple[TestBroker, TestBroker], tmp_path: Path
) -> None:
    """``--exactly-once``: a mirror SIGKILLed several times while a producer writes (two processes sharing the
    work, so partitions also move between them); the target read with read_committed holds each source record
    exactly once, in the source's order. (The same run without ``--exactly-once`` has duplicates.)"""
    source, target = clusters
    src, dst = source.bootstrap_servers, target.bootstrap_servers
    _create(src, NewTopic("ledger", 3))
    command = [sys.executable, "-m", "rill.cli.mirror", "--source", src, "--target", dst, "--topics", "ledger",
               "--name", "once", "--exactly-once", "--status-interval", "0"]  # fmt: skip
    writer = _Writer(src, "ledger", b"r")
    mirrors = _Mirrors(command, tmp_path)
    try:
        mirrors.kill_in_turn(4, 3.0)
        time.sleep(2.0)
    finally:
        writer.stop()
    try:
        expected = _source_values(src, "ledger")
        assert sum(len(v) for v in expected.values()) == writer.written

        def copied_committed() -> dict[int, list[bytes]]:
            consumer = Consumer({"bootstrap.servers": dst, "group.id": "check", "isolation.level": "read_committed",
                                 "enable.auto.commit": False})  # fmt: skip
            consumer.assign([TopicPartition("ledger", p, 0) for p in range(3)])
            got: dict[int, list[bytes]] = {}
            last = time.monotonic()
            try:
                while time.monotonic() - last < 3.0:
                    for msg in consumer.consume(1000, 0.5):
                        if not msg.error():
                            last = time.monotonic()
                            got.setdefault(msg.partition(), []).append(msg.value())
            finally:
                consumer.close()
            return got

        state: dict[str, Any] = {}

        def caught_up() -> bool:
            state["copied"] = copied_committed()
            return all(len(state["copied"].get(p, [])) >= len(v) for p, v in expected.items())

        try:
            _wait(caught_up, 120, "the mirror to catch up")
        except AssertionError as e:
            counts = {p: len(v) for p, v in state.get("copied", {}).items()}
            raise AssertionError(f"{e}: copied {counts} of {[len(v) for v in expected.values()]}; last log: "
                                 f"{mirrors.last_log()}") from None  # fmt: skip
    finally:
        mirrors.stop()
    for p, values in expected.items():
        assert state["copied"][p] == values, f"partition {p}: not each source record once, in order"
