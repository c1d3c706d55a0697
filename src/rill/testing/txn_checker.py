"""The transactional fault checker: a consume-transform-produce application, killed and restarted, must turn
every input into exactly one visible output.

The application (``python -m rill.testing.txn_checker app ...``, a subprocess so it can be SIGKILLed) reads the
input topic in a consumer group with ``isolation.level=read_committed`` and, per poll, writes one output record
per input record in a transaction (confluent-kafka's transactional producer) together with the input offsets
(``send_offsets_to_transaction``). Every output value is ``<input>|<transaction tag>|<records in the
transaction>``; every fifth transaction is aborted on purpose and its values end in ``|abort``.

:func:`run` feeds the input, starts the application and, until the group's committed offsets reach the end of
the input, SIGKILLs it at random moments (a new instance with the same ``transactional.id`` fences the old one
and aborts its open transaction) and now and then SIGKILLs the broker (a subprocess ``TestBroker``) and starts it
again (on a cluster: the leader of an output partition, ``cluster_fault``; or the leader of the group's
``__consumer_offsets`` partition, its followers paused first so that what it acknowledges meanwhile is on no
follower, ``offsets_failover_fault``). Then one more instance is killed mid-transaction and never replaced: the
coordinator must abort that *hanging* transaction when its ``transaction.timeout.ms`` expires. A read_committed
consumer reads the output the whole time, and twice more at the end; :func:`check` reports

- ``lost`` / ``duplicates``: inputs with no output, or with more than one;
- ``aborted_reads``: records of aborted transactions that a read_committed read returned (Jepsen's "aborted
  read"), whether aborted on purpose or by a kill;
- ``half_visible``: transactions of which a read returned some records but not all;
- ``hanging_aborted``: whether the last stable offset passed the unreplaced instance's records in time, and
  none of them was read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ABORT_EVERY = 5
HANGING_TAG = "hanging"
GROUP = "txn-app"  # the application's consumer group


# -- the application ------------------------------------------------------------------------------------


def app(
    bootstrap: str, source: str, target: str, group: str, transactional_id: str, txn_timeout_ms: int, pause_ms: int
) -> int:
    """The consume-transform-produce loop; runs until killed. Exit 3 on a fatal producer error.

    The consumer is assigned every input partition and starts at the group's committed offsets (the group
    only keeps offsets; zombies are fenced by the transactional id). ``pause_ms`` is spent inside each
    transaction, before it ends, so that kills land mid-transaction. The input offsets go into the transaction
    twice, as an application committing as it goes does: those of the first half of its records, then, after
    the pause, all of them (the second TxnOffsetCommit needs no new write to the transaction's state, so it
    reaches the group's coordinator even while the followers of ``__transaction_state`` do not fetch)."""
    import confluent_kafka as ck

    instance = f"{os.getpid()}.{uuid.uuid4().hex[:6]}"
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": txn_timeout_ms,
            "linger.ms": 2,
        }
    )
    producer.init_transactions(60)  # fences the previous instance, aborts its open transaction
    partitions = consumer.list_topics(source, timeout=30).topics[source].partitions
    consumer.assign([ck.TopicPartition(source, p) for p in partitions])
    _rewind(consumer)
    print(f"started {instance}", flush=True)
    txn = 0
    while True:
        msgs = [r for r in map(_record, consumer.consume(50, timeout=0.5)) if r is not None]
        if not msgs:
            continue
        txn += 1
        tag = f"{instance}:{txn}"
        abort = txn % ABORT_EVERY == 0
        try:
            producer.begin_transaction()
            for p, _, v in msgs:
                value = f"{v}|{tag}|{len(msgs)}" + ("|abort" if abort else "")
                producer.produce(target, value.encode(), partition=p)
            first_half = {p: o + 1 for p, o, _ in msgs[: len(msgs) // 2]}
            if first_half:
                offsets = [ck.TopicPartition(source, p, o) for p, o in first_half.items()]
                producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
            producer.flush(30)
            print(f"flushed {tag}", flush=True)
            time.sleep(pause_ms / 1000)
            ends = {p: o + 1 for p, o, _ in msgs}
            offsets = [ck.TopicPartition(source, p, o) for p, o in ends.items()]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
            if abort:
                producer.abort_transaction(30)
                _rewind(consumer)
            else:
                producer.commit_transaction(30)
            print(f"{'aborted' if abort else 'committed'} {tag} {len(msgs)}", flush=True)
        except ck.KafkaException as e:
            err = e.args[0]
            print(f"error in {tag}: {err}", flush=True)
            if err.fatal() or (not err.txn_requires_abort() and not err.retriable()):
                return 3
            with contextlib.suppress(ck.KafkaException):
                producer.abort_transaction(30)
            _rewind(consumer)


def _record(msg: Any) -> tuple[int, int, str] | None:
    """(partition, offset, value) of a consumed message, None for an error event."""
    if msg.error() is not None:
        return None
    return int(msg.partition()), int(msg.offset()), bytes(msg.value()).decode()


def _rewind(consumer: Any) -> None:
    """Back to the committed offsets of the assigned partitions (the start where none is committed)."""
    import confluent_kafka as ck

    assigned = consumer.assignment()
    committed = consumer.committed(assigned, timeout=30)
    consumer.assign(
        [
            ck.TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else ck.OFFSET_BEGINNING)
            for tp in committed
        ]
    )


def hang(bootstrap: str, target: str, partition: int, transactional_id: str, txn_timeout_ms: int) -> int:
    """Open a transaction, write to it, say so and wait to be killed."""
    import confluent_kafka as ck

    producer = ck.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "transaction.timeout.ms": txn_timeout_ms}
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(target, f"{HANGING_TAG}-{i}|{HANGING_TAG}|3".encode(), partition=partition)
    producer.flush(30)
    print("open", flush=True)
    time.sleep(3600)
    return 0


