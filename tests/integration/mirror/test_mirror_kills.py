"""``rill mirror`` SIGKILLed, as a real process, between two brokers: at the moments a timed kill rarely hits
(during its start, its topic creations, its first commits, mid-copy, inside a transaction), through a seam
(``killable_mirror.py``) that kills the command exactly there; and in the reported scenario (30,000 records in
the source, 30,000 more produced while the mirror is killed and started again three times).

The invariant, checked after every kill: the mirror's position never passes what the target holds (every
source record below it is on the target); and at the end every source record is on the target, each
partition in the source's order (at least once: records copied again after a kill are allowed; with
``--exactly-once`` each record exactly once, read with read_committed)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from rill.testing import TestBroker, broker

pytestmark = pytest.mark.timeout(240)

KILLABLE = Path(__file__).with_name("killable_mirror.py")
PARTITIONS = 2
CHUNK = 1000  # records produced before each step (while no mirror runs)


TARGET_CLIENT = "mirror-to-target"
TARGET_RATE = 100_000  # bytes/s the target takes from the mirror: copying 30,000 records spans several commits


@pytest.fixture
def fast_groups() -> Iterator[tuple[TestBroker, TestBroker]]:
    """Two brokers. The source lets the mirror's group notice a killed member within 1.5 s (the mirror's
    session timeout is set through --source-config), so each restart takes over quickly. The target holds
    the mirror's producer (client id set through --target-config) to a produce quota, so its acknowledgements
    trail what the mirror has read by seconds (two one-second quota windows: no burst of ten windows' worth
    first): a position committed from what was read, not from what was acknowledged, would be caught by a
    kill."""
    with broker({"group.min.session.timeout.ms": "500"}) as source, broker({"quota.window.num": "2"}) as target:
        quota = subprocess.run([sys.executable, "-m", "rill", "configs", "--bootstrap-server",
                                target.bootstrap_servers, "--alter", "--entity-type", "clients", "--entity-name",
                                TARGET_CLIENT, "--add-config", f"producer_byte_rate={TARGET_RATE}"],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert quota.returncode == 0, quota.stderr
        yield source, target


def _produce(bootstrap: str, topic: str, first: int, count: int, partitions: int = PARTITIONS) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for n in range(first, first + count):
        while True:
            try:
                producer.produce(topic, b"%s-%07d" % (topic.encode(), n), partition=n % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0


def _create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(15)


def _read(bootstrap: str, topic: str, partitions: int, *, read_committed: bool = False,
          at_least: dict[int, int] | None = None) -> dict[int, list[bytes]]:  # fmt: skip
    """Every record of ``topic`` per partition, up to the high watermarks seen now; with ``at_least``, until
    that many records are read from each partition (records of a transaction still open stay invisible to
    read_committed, which the high watermark would wait for)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False,
                         "isolation.level": "read_committed" if read_committed else "read_uncommitted"})  # fmt: skip
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}

    def done() -> bool:
        if at_least is not None:
            return all(len(got[p]) >= n for p, n in at_least.items())
        return all(tp.offset >= ends[tp.partition] for tp in consumer.position(tps) if ends[tp.partition] > 0)

    deadline = time.monotonic() + 30
    try:
        while not done():
            assert time.monotonic() < deadline, f"{topic}: read {[len(v) for v in got.values()]} of {ends}"
            for msg in consumer.consume(5000, 0.2):
                if not msg.error():
                    got[msg.partition()].append(msg.value())
    finally:
        consumer.close()
    return got


def _group_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    return {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions if tp.offset >= 0}


def _first_seen(values: list[bytes]) -> list[bytes]:
    seen: set[bytes] = set()
    out = []
    for v in values:
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


class _Mirror:
    """Runs the mirror command (or its killable form) with one topic, one name, one --source-config."""

    def __init__(
        self, src: str, dst: str, topic: str, name: str, tmp: Path, *extra: str, source_props: str = ""
    ) -> None:
        source_config, target_config = tmp / f"{name}-source.properties", tmp / f"{name}-target.properties"
        source_config.write_text("session.timeout.ms=1500\nheartbeat.interval.ms=300\n" + source_props)
        target_config.write_text(f"client.id={TARGET_CLIENT}\n")
        self.args = ["--source", src, "--target", dst, "--topics", topic, "--name", name, "--status-interval", "0",
                     "--source-config", str(source_config), "--target-config", str(target_config), *extra]  # fmt: skip
        self.tmp = tmp
        self.runs = 0

    def _log(self) -> Any:
        self.runs += 1
        return open(self.tmp / f"mirror-{self.runs}.log", "wb")

    def kill_at(self, point: str, nth: int) -> None:
        """Run until the command kills itself at ``point`` (the ``nth`` time it gets there)."""
        with self._log() as log:
            proc = subprocess.Popen([sys.executable, str(KILLABLE), point, str(nth), "--", *self.args], stderr=log,
                                    stdout=subprocess.DEVNULL)  # fmt: skip
        try:
            code = proc.wait(timeout=60)
        finally:
            proc.kill()
        text = (self.tmp / f"mirror-{self.runs}.log").read_text()
        assert code == -signal.SIGKILL and f"killing myself at {point}" in text, f"{point} #{nth}: {code}\n{text}"

    def start(self) -> subprocess.Popen[bytes]:
        with self._log() as log:
            return subprocess.Popen([sys.executable, "-m", "rill.cli.mirror", *self.args], stderr=log,
                                    stdout=subprocess.DEVNULL)  # fmt: skip

    def last_log(self) -> str:
        return (self.tmp / f"mirror-{self.runs}.log").read_text()[-3000:]


