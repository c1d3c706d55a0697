"""Fault injection against a :class:`~rill.testing.cluster.TestCluster`, after Jepsen's Kafka queue workload.

Producers (confluent-kafka, ``acks=all``, ``enable.idempotence=true``, one request in flight: see
``_producer_config``) write unique values ``p<producer>-<seq>`` round robin to the partitions of a topic
(replication factor 3, ``min.insync.replicas=2``) while a schedule of faults runs; every value whose delivery
report carries no error is *acknowledged*, recorded with its partition, offset and time. A consumer reads the
partitions as they grow, noting the value at each offset. Once the faults have healed (every broker up, every
partition led with its full ISR) two fresh consumers read every partition from its start to its end offset,
and :func:`check` compares:

- ``lost``: acknowledged values absent from the final read;
- ``duplicates``: values read at more than one offset;
- ``inconsistent``: an acknowledged offset holding another value, or one offset read with two values (across the
  reads while the faults ran and the final ones);
- ``reordered``: within a partition, two acknowledged values of one producer stored in the opposite order of
  their sequence numbers;
- ``max_unavailable_s``: the longest gap between acknowledgements, overall and in each fault's window, of the
  topic (any partition) and of the worst partition (``partition_unavailable_s``).

Faults are functions on the cluster (``FAULTS``, in :mod:`rill.testing.faults`); each injects, waits, heals.
``python -m rill.testing.chaos --minutes 30`` cycles through them all and prints the report; ``--network netns``
puts the brokers in network namespaces and adds the partition faults.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rill.testing.cluster import TestCluster, cluster
from rill.testing.faults import FAULTS, NETWORK_FAULTS, FaultContext, healed

CLIENT_LOG = logging.getLogger("rill.testing.chaos.client")  # librdkafka's log lines (disconnects, mostly)
CLIENT_LOG.addHandler(logging.NullHandler())


@dataclass(slots=True)
class Ack:
    value: str
    partition: int
    offset: int
    at: float  # time.monotonic() of the delivery report


@dataclass(slots=True)
class FaultWindow:
    name: str
    detail: str
    start: float
    end: float  # healed: every broker back, every partition led with its full ISR (or the wait gave up)
    healed: bool = True


@dataclass
class History:
    """What the clients saw: acknowledgements, failures, reads while the faults ran, and the fault windows."""

    acks: list[Ack] = field(default_factory=list)
    failed: Counter[str] = field(default_factory=Counter)
    fatal: list[str] = field(default_factory=list)
    attempted: int = 0
    observed: dict[tuple[int, int], str] = field(default_factory=dict)  # (partition, offset) -> value
    observed_conflicts: list[tuple[int, int, str, str]] = field(default_factory=list)
    faults: list[FaultWindow] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


# -- clients --------------------------------------------------------------------------------------------


def _producer_config(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        # One request in flight per broker. With more, librdkafka answers OUT_OF_ORDER_SEQUENCE_NUMBER on a
        # request sent behind one that failed (NOT_ENOUGH_REPLICAS, say) by bumping its producer epoch for every
        # partition, and then sends again, at sequence 0 of the new epoch, the messages whose earlier send may
        # have been written (a connection lost to a killed leader): a broker accepts them as new, as Kafka's
        # does, and the log holds them twice (librdkafka issue 4953). Unlike the Java producer, which retries
        # such a request without a new epoch. tests/chaos/test_epoch_bump.py shows both.
        "max.in.flight.requests.per.connection": 1,
        "linger.ms": 5,
        "message.timeout.ms": 120_000,
        "request.timeout.ms": 5_000,
        "retry.backoff.ms": 100,
        "topic.metadata.refresh.interval.ms": 2_000,
        "logger": CLIENT_LOG,
    }


def _produce(
    index: int, bootstrap: str, topic: str, partitions: int, rate: float, history: History, stop: threading.Event
) -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer

    fatal = threading.Event()

    def on_error(err: KafkaError) -> None:
        if err.fatal():
            history.fatal.append(f"p{index}: {err.str()}")
            fatal.set()

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        now = time.monotonic()
        with history.lock:
            if err is None:
                offset = msg.offset()  # None: delivered, at an offset the client was not told
                history.acks.append(Ack(msg.value().decode(), msg.partition(), -1 if offset is None else offset, now))
            else:
                history.failed[err.name()] += 1

    generation = 0
    seq = 0
    while not stop.is_set():
        producer = Producer({**_producer_config(bootstrap), "error_cb": on_error})
        fatal.clear()
        next_at = time.monotonic()
        while not stop.is_set() and not fatal.is_set():
            if len(producer) < 200:
                try:
                    producer.produce(
                        topic,
                        f"p{index}.{generation}-{seq}".encode(),
                        partition=seq % partitions,
                        on_delivery=on_delivery,
                    )
                    seq += 1
                    with history.lock:
                        history.attempted += 1
                except (BufferError, KafkaException):
                    pass
            producer.poll(0)
            next_at += 1.0 / rate
            time.sleep(max(0.0, next_at - time.monotonic()))
        producer.flush(60.0 if not fatal.is_set() else 1.0)
        generation += 1  # a fatal error: a new producer (a new producer id) goes on


class Watcher:
    """Reads every partition from its start while the faults run, noting the value at each offset."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, history: History) -> None:
        self.bootstrap, self.topic, self.partitions, self.history = bootstrap, topic, partitions, history
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="chaos-watcher", daemon=True)

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer(_consumer_config(self.bootstrap))
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
        try:
            while not self.stop.is_set():
                for msg in consumer.consume(500, 0.5):
                    record = _record(msg)
                    if record is not None:
                        _note(self.history, *record)
        finally:
            consumer.close()