# -- reading --------------------------------------------------------------------------------------------


Read = dict[int, list[tuple[int, str]]]  # partition -> (offset, value)


def read_committed(
    bootstrap: str, topic: str, partitions: int, timeout: float = 60.0, *, isolation: str = "read_committed"
) -> Read:
    """Every record a read_committed consumer returns, from the start to each partition's last stable offset
    (with ``isolation="read_uncommitted"``: every record to the high watermark)."""
    import confluent_kafka as ck

    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"txn-checker-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    out: Read = {p: [] for p in range(partitions)}
    try:
        consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        pending = set(range(partitions))
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"partitions {sorted(pending)} of {topic} not read to their end in {timeout}s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            record = _record(msg)
            if record is None:
                err = msg.error()
                if err is not None and err.code() == ck.KafkaError._PARTITION_EOF:
                    pending.discard(int(msg.partition() or 0))
                continue
            out[record[0]].append((record[1], record[2]))
    finally:
        consumer.close()
    return out


def stable_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    import confluent_kafka as ck

    consumer = ck.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "txn-checker-lso", "isolation.level": "read_committed"}
    )
    try:
        return {
            p: consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)
        }
    finally:
        consumer.close()


class Watcher:
    """A read_committed consumer reading the output while the faults run."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.seen: Read = {p: [] for p in range(partitions)}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="txn-checker-watcher", daemon=True)

    def _run(self) -> None:
        import confluent_kafka as ck

        consumer = ck.Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"txn-checker-watch-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 100,
            }
        )
        consumer.assign([ck.TopicPartition(self.topic, p, ck.OFFSET_BEGINNING) for p in range(self.partitions)])
        try:
            while not self.stop.is_set():
                for record in map(_record, consumer.consume(500, 0.2)):
                    if record is not None:
                        self.seen[record[0]].append((record[1], record[2]))
        finally:
            consumer.close()


# -- checking -------------------------------------------------------------------------------------------


@dataclass
class Report:
    inputs: int
    read: int = 0
    lost: int = 0
    duplicates: int = 0
    aborted_reads: int = 0
    half_visible: int = 0
    hanging_aborted: bool | None = None
    hanging_abort_s: float | None = None  # from the kill of the hanging producer to the LSO passing its marker
    app_kills: int = 0
    broker_kills: int = 0
    committed_txns: int = 0
    aborted_in_log: int = 0  # records in the output's log that read_committed skipped
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        bad = self.lost or self.duplicates or self.aborted_reads or self.half_visible
        return not bad and self.hanging_aborted is not False


def check(inputs: int, reads: Sequence[Read], report: Report | None = None) -> Report:
    """``reads[0]`` is a final read (to the end); the others (a watcher's) may stop anywhere."""
    report = report or Report(inputs)
    examples: dict[str, list[str]] = defaultdict(list)
    final = reads[0]
    counts: Counter[str] = Counter()
    for records in final.values():
        for _, value in records:
            if not value.startswith(HANGING_TAG) and not value.endswith("|abort"):  # those are aborted reads
                counts[value.split("|", 1)[0]] += 1
    expected = {str(i) for i in range(inputs)}
    lost = sorted(expected - set(counts), key=int)
    dups = sorted(v for v, n in counts.items() if n > 1)
    report.read = sum(counts.values())
    report.lost, report.duplicates = len(lost), len(dups)
    examples["lost"], examples["duplicates"] = lost[:5], dups[:5]
    aborted: set[tuple[int, int]] = set()
    half: set[str] = set()
    for i, read in enumerate(reads):
        by_tag: dict[str, set[tuple[int, int]]] = defaultdict(set)
        size: dict[str, int] = {}
        for p, records in read.items():
            for off, value in records:
                parts = value.split("|")
                if value.endswith("|abort") or parts[0].startswith(HANGING_TAG):
                    aborted.add((p, off))
                    examples["aborted_reads"].append(value)
                elif len(parts) >= 3:
                    by_tag[parts[1]].add((p, off))
                    size[parts[1]] = int(parts[2])
        if i == 0:  # only a read to the end can tell a transaction is visible in part
            for tag, where in by_tag.items():
                if len(where) != size[tag]:
                    half.add(tag)
                    examples["half_visible"].append(f"{tag}: {len(where)} of {size[tag]}")
    report.aborted_reads = len(aborted)
    report.half_visible = len(half)
    report.examples = {k: v[:5] for k, v in examples.items() if v}
    return report


# -- the run --------------------------------------------------------------------------------------------


BROKER_CONFIGS = {
    "transaction.state.log.num.partitions": "5",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.min.session.timeout.ms": "500",
}


# On a cluster of three: the internal topics replicated three times, two in sync for a write.
CLUSTER_CONFIGS = {
    "transaction.state.log.num.partitions": "5",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "5",
    "min.insync.replicas": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.min.session.timeout.ms": "500",
}


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "rill.testing.txn_checker", *args],
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def _committed_total(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = consumer.committed([ck.TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return sum(max(tp.offset, 0) for tp in tps)
    except ck.KafkaException:  # the broker (or the group's coordinator) is restarting: ask again later
        return -1
    finally:
        consumer.close()


def _lines(app_log: Path, *starts: bytes) -> int:
    """How many lines of the application's instances begin with one of ``starts``."""
    text = b"\n" + app_log.read_bytes()
    return sum(text.count(b"\n" + start) for start in starts)


def _wait_for_lines(app_log: Path, proc: subprocess.Popen[bytes], count: int, *starts: bytes,
                    timeout: float = 60.0) -> None:  # fmt: skip
    """Wait until the application has written ``count`` more lines beginning with one of ``starts`` (or has
    exited)."""
    start = _lines(app_log, *starts)
    deadline = time.monotonic() + timeout
    while _lines(app_log, *starts) < start + count and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)


def run(
    bootstrap: str,
    workdir: Path,
    *,
    kill_broker: Callable[..., str] | None = None,
    transactional_id: str = "txn-app-1",
    replication_factor: int = 1,
    inputs: int = 3000,
    partitions: int = 3,
    app_kills: int = 8,
    broker_kill_every: int = 4,
    txn_timeout_ms: int = 10_000,
    pause_ms: int = 100,
    deadline_s: float = 120.0,
    seed: int | None = None,
    log: Callable[[str], None] = print,
    fault_while_running: bool = False,
) -> Report:
    """Run the workload against the brokers at ``bootstrap`` and check it; every ``broker_kill_every``-th kill of
    the application also runs ``kill_broker`` (``single_broker_fault``, ``cluster_fault``). With
    ``fault_while_running`` (``offsets_failover_fault``), every ``broker_kill_every``-th step runs ``kill_broker``
    instead, while the application goes on: the fault begins as a transaction's writes are acknowledged and its
    last TxnOffsetCommit is to come, and once the fault has killed the leader the application is SIGKILLed as
    soon as it has committed one more transaction, so that its successor starts from the offsets that
    transaction committed (lost offsets show as duplicates)."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    rng = random.Random(seed)
    source, target, group, txn_id = "txn-in", "txn-out", GROUP, transactional_id
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(t, partitions, replication_factor) for t in (source, target)]
    for f in admin.create_topics(topics).values():
        f.result(30)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(inputs):
        producer.produce(source, str(i).encode(), partition=i % partitions)
    if producer.flush(60) != 0:
        raise RuntimeError("the input was not written")
    report = Report(inputs)
    app_args = ["app", bootstrap, source, target, group, txn_id, str(txn_timeout_ms), str(pause_ms)]
    watcher = Watcher(bootstrap, target, partitions)
    watcher.thread.start()
    deadline = time.monotonic() + deadline_s
    app_log = workdir / "app.log"
    proc = _spawn(app_args, app_log)
    step = 0
    try:
        while _committed_total(bootstrap, group, source, partitions) < inputs:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the application did not finish within {deadline_s}s")
            time.sleep(rng.uniform(0.3, 1.5))
            if report.app_kills >= app_kills:
                if proc.poll() is not None:
                    proc = _spawn(app_args, workdir / "app.log")
                continue
            step += 1
            if fault_while_running and kill_broker is not None and step % broker_kill_every == 0:
                _wait_for_lines(app_log, proc, 2, b"committed ", b"aborted ")  # transactions are flowing

                def at_the_last_offsets(running: subprocess.Popen[bytes] = proc) -> None:
                    _wait_for_lines(app_log, running, 1, b"flushed ")  # writes acknowledged, last offsets to come

                def after_the_failover() -> None:
                    nonlocal proc
                    _wait_for_lines(app_log, proc, 1, b"committed ")
                    _kill(proc)
                    proc = _spawn(app_args, app_log)

                detail = kill_broker(at_the_last_offsets, after_the_failover)
                report.broker_kills += 1
                log(f"fault {report.broker_kills} while the application runs: {detail}")
                if proc.poll() is not None:  # a fatal error of its producer
                    proc = _spawn(app_args, workdir / "app.log")
                continue
            _kill(proc)
            report.app_kills += 1
            detail = ""
            if kill_broker is not None and not fault_while_running and report.app_kills % broker_kill_every == 0:
                detail = f", killed {kill_broker()}"
                report.broker_kills += 1
            log(f"kill {report.app_kills} (broker kills {report.broker_kills}{detail})")
            proc = _spawn(app_args, workdir / "app.log")
    finally:
        _kill(proc)
    # A hanging transaction: its producer is killed and nothing with its id comes back.
    before = stable_offsets(bootstrap, target, partitions)
    hanging = _spawn(["hang", bootstrap, target, "0", "txn-hanging", "3000"], workdir / "hang.log")
    try:
        until = time.monotonic() + 60
        while b"open" not in (workdir / "hang.log").read_bytes():
            if hanging.poll() is not None or time.monotonic() > until:
                raise RuntimeError("the hanging producer did not open its transaction")
            time.sleep(0.1)
    finally:
        _kill(hanging)
    killed_at = time.monotonic()
    until = killed_at + 3.0 + 30.0
    report.hanging_aborted = False
    while time.monotonic() < until:
        if stable_offsets(bootstrap, target, partitions)[0] > before[0] + 3:  # past the records and the marker
            report.hanging_aborted = True
            report.hanging_abort_s = round(time.monotonic() - killed_at, 1)
            break
        time.sleep(0.25)
    watcher.stop.set()
    watcher.thread.join(30)
    finals = [read_committed(bootstrap, target, partitions) for _ in range(2)]
    check(inputs, [finals[0], finals[1], watcher.seen], report)
    second = check(inputs, [finals[1]])
    report.lost, report.duplicates = max(report.lost, second.lost), max(report.duplicates, second.duplicates)
    everything = read_committed(bootstrap, target, partitions, isolation="read_uncommitted")
    report.aborted_in_log = sum(map(len, everything.values())) - sum(map(len, finals[0].values()))
    committed_log = (workdir / "app.log").read_text(errors="replace")
    report.committed_txns = committed_log.count("\ncommitted ") + committed_log.startswith("committed ")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "app":
        _, bootstrap, source, target, group, txn_id, timeout, pause = args
        return app(bootstrap, source, target, group, txn_id, int(timeout), int(pause))
    if args and args[0] == "hang":
        _, bootstrap, target, partition, txn_id, timeout = args
        return hang(bootstrap, target, int(partition), txn_id, int(timeout))
    parser = argparse.ArgumentParser(prog="python -m rill.testing.txn_checker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=20_000)
    parser.add_argument("--app-kills", type=int, default=30)
    parser.add_argument("--broker-kill-every", type=int, default=4)
    parser.add_argument("--brokers", type=int, default=1, help="1: one broker; 3: a cluster (replication factor 3)")
    parser.add_argument("--fault", choices=["leader", "offsets"], default="leader",
                        help="on a cluster: SIGKILL an output partition's leader, or the leader of the group's"
                             " __consumer_offsets partition after pausing its followers")  # fmt: skip
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds")
    parser.add_argument("--seed", type=int, default=None)
    ns = parser.parse_args(args)
    import tempfile

    from rill.testing import broker
    from rill.testing.cluster import cluster
    from rill.testing.txn_faults import (
        cluster_fault,
        colocated_transactional_id,
        offsets_failover_fault,
        single_broker_fault,
    )

    options: dict[str, Any] = {
        "fault_while_running": ns.brokers > 1 and ns.fault == "offsets",
        "inputs": ns.inputs,
        "app_kills": ns.app_kills,
        "broker_kill_every": ns.broker_kill_every,
        "deadline_s": ns.deadline,
        "seed": ns.seed,
    }
    with tempfile.TemporaryDirectory(prefix="rill-txn-checker-") as tmp:
        if ns.brokers == 1:
            with broker(BROKER_CONFIGS, subprocess=True) as b:
                report = run(b.bootstrap_servers, Path(tmp), kill_broker=single_broker_fault(b), **options)
        else:
            with cluster(ns.brokers, CLUSTER_CONFIGS) as c:
                if ns.fault == "offsets":
                    fault = offsets_failover_fault(c, GROUP, [("txn-out", 3), ("txn-in", 3)])
                    options["transactional_id"] = colocated_transactional_id(c, GROUP)
                else:
                    fault = cluster_fault(c, "txn-out", 3, random.Random(ns.seed))
                report = run(c.bootstrap_servers, Path(tmp), kill_broker=fault, replication_factor=3, **options)
    print(json.dumps(report.__dict__, indent=2, default=str))
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