def _stop(proc: subprocess.Popen[bytes], mirror: _Mirror) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=60) == 0, mirror.last_log()
    finally:
        proc.kill()


def _caught_up(mirror: _Mirror, proc: subprocess.Popen[bytes], check: Any) -> None:
    deadline = time.monotonic() + 90
    while not check():
        assert proc.poll() is None, mirror.last_log()
        assert time.monotonic() < deadline, f"the mirror did not catch up: {mirror.last_log()}"
        time.sleep(0.5)


# (where, the how-manieth time, records produced before): enough records that copying spans the first commits.
AT_LEAST_ONCE_KILLS = [
    ("syncs-topic-sent", 1, 1000),  # its start: the offset-syncs topic requested, not awaited
    ("topic-created", 1, 1000),  # its topic creation: the target topic just created, nothing subscribed
    ("assigned", 1, 1000),  # partitions handed over, nothing copied yet
    ("durable", 1, 1000),  # its first commit: everything acknowledged, the positions not committed
    ("committed", 1, 30_000),  # right after its first commit, while records are still in flight
    ("delivered", 5000, 10_000),  # mid-copy, records in flight
    ("delivered", 1, 1000),  # the first acknowledgement after a restart
]


@pytest.mark.slow
def test_at_least_once_mirror_killed_at_each_point_never_commits_past_the_target(
    fast_groups: tuple[TestBroker, TestBroker], tmp_path: Path
) -> None:
    source, target = fast_groups
    src, dst = source.bootstrap_servers, target.bootstrap_servers
    topic = "orders"
    _create(src, topic)
    mirror = _Mirror(src, dst, topic, "alo", tmp_path)
    produced = 0
    for point, nth, records in AT_LEAST_ONCE_KILLS:
        _produce(src, topic, produced, records)
        produced += records
        mirror.kill_at(point, nth)
        committed = _group_offsets(src, "rill-mirror-alo")
        if topic not in AdminClient({"bootstrap.servers": dst}).list_topics(timeout=10).topics:
            assert not committed, f"{point}: positions committed with no target topic"
            continue
        wanted = _read(src, topic, PARTITIONS)
        held = _read(dst, topic, PARTITIONS)
        for p in range(PARTITIONS):
            position = committed.get((topic, p), 0)
            first = _first_seen(held[p])
            # The distinct records on the target, in order of their first copy, are the source's from its start,
            # and reach at least the committed position.
            assert first == wanted[p][: len(first)], f"after a kill at {point}: partition {p} out of order"
            assert len(first) >= position, (
                f"after a kill at {point} #{nth}: partition {p} committed at {position}, but the target holds only "
                f"the first {len(first)} source records"
            )

    _produce(src, topic, produced, CHUNK)
    produced += CHUNK
    proc = mirror.start()
    try:
        _caught_up(mirror, proc, lambda: sum(len(set(v)) for v in _read(dst, topic, PARTITIONS).values()) >= produced)
    finally:
        _stop(proc, mirror)
    wanted = _read(src, topic, PARTITIONS)
    held = _read(dst, topic, PARTITIONS)
    for p in range(PARTITIONS):
        assert _first_seen(held[p]) == wanted[p], f"partition {p}: not every source record, in order"


@pytest.mark.slow
@pytest.mark.parametrize(("extra", "point", "nth"), [((), "assigned", 1), (("--exactly-once",), "txn-started", 2)],
                         ids=["at-least-once", "exactly-once"])  # fmt: skip
def test_a_mirror_started_at_the_end_keeps_its_start_across_a_kill_before_its_first_commit(
    fast_groups: tuple[TestBroker, TestBroker], tmp_path: Path, extra: tuple[str, ...], point: str, nth: int
) -> None:
    """``auto.offset.reset=latest`` in --source-config: the mirror copies what arrives after it first took a
    partition. Killed once it has taken both partitions, before copying anything, and records arrive
    meanwhile: the next process starts where the first one started (committed as it took each partition), not
    at the end of the log then."""
    source, target = fast_groups
    src, dst = source.bootstrap_servers, target.bootstrap_servers
    topic = "news"
    _create(src, topic)
    _produce(src, topic, 0, 1000)  # before the mirror: not copied
    mirror = _Mirror(src, dst, topic, "late", tmp_path, *extra, source_props="auto.offset.reset=latest\n")
    mirror.kill_at(point, nth)
    _produce(src, topic, 1000, 1000)  # while no mirror runs
    proc = mirror.start()
    committed = bool(extra)
    try:
        _caught_up(mirror, proc, lambda: sum(map(len, _read(dst, topic, PARTITIONS, read_committed=committed)
                                                 .values())) >= 1000)  # fmt: skip
    finally:
        _stop(proc, mirror)
    wanted = _read(src, topic, PARTITIONS)
    held = _read(dst, topic, PARTITIONS, read_committed=committed)
    for p in range(PARTITIONS):
        assert held[p] == wanted[p][500:], f"partition {p}: not the records after the mirror's start"