def _record(msg: Any) -> tuple[int, int, str] | None:
    """(partition, offset, value) of a consumed message, None for an error event."""
    if msg.error() is not None:
        return None
    return int(msg.partition()), int(msg.offset()), bytes(msg.value()).decode()


def _note(history: History, partition: int, offset: int, value: str) -> None:
    with history.lock:
        seen = history.observed.setdefault((partition, offset), value)
        if seen != value:
            history.observed_conflicts.append((partition, offset, seen, value))


def _consumer_config(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": "chaos-reader",
        "enable.auto.commit": False,
        "topic.metadata.refresh.interval.ms": 2_000,
        "fetch.wait.max.ms": 100,
        "logger": CLIENT_LOG,
    }


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> dict[int, list[tuple[int, str]]]:
    """Every record of the topic, (offset, value) per partition, from the start to the end offsets."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(_consumer_config(bootstrap))
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10.0)[1] for p in range(partitions)}
        out: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                record = _record(msg)
                if record is None:
                    continue
                p, off, value = record
                out[p].append((off, value))
                if off + 1 >= ends[p]:
                    pending.discard(p)
        if pending:
            raise TimeoutError(f"partitions {sorted(pending)} not read to their end offsets {ends} in {timeout}s")
        return out
    finally:
        consumer.close()


# -- checking -------------------------------------------------------------------------------------------


def _max_gap(times: Sequence[float], start: float, end: float) -> float:
    """The longest stretch of [start, end] without an acknowledgement (up to the first one after ``end``)."""
    inside = [t for t in times if start <= t <= end]
    after = [t for t in times if t > end][:1]
    points = [start, *inside, *(after or [end])]
    return max((b - a for a, b in itertools.pairwise(points)), default=0.0)


def check(history: History, reads: Sequence[dict[int, list[tuple[int, str]]]]) -> dict[str, Any]:
    """The report: counts of each anomaly, with a few examples, and unavailability per fault."""
    final = reads[0]
    where: dict[str, list[tuple[int, int]]] = {}
    at: dict[tuple[int, int], str] = {}
    conflicts = list(history.observed_conflicts)
    for p, records in final.items():
        for off, value in records:
            where.setdefault(value, []).append((p, off))
            at[(p, off)] = value
    for other in reads[1:]:
        for p, records in other.items():
            for off, value in records:
                if at.get((p, off), value) != value:
                    conflicts.append((p, off, at[(p, off)], value))
    for (p, off), value in history.observed.items():
        if at.get((p, off), value) != value:
            conflicts.append((p, off, value, at[(p, off)]))
    lost = [a for a in history.acks if a.value not in where]
    # An acknowledged offset holding another value, or an acknowledged value found elsewhere. A delivery
    # report may carry no offset (librdkafka's "persisted" verdict on a retried batch the broker refused as a
    # duplicate or out of order): such a value is only checked for being there.
    unplaced = [a for a in history.acks if a.offset < 0]
    moved = [
        a
        for a in history.acks
        if a.offset >= 0
        and (
            at.get((a.partition, a.offset), a.value) != a.value
            or (a.value in where and (a.partition, a.offset) not in at)
        )
    ]
    duplicates = {v: locs for v, locs in where.items() if len(locs) > 1}
    # Reordering: a producer's acknowledged values in one partition, by offset, must follow their sequence.
    acked = {a.value for a in history.acks}
    last: dict[tuple[str, int], int] = {}
    reordered: list[tuple[int, int, str]] = []
    first_seen: set[str] = set()  # a duplicate's second copy is a duplicate, not a reordering
    for p, records in final.items():
        for off, value in sorted(records):
            if value not in acked or value in first_seen:
                continue
            first_seen.add(value)
            producer, _, seq = value.rpartition("-")
            if last.get((producer, p), -1) > int(seq):
                reordered.append((p, off, value))
            last[(producer, p)] = max(last.get((producer, p), -1), int(seq))
    times = sorted(a.at for a in history.acks)
    start, end = (times[0], times[-1]) if times else (0.0, 0.0)
    by_partition = {p: sorted(a.at for a in history.acks if a.partition == p) for p in final}

    def worst(s: float, e: float) -> float:
        return round(max((_max_gap(ts, s, e) for ts in by_partition.values()), default=0.0), 2)

    return {
        "attempted": history.attempted,
        "acknowledged": len(history.acks),
        "failed": dict(history.failed),
        # Neither acknowledged nor failed when the producers stopped: written or not, nothing was promised.
        "indeterminate": history.attempted - len(history.acks) - sum(history.failed.values()),
        "fatal_producer_errors": len(history.fatal),
        "acknowledged_without_offset": len(unplaced),
        "read": sum(len(r) for r in final.values()),
        "lost": len(lost),
        "duplicates": len(duplicates),
        "inconsistent": len(conflicts) + len(moved),
        "reordered": len(reordered),
        "max_unavailable_s": round(_max_gap(times, start, end), 2),
        "partition_unavailable_s": worst(start, end),
        "faults": [
            {
                "fault": f.name,
                "target": f.detail,
                "healed": f.healed,
                "heal_s": round(f.end - f.start, 1),
                "max_unavailable_s": round(_max_gap(times, f.start, f.end), 2),
                "partition_unavailable_s": worst(f.start, f.end),
            }
            for f in history.faults
        ],
        "examples": {
            "lost": [(a.value, a.partition, a.offset) for a in lost[:5]],
            "duplicates": list(duplicates.items())[:5],
            "inconsistent": conflicts[:5]
            + [(a.partition, a.offset, a.value, at.get((a.partition, a.offset))) for a in moved[:5]],
            "reordered": reordered[:5],
            "acknowledged_without_offset": [(a.value, a.partition) for a in unplaced[:5]],
            "fatal_producer_errors": history.fatal[:5],
        },
    }


# -- a run ----------------------------------------------------------------------------------------------


def create_topic(c: TestCluster, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    new = NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([new])[topic].result(30)
    c.wait_for(lambda: healed(c, topic, partitions), 30.0, f"{topic} led with full ISRs")


@contextlib.contextmanager
def _workload(
    c: TestCluster, topic: str, partitions: int, producers: int, rate: float, history: History
) -> Iterator[None]:
    stop = threading.Event()
    threads = [
        threading.Thread(
            target=_produce,
            args=(i, c.bootstrap_servers, topic, partitions, rate, history, stop),
            name=f"chaos-producer-{i}",
            daemon=True,
        )
        for i in range(producers)
    ]
    watcher = Watcher(c.bootstrap_servers, topic, partitions, history)
    watcher.thread.start()
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(90.0)
        watcher.stop.set()
        watcher.thread.join(10.0)


def run(
    c: TestCluster,
    schedule: Sequence[str],
    *,
    topic: str = "chaos",
    partitions: int = 3,
    producers: int = 2,
    rate: float = 50.0,
    down_s: float = 6.0,
    quiet_s: float = 3.0,
    seed: int | None = None,
    heal_timeout: float = 120.0,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Write while the faults named in ``schedule`` run one after another, then read back and check."""
    rng = random.Random(seed)
    ctx = FaultContext(topic, partitions, rng, down_s)
    history = History()
    create_topic(c, topic, partitions)
    with _workload(c, topic, partitions, producers, rate, history):
        time.sleep(quiet_s)
        for name in schedule:
            start = time.monotonic()
            detail = FAULTS[name](c, ctx)
            ok = True
            try:
                c.wait_for(lambda: healed(c, topic, partitions), heal_timeout, "healing")
            except TimeoutError:
                ok = False
            history.faults.append(FaultWindow(name, detail, start, time.monotonic(), ok))
            log(
                f"{name} ({detail}): {'healed' if ok else 'NOT healed'} after {time.monotonic() - start:.1f} s, "
                f"{len(history.acks)} acknowledged so far"
            )
            time.sleep(quiet_s)
    reads = [read_all(c.bootstrap_servers, topic, partitions) for _ in range(2)]
    return check(history, reads)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rill.testing.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="how long to cycle through the faults")
    parser.add_argument(
        "--faults", default=None, help="comma-separated fault names (default: every fault the network allows)"
    )
    parser.add_argument(
        "--network",
        choices=("loopback", "netns"),
        default="loopback",
        help="netns: brokers in network namespaces (root only), with the partition faults",
    )
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=50.0, help="values per second per producer")
    parser.add_argument("--down", type=float, default=6.0, help="seconds a fault lasts")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    if args.faults is None:
        names = [n for n in FAULTS if args.network == "netns" or n not in NETWORK_FAULTS]
    else:
        names = [n for n in args.faults.split(",") if n]
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        parser.error(f"unknown faults {unknown}; known: {', '.join(FAULTS)}")
    if args.network != "netns" and any(n in NETWORK_FAULTS for n in names):
        parser.error(f"{', '.join(n for n in names if n in NETWORK_FAULTS)} need --network netns")
    zk_nodes = 3 if any(n.startswith("kill_zookeeper") for n in names) else 1
    rng = random.Random(args.seed)
    per_fault = args.down + 20.0  # a rough cost of one fault, with healing and quiet time
    count = max(1, int(args.minutes * 60 / per_fault))
    schedule = [names[i % len(names)] for i in range(count)]
    rng.shuffle(schedule)
    with cluster(3, zookeeper_nodes=zk_nodes, network=args.network) as c:
        report = run(
            c,
            schedule,
            partitions=args.partitions,
            producers=args.producers,
            rate=args.rate,
            down_s=args.down,
            seed=args.seed,
        )
    print(json.dumps(report, indent=2, default=str))
    bad = report["lost"] or report["inconsistent"] or report["duplicates"] or report["reordered"]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
