"""AlterReplicaLogDirs: a replica moved between the two ``log.dirs`` of a broker while a confluent-kafka producer
writes to it, asked for with kafka-python's admin client, watched with DescribeLogDirs (the future replica shows
while the copier is held through its seam), and SIGKILLs of the broker process during the copy, once it caught
up and between the swap's two renames: every acknowledged record is read back after the move, from the new dir,
and after a restart; the move is done or not, never half."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kafka import KafkaAdminClient, TopicPartitionReplica
from kafka import errors as kafka_errors
from tests.integration.broker._wire import Wire

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey

pytestmark = pytest.mark.timeout(180)

TOPIC = "moving"


def _dirs(tmp: Path) -> tuple[Path, Path]:
    return tmp / "a", tmp / "b"


def _broker(tmp: Path, subprocess: bool = False, **configs: str) -> rill.testing.TestBroker:
    a, b = _dirs(tmp)
    props = {"log.dirs": f"{a},{b}", "num.partitions": "1", **configs}
    broker = rill.testing.TestBroker(props, subprocess=subprocess, data_dir=tmp)
    return broker.start()


def _create(bootstrap: str, topic: str = TOPIC, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values():
        f.result(30)


def _describe(bootstrap: str, version: int = 4) -> dict[tuple[str, bool], tuple[str, int, int]]:
    """(log dir, future?) -> (topic, size, offset lag) of partition 0 of TOPIC, over DescribeLogDirs."""
    w = Wire(bootstrap)
    try:
        r = w.call(ApiKey.DESCRIBE_LOG_DIRS, version, {"topics": [{"topic": TOPIC, "partitions": [0]}]})
    finally:
        w.close()
    out = {}
    for d in r["results"]:
        assert d["error_code"] == 0
        assert d["total_bytes"] > 0 and 0 <= d["usable_bytes"] <= d["total_bytes"]
        for t in d["topics"]:
            for p in t["partitions"]:
                out[(d["log_dir"], p["is_future_key"])] = (t["name"], p["partition_size"], p["offset_lag"])
    return out


def _alter(bootstrap: str, path: Path | str, topic: str = TOPIC) -> type[Exception]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        result = admin.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, 0): str(path)})
    finally:
        admin.close()
    (error,) = result.values()
    return error  # type: ignore[no-any-return]


def _wait(cond: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _current_dir_of(tmp: Path) -> tuple[Path, Path]:
    """(the dir holding the partition's current log, the other one)."""
    a, b = _dirs(tmp)
    return (a, b) if (a / f"{TOPIC}-0").is_dir() else (b, a)


class Writer:
    """A confluent-kafka producer writing numbered values in a thread; what it was acknowledged, and errors."""

    def __init__(self, bootstrap: str, **conf: Any) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                                  "enable.idempotence": True, **conf})  # fmt: skip
        self.acked: dict[int, bytes] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._n = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _cb(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[msg.offset()] = msg.value()

    def write(self, count: int, size: int = 100) -> None:
        for _ in range(count):
            self._n += 1
            self.producer.produce(TOPIC, value=b"%08d" % self._n + b"x" * size, on_delivery=self._cb)
        assert self.producer.flush(30) == 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self._n += 1
            self.producer.produce(TOPIC, value=b"%08d" % self._n, on_delivery=self._cb)
            self.producer.poll(0.002)
        self.producer.flush(10)

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def wait_for_more(self, count: int = 50) -> None:
        start = len(self.acked)
        _wait(lambda: len(self.acked) >= start + count, "acknowledged writes")


def _read_all(bootstrap: str, end: int) -> dict[int, bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([CkTopicPartition(TOPIC, 0, 0)])
    got: dict[int, bytes] = {}
    deadline = time.monotonic() + 60
    try:
        while len(got) < end and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.5):
                if m.error() is None:
                    got[m.offset()] = m.value()
    finally:
        consumer.close()
    return got


def _check_every_acknowledged(bootstrap: str, acked: dict[int, bytes]) -> None:
    got = _read_all(bootstrap, max(acked) + 1)
    missing = [o for o in acked if got.get(o) != acked[o]]
    assert not missing, f"{len(missing)} acknowledged records lost or changed, first at {min(missing)}"


class Gate:
    """The copier's seam: each point (``copy``, ``swap``) is held until opened; ``reached`` tells it was hit."""

    def __init__(self) -> None:
        self.reached = {"copy": threading.Event(), "swap": threading.Event()}
        self.opened = {"copy": threading.Event(), "swap": threading.Event()}

    async def __call__(self, tp: object, point: str) -> None:
        self.reached[point].set()
        while not self.opened[point].is_set():  # the broker's loop serves others meanwhile
            await asyncio.sleep(0.01)


def _mover(b: rill.testing.TestBroker) -> Any:
    return b.broker.replica_manager.log_dir_mover


@pytest.fixture
def tmp(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


def test_a_replica_moves_while_it_is_written(tmp: Path) -> None:
    """The move of a partition written all along by a confluent-kafka producer: DescribeLogDirs shows the future
    replica (held before it copies anything, then caught up and held before the swap), no produce fails, and
    every acknowledged record is read after the move, from the new dir, and after a restart."""
    b = _broker(tmp, **{"log.segment.bytes": "65536"})
    try:
        bootstrap = b.bootstrap_servers
        _create(bootstrap)
        gate = Gate()
        _mover(b).hold = gate
        with Writer(bootstrap) as writer:
            writer.wait_for_more(2000)  # several segments before the move
            source, dest = _current_dir_of(tmp)
            assert _alter(bootstrap, dest) is kafka_errors.NoError
            _wait(gate.reached["copy"].is_set, "the copier's first step")
            seen = _describe(bootstrap)
            assert seen[(str(source), False)][0] == TOPIC
            name, size, lag = seen[(str(dest), True)]
            assert (name, size) == (TOPIC, 0) and lag >= 2000  # nothing copied yet: it lacks every offset
            assert list((dest).glob(f"{TOPIC}-0.*-future"))
            writer.wait_for_more()
            gate.opened["copy"].set()
            _wait(gate.reached["swap"].is_set, "the copy to catch up")
            writer.wait_for_more()  # written after the copy caught up: copied by the swap's own step
            seen = _describe(bootstrap)
            assert (str(dest), True) in seen and seen[(str(dest), True)][1] > 0
            gate.opened["swap"].set()
            _wait(lambda: _mover(b).moves_completed == 1, "the swap")
            writer.wait_for_more()
        assert writer.errors == []
        seen = _describe(bootstrap)
        assert list(seen) == [(str(dest), False)] and seen[(str(dest), False)][2] == 0
        assert (dest / f"{TOPIC}-0").is_dir() and not (source / f"{TOPIC}-0").exists()
        assert not list(dest.glob("*-future"))
        _check_every_acknowledged(bootstrap, writer.acked)
        # the same replica asked for in the dir it is in: nothing to do
        assert _alter(bootstrap, dest) is kafka_errors.NoError
        assert _mover(b).moving() == []
        b.restart()
        assert list(_describe(b.bootstrap_servers)) == [(str(dest), False)]
        _check_every_acknowledged(b.bootstrap_servers, writer.acked)
    finally:
        b.close()


def test_answers_as_kafka(tmp: Path) -> None:
    """Kafka's errors: a dir not among log.dirs (or not absolute) LOG_DIR_NOT_FOUND, an offline one
    KAFKA_STORAGE_ERROR, an unknown partition UNKNOWN_TOPIC_OR_PARTITION; a dir asked for before the partition
    exists is where its log is made; DescribeLogDirs shows the offline dir with KAFKA_STORAGE_ERROR."""
    a, _ = _dirs(tmp)
    blocker = tmp / "not-a-dir"
    blocker.write_text("a file where a log dir's parent should be")
    offline = blocker / "logs"
    broker = rill.testing.TestBroker({"log.dirs": f"{a},{offline},{tmp / 'c'}"}, data_dir=tmp).start()
    try:
        bootstrap = broker.bootstrap_servers
        _create(bootstrap, "present")
        w = Wire(bootstrap)
        try:
            def codes(path: str, topic: str, partitions: list[int]) -> list[int]:
                body = {"dirs": [{"path": path, "topics": [{"name": topic, "partitions": partitions}]}]}
                r = w.call(ApiKey.ALTER_REPLICA_LOG_DIRS, 1, body)
                return [p["error_code"] for t in r["results"] for p in t["partitions"]]

            assert codes("/elsewhere", "present", [0]) == [ErrorCode.LOG_DIR_NOT_FOUND]
            assert codes("a", "present", [0]) == [ErrorCode.LOG_DIR_NOT_FOUND]
            assert codes(str(offline), "present", [0]) == [ErrorCode.KAFKA_STORAGE_ERROR]
            # a move while a dir is offline is refused, as Kafka refuses one
            other = str(tmp / "c") if (a / "present-0").exists() else str(a)
            assert codes(other, "present", [0]) == [ErrorCode.KAFKA_STORAGE_ERROR]
            assert codes(str(a), "present", [7]) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
            # remembered for when the partition comes: each topic lands where it was asked for, not where the
            # broker would have put it (the dir with fewer logs)
            here = a if (a / "present-0").exists() else tmp / "c"
            assert codes(str(here), "later", [0]) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
            there = tmp / "c" if here == a else a
            _create(bootstrap, "later")
            assert (here / "later-0").is_dir() and not (there / "later-0").exists()
            r = w.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
            by_dir = {d["log_dir"]: d["error_code"] for d in r["results"]}
            assert by_dir == {str(a): 0, str(offline): ErrorCode.KAFKA_STORAGE_ERROR, str(tmp / "c"): 0}
        finally:
            w.close()
        # the copy rate is a dynamic broker config, as in Kafka
        admin = AdminClient({"bootstrap.servers": bootstrap})
        resource = ConfigResource("broker", "0", incremental_configs=[
            ConfigEntry("replica.alter.log.dirs.io.max.bytes.per.second", "1048576",
                        incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
        admin.incremental_alter_configs([resource])[resource].result(10)
        _wait(lambda: _mover(broker).io_max_bytes_per_second == 1048576, "the new copy rate")
    finally:
        broker.close()


def test_sigkill_during_the_copy_then_the_move_goes_on(tmp: Path) -> None:
    """SIGKILL of a broker process while its copier is throttled in the middle of the copy: it starts with
    every acknowledged record, one current log of the partition, and the move goes on from the future log."""
    b = _broker(tmp, subprocess=True, **{"replica.alter.log.dirs.io.max.bytes.per.second": "20000"})
    try:
        bootstrap = b.bootstrap_servers
        _create(bootstrap)
        writer = Writer(bootstrap)
        writer.write(30000, size=100)  # about 3.5 MB: the first 1 MiB step then a wait of about 50 s
        source, dest = _current_dir_of(tmp)
        assert _alter(bootstrap, dest) is kafka_errors.NoError

        def copying() -> bool:
            return any(f.stat().st_size > 0 for d in dest.glob(f"{TOPIC}-0.*-future") for f in d.glob("*.log"))

        _wait(copying, "the copy to begin")
        writer.write(500)
        assert _describe(bootstrap)[(str(dest), True)][2] > 0
        b.kill()
        assert (source / f"{TOPIC}-0").is_dir() and not (dest / f"{TOPIC}-0").exists()
        b.overrides.pop("replica.alter.log.dirs.io.max.bytes.per.second")
        b.start()
        bootstrap = b.bootstrap_servers
        _check_every_acknowledged(bootstrap, writer.acked)
        _wait(lambda: list(_describe(bootstrap)) == [(str(dest), False)], "the move to finish after the start")
        writer.write(100)
        _check_every_acknowledged(bootstrap, writer.acked)
        assert writer.errors == []
    finally:
        b.close()


@pytest.mark.parametrize("point", ["after-copy", "inside-swap"])
def test_a_sigkill_at_the_swap_leaves_the_move_done_or_not(tmp: Path, point: str) -> None:
    """SIGKILL of the broker process once the copy caught up, before the swap (the next start goes on with the
    future log and swaps), and between the swap's two renames (the current log's directory already ``-delete``,
    the future one not renamed: the next start finishes the swap, the future log having held every offset). A
    producer writes all along; each start serves every acknowledged record from one log, and the move ends."""
    a, b = _dirs(tmp)
    child = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_log_dir_crash_child.py")), str(tmp),
                              f"{a},{b}", point], stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert child.stdout is not None
        bootstrap = child.stdout.readline().decode().strip()
        assert bootstrap, "the child broker did not start"
        _create(bootstrap)
        writer = Writer(bootstrap, **{"message.timeout.ms": 3000})
        writer.write(3000)
        source, dest = _current_dir_of(tmp)
        with writer:
            writer.wait_for_more()
            assert _alter(bootstrap, dest) is kafka_errors.NoError
            assert child.wait(60) == -signal.SIGKILL
        if point == "after-copy":
            assert (source / f"{TOPIC}-0").is_dir() and list(dest.glob(f"{TOPIC}-0.*-future"))
        else:
            assert list(source.glob(f"{TOPIC}-0.*-delete")) and list(dest.glob(f"{TOPIC}-0.*-future"))
            assert not (source / f"{TOPIC}-0").exists() and not (dest / f"{TOPIC}-0").exists()
    finally:
        child.kill()
        child.wait()
    b_ = rill.testing.TestBroker({"log.dirs": f"{a},{b}", "num.partitions": "1"}, data_dir=tmp).start()
    try:
        bootstrap = b_.bootstrap_servers
        _check_every_acknowledged(bootstrap, writer.acked)
        _wait(lambda: list(_describe(bootstrap)) == [(str(dest), False)], "the move to be done")
        assert (dest / f"{TOPIC}-0").is_dir() and not (source / f"{TOPIC}-0").exists()
        after = Writer(bootstrap)
        after.write(100)
        assert after.errors == [] and min(after.acked) > max(writer.acked)
        b_.restart()
        _check_every_acknowledged(b_.bootstrap_servers, {**writer.acked, **after.acked})
    finally:
        b_.close()

def _rill(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "rill", *args], capture_output=True, timeout=120, check=False)


def test_the_cli_describes_and_moves(tmp: Path) -> None:
    """``rill log-dirs describe`` (and kafka-log-dirs.sh's ``--describe`` JSON) and ``rill log-dirs move`` with a
    kafka-reassign-partitions.sh JSON naming log_dirs."""
    b = _broker(tmp)
    try:
        bootstrap = b.bootstrap_servers
        _create(bootstrap)
        Writer(bootstrap).write(500)
        source, dest = _current_dir_of(tmp)
        proc = _rill("log-dirs", "--describe", "--bootstrap-server", bootstrap, "--topic-list", TOPIC)
        assert proc.returncode == 0, proc.stderr
        (broker,) = json.loads(proc.stdout)["brokers"]
        dirs = {d["logDir"]: d["partitions"] for d in broker["logDirs"]}
        assert dirs[str(dest)] == [] and [p["partition"] for p in dirs[str(source)]] == [f"{TOPIC}-0"]
        plan = tmp / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": TOPIC, "partition": 0, "replicas": [0], "log_dirs": [str(dest)]}]}))  # fmt: skip
        proc = _rill("log-dirs", "move", "--reassignment-json-file", str(plan), "--wait", "--bootstrap-server",
                     bootstrap)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert b"Every move is done" in proc.stdout
        proc = _rill("log-dirs", "describe", "--bootstrap-server", bootstrap)
        assert proc.returncode == 0, proc.stderr
        rows = [line.split() for line in proc.stdout.decode().splitlines()[1:]]
        assert [r[1] for r in rows if len(r) > 2 and r[2] == f"{TOPIC}-0"] == [str(dest)]
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": TOPIC, "partition": 0, "replicas": [0], "log_dirs": ["/not/a/log/dir"]}]}))  # fmt: skip
        proc = _rill("log-dirs", "move", "--reassignment-json-file", str(plan), "--bootstrap-server", bootstrap)
        assert proc.returncode == 1 and b"LOG_DIR_NOT_FOUND" in proc.stdout
    finally:
        b.close()


def test_transactions_and_the_log_start_move_with_the_replica(tmp: Path) -> None:
    """The future log is a follower's copy: an aborted transaction stays aborted for read_committed consumers
    (the transaction index and producer state come along), and DeleteRecords during the copy moves the moved
    log's start too."""
    b = _broker(tmp, **{"transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1"})
    try:
        bootstrap = b.bootstrap_servers
        _create(bootstrap)
        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "mover"})
        txn.init_transactions(30)
        for i, commit in enumerate([True, False, True]):
            txn.begin_transaction()
            for j in range(50):
                txn.produce(TOPIC, value=b"t%d-%d" % (i, j))
            (txn.commit_transaction if commit else txn.abort_transaction)(30)
        _, dest = _current_dir_of(tmp)
        gate = Gate()
        _mover(b).hold = gate
        assert _alter(bootstrap, dest) is kafka_errors.NoError
        _wait(gate.reached["copy"].is_set, "the copier's first step")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.delete_records([CkTopicPartition(TOPIC, 0, 10)]).values():
            f.result(30)
        gate.opened["copy"].set()
        gate.opened["swap"].set()
        _wait(lambda: _mover(b).moves_completed == 1, "the move")
        for restart in (False, True):
            if restart:
                b.restart()
                bootstrap = b.bootstrap_servers
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{restart}",
                                 "isolation.level": "read_committed", "auto.offset.reset": "earliest"})  # fmt: skip
            consumer.assign([CkTopicPartition(TOPIC, 0, -2)])
            values: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(values) < 90 and time.monotonic() < deadline:
                values += [m.value() for m in consumer.consume(100, 0.5) if m.error() is None]
            low, _ = consumer.get_watermark_offsets(CkTopicPartition(TOPIC, 0), 10)
            consumer.close()
            assert low == 10
            assert values == [b"t0-%d" % j for j in range(10, 50)] + [b"t2-%d" % j for j in range(50)]
            assert (dest / f"{TOPIC}-0").is_dir()
    finally:
        b.close()


def test_a_topic_deleted_during_its_move(tmp: Path) -> None:
    """Deleting a topic whose replica is moving drops the move with it; the topic made again starts empty."""
    b = _broker(tmp)
    try:
        bootstrap = b.bootstrap_servers
        _create(bootstrap)
        Writer(bootstrap).write(300)
        source, dest = _current_dir_of(tmp)
        gate = Gate()
        _mover(b).hold = gate
        assert _alter(bootstrap, dest) is kafka_errors.NoError
        _wait(gate.reached["copy"].is_set, "the copier's first step")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.delete_topics([TOPIC]).values():
            f.result(30)
        assert not list(dest.glob(f"{TOPIC}-0.*-future")) and not (source / f"{TOPIC}-0").exists()
        gate.opened["copy"].set()
        _wait(lambda: _mover(b).moving() == [], "the copier to end")
        assert _mover(b).moves_completed == 0
        _create(bootstrap)
        assert next(iter(_describe(bootstrap).values()))[1:] == (0, 0)
        w = Writer(bootstrap)
        w.write(10)
        assert sorted(w.acked) == list(range(10))
    finally:
        b.close()