EXACTLY_ONCE_KILLS = [
    ("topic-created", 1),
    ("txn-started", 1),  # a partition's transactional id initialised, its previous owner fenced, nothing copied
    ("txn-acked", 1),  # a transaction's records acknowledged, its position and commit not sent
    ("delivered", 300),  # mid-transaction
    ("txn-committed", 1),  # right after a commit
    ("txn-acked", 2),
]


@pytest.mark.slow
def test_exactly_once_mirror_killed_at_each_point_holds_each_record_once(
    fast_groups: tuple[TestBroker, TestBroker], tmp_path: Path
) -> None:
    source, target = fast_groups
    src, dst = source.bootstrap_servers, target.bootstrap_servers
    topic = "ledger"
    _create(src, topic)
    mirror = _Mirror(src, dst, topic, "eos", tmp_path, "--exactly-once")
    produced = 0
    for point, nth in EXACTLY_ONCE_KILLS:
        _produce(src, topic, produced, CHUNK)
        produced += CHUNK
        mirror.kill_at(point, nth)
        if topic not in AdminClient({"bootstrap.servers": dst}).list_topics(timeout=10).topics:
            continue
        positions = _group_offsets(dst, "rill-mirror-eos")
        wanted = _read(src, topic, PARTITIONS)
        at = {p: positions.get((topic, p), 0) for p in range(PARTITIONS)}
        held = _read(dst, topic, PARTITIONS, read_committed=True, at_least=at)
        for p in range(PARTITIONS):
            # Exactly the source records below the committed position, once each, in order (a transaction left
            # open by the kill is invisible, and aborted when the next owner takes the partition).
            assert held[p][: at[p]] == wanted[p][: at[p]], f"after a kill at {point} #{nth}: partition {p}"

    _produce(src, topic, produced, CHUNK)
    produced += CHUNK
    proc = mirror.start()
    try:
        _caught_up(mirror, proc, lambda: all(
            n >= produced // PARTITIONS for n in map(len, _read(dst, topic, PARTITIONS, read_committed=True).values())
        ))  # fmt: skip
    finally:
        _stop(proc, mirror)
    wanted = _read(src, topic, PARTITIONS)
    held = _read(dst, topic, PARTITIONS, read_committed=True)
    for p in range(PARTITIONS):
        assert held[p] == wanted[p], f"partition {p}: not each source record once, in order"


@pytest.mark.slow
def test_the_reported_scenario_three_restarts_while_30000_records_arrive(tmp_path: Path) -> None:
    """As reported: two fresh brokers, 30,000 records in ``orders``, the mirror started; three times 10,000
    more records, a flush, a second's pause, and the mirror SIGKILLed and started again (default settings, so
    each new process waits for the killed one's session, 10 s, before it gets the partition). Once it has
    caught up, the target holds all 60,000 values, in the source's order."""
    with broker({}) as source, broker({}) as target:
        src, dst = source.bootstrap_servers, target.bootstrap_servers
        topic = "orders"
        _produce(src, topic, 0, 30_000, partitions=1)  # the topic auto-created, one partition
        args = [sys.executable, "-m", "rill.cli.mirror", "--source", src, "--target", dst, "--topics", topic,
                "--status-interval", "0"]  # fmt: skip
        logs = []

        def start() -> subprocess.Popen[bytes]:
            logs.append(tmp_path / f"mirror-{len(logs)}.log")
            with open(logs[-1], "wb") as log:
                return subprocess.Popen(args, stderr=log, stdout=subprocess.DEVNULL)

        proc = start()
        try:
            for round_ in range(3):
                _produce(src, topic, 30_000 + 10_000 * round_, 10_000, partitions=1)
                time.sleep(1.0)
                proc.kill()
                proc.wait()
                proc = start()
            deadline = time.monotonic() + 120
            while len(set(_read(dst, topic, 1)[0])) < 60_000:
                assert proc.poll() is None, logs[-1].read_text()[-3000:]
                assert time.monotonic() < deadline, f"not caught up: {logs[-1].read_text()[-3000:]}"
                time.sleep(1.0)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            finally:
                proc.kill()
        assert proc.returncode == 0, logs[-1].read_text()[-3000:]
        wanted = _read(src, topic, 1)[0]
        held = _read(dst, topic, 1)[0]
        assert len(wanted) == 60_000
        assert _first_seen(held) == wanted
