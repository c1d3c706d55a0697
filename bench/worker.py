"""Client side of the workloads, run in its own process: `python -m bench.worker KIND JSON-PARAMS`.

Every worker is bounded in time, prints `READY` once it is set up (consumers that must be in place before
a producer starts), and ends by printing one line `RESULT {json}`. The client is confluent-kafka
(librdkafka); all payloads are prebuilt so the Python loop does as little as possible per record.
"""

from __future__ import annotations

import json
import random
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition

Params = dict[str, Any]
Result = dict[str, Any]

_WORDS = ("event", "stream", "log", "offset", "partition", "consumer", "producer", "broker", "record",
          "topic", "segment", "index", "leader", "replica", "commit", "batch", "key", "value", "timestamp")
LATENCY_HEADER = struct.Struct(">qq")  # send time (CLOCK_MONOTONIC ns), sequence number
CONSUME_CALL_BYTES = 8 * 1024 * 1024
"""The consume worker takes at most this many bytes of records per ``consume()`` call (and at most 10,000
records). 10,000 records of 10 KiB are 100 MB, more than librdkafka's 64 MiB prefetch queue: such a call
waited for fetches, then built 100 MB of Python objects while the full queue held the fetcher back."""


def payloads(size: int, count: int = 64, seed: int = 7) -> list[bytes]:
    """JSON-ish values of exactly `size` bytes that compress a few times, like real events do."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        parts = [f'{{"id":{i},"n":{rng.randrange(10**9)}']
        while sum(map(len, parts)) < size:
            parts.append(f',"{rng.choice(_WORDS)}":"{rng.choice(_WORDS)}-{rng.randrange(100000)}"')
        out.append("".join(parts).encode()[:size])
    return out


def _producer(params: Params, errors: list[str], extra: dict[str, Any] | None = None) -> Producer:
    def on_error(err: KafkaError | None, _msg: Message) -> None:
        if err is not None and len(errors) < 20:
            errors.append(str(err))

    conf: dict[str, Any] = {
        "bootstrap.servers": params["bootstrap"],
        "acks": str(params.get("acks", "1")),
        "compression.type": params.get("compression", "none"),
        "linger.ms": params.get("linger_ms", 5),
        "queue.buffering.max.kbytes": 65536,
        "delivery.report.only.error": True,
        "on_delivery": on_error,
        "error_cb": lambda e: errors.append(f"client: {e}") if len(errors) < 20 else None,
    }
    conf.update(extra or {})
    conf.update(params.get("producer_conf", {}))
    return Producer(conf)


def produce(params: Params) -> Result:
    """Produce as fast as possible for `seconds` (or until `messages`), then flush; count what was acked."""
    errors: list[str] = []
    size = int(params["size"])
    values = payloads(size)
    limit_msgs = int(params.get("messages", 0)) or (1 << 62)
    partitions = int(params.get("partitions", 0))
    topic = params["topic"]
    p = _producer(params, errors)
    p.list_topics(topic, timeout=10)
    print("READY", flush=True)
    t0 = time.monotonic()
    cpu0 = time.process_time()
    deadline = t0 + float(params["seconds"])
    if partitions:
        sent = _produce_round_robin(p, topic, values, partitions, limit_msgs, deadline)
    else:
        sent = _produce_batches(p, topic, values, limit_msgs, deadline)
    unacked = p.flush(float(params.get("flush_timeout", 60)))
    elapsed = time.monotonic() - t0
    acked = sent - unacked - len(errors)
    return {"messages": acked, "bytes": acked * size, "seconds": elapsed, "sent": sent,
            "unacked": unacked, "client_cores": _cores(cpu0, elapsed), "errors": errors[:5]}


def _cores(cpu0: float, elapsed: float) -> float:
    """CPU time of this client process (librdkafka's threads included) since ``cpu0``, per second of
    ``elapsed``: 1.0 is one core kept busy, the most a client mostly serialized on its own thread gets."""
    return (time.process_time() - cpu0) / elapsed if elapsed > 0 else 0.0


def _produce_round_robin(p: Producer, topic: str, values: list[bytes], partitions: int, limit: int,
                         deadline: float) -> int:
    """One ``produce`` call per record, record i to partition i mod ``partitions``; returns how many queued."""
    sent = 0
    nvals = len(values)
    while sent < limit and time.monotonic() < deadline:
        chunk = min(1000, limit - sent)
        i = 0
        while i < chunk:
            try:
                p.produce(topic, values[(sent + i) % nvals], partition=(sent + i) % partitions)
                i += 1
            except BufferError:
                p.poll(0.002)
                if time.monotonic() > deadline:
                    break
        sent += i
        p.poll(0)
    return sent


def _produce_batches(p: Producer, topic: str, values: list[bytes], limit: int, deadline: float) -> int:
    """Hand librdkafka 1,024 records per ``produce_batch`` call (one Python call per chunk, not per
    record, so at 100 B the client loop costs less); returns how many were queued."""
    chunk = [{"value": values[i % len(values)]} for i in range(1024)]
    sent = 0
    while sent < limit and time.monotonic() < deadline:
        batch = chunk if limit - sent >= len(chunk) else chunk[: limit - sent]
        queued = p.produce_batch(topic, batch)
        sent += queued
        if queued < len(batch):  # the queue is full: the rest were marked with "_error" and not queued
            for m in batch:
                m.pop("_error", None)
            p.poll(0.002)
        else:
            p.poll(0)
    return sent


def _consumer(params: Params, extra: dict[str, Any] | None = None) -> Consumer:
    conf: dict[str, Any] = {
        "bootstrap.servers": params["bootstrap"],
        "group.id": params.get("group", "rill-bench"),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # librdkafka pauses fetching for fetch.queue.backoff.ms (default 1 s) whenever its 64 MiB prefetch
        # queue is full; with the default, consume rows measure that pause, not the broker (same for both).
        "fetch.queue.backoff.ms": 10,
    }
    conf.update(extra or {})
    conf.update(params.get("consumer_conf", {}))
    return Consumer(conf)


def consume(params: Params) -> Result:
    """Read `messages` records from offset 0 of `partitions` partitions; time from first to last record.

    The clock starts when the first record arrives, taken alone (``consume(1)``), so at most the first fetch
    responses are in the consumer's queue at that moment; everything after it is fetched while the clock runs.
    """
    topic = params["topic"]
    expected = int(params["messages"])
    per_call = min(10000, max(1, CONSUME_CALL_BYTES // int(params["size"])))
    c = _consumer(params)
    c.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(int(params.get("partitions", 1)))])
    print("READY", flush=True)
    got = 0
    errors: list[str] = []
    start: float | None = None
    cpu0 = 0.0
    deadline = time.monotonic() + float(params["seconds"])
    while start is None and time.monotonic() < deadline:
        first = c.consume(1, 0.05)
        if first:
            start = time.monotonic()
            cpu0 = time.process_time()
            if first[0].error() is not None:
                errors.append(str(first[0].error()))
            else:
                got += 1
    while got < expected and time.monotonic() < deadline:
        for m in c.consume(per_call, 0.2):
            if m.error() is not None:
                errors.append(str(m.error()))
            else:
                got += 1
    end = time.monotonic()
    cores = _cores(cpu0, end - start) if start is not None else 0.0
    c.close()
    if got < expected:
        errors.append(f"only {got} of {expected} records within {params['seconds']}s")
    return {"messages": got, "bytes": got * int(params["size"]),
            "seconds": end - start if start is not None else 0.0, "client_cores": cores, "errors": errors[:5]}


def latency_consumer(params: Params) -> Result:
    """Receive the paced producer's records, histogram send-to-receive latency in microseconds."""
    from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

    topic = params["topic"]
    expected = int(params["messages"])
    warmup = int(params.get("warmup", 0))
    c = _consumer(params)
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    hist = HdrHistogram(1, 60_000_000, 3)
    t_ready = time.monotonic() + 0.5
    while time.monotonic() < t_ready:
        c.poll(0.05)
    print("READY", flush=True)
    got = 0
    errors: list[str] = []
    deadline = time.monotonic() + float(params["seconds"])
    unpack = LATENCY_HEADER.unpack_from
    while got < expected and time.monotonic() < deadline:
        # Take whatever is already fetched without waiting; block (for one record) only when idle.
        batch = c.consume(1000, 0)
        if not batch:
            m = c.poll(0.1)
            if m is None:
                continue
            batch = [m]
        now = time.monotonic_ns()
        for m in batch:
            if m.error() is not None:
                errors.append(str(m.error()))
                continue
            got += 1
            sent_ns, seq = unpack(m.value() or bytes(LATENCY_HEADER.size))
            if seq >= warmup:
                hist.record_value(max(1, (now - sent_ns) // 1000))
    c.close()
    if got < expected:
        errors.append(f"only {got} of {expected} records within {params['seconds']}s")
    pct = {f"p{q}": hist.get_value_at_percentile(q) / 1000.0 for q in (50, 99, 99.9)}
    return {"messages": got, "samples": hist.get_total_count(), "max_ms": hist.get_max_value() / 1000.0,
            **pct, "errors": errors[:5]}


def latency_producer(params: Params) -> Result:
    """Send `rate` records/s of `size` bytes for `seconds`, each stamped with its send time."""
    errors: list[str] = []
    size = int(params["size"])
    rate = float(params["rate"])
    total = int(rate * float(params["seconds"]))
    pad = payloads(size - LATENCY_HEADER.size, 1)[0]
    p = _producer({**params, "linger_ms": params.get("linger_ms", 1)}, errors)
    topic = params["topic"]
    p.list_topics(topic, timeout=10)
    pack = LATENCY_HEADER.pack
    t0 = time.monotonic()
    hard_deadline = t0 + 2 * float(params["seconds"]) + 5
    t0_ns = time.monotonic_ns()
    seq = 0
    while seq < total:
        due = min(total, int((time.monotonic_ns() - t0_ns) * rate / 1e9) + 1)
        while seq < due:
            try:
                p.produce(topic, pack(time.monotonic_ns(), seq) + pad, partition=0)
                seq += 1
            except BufferError:
                p.poll(0.001)
                if time.monotonic() > hard_deadline:
                    break
        if time.monotonic() > hard_deadline:
            errors.append("producer could not keep the rate")
            break
        p.poll(0)
        if seq >= due:
            time.sleep(0.0002)
    unacked = p.flush(30)
    return {"messages": seq - unacked, "seconds": time.monotonic() - t0, "unacked": unacked,
            "errors": errors[:5]}


def connections(params: Params) -> Result:
    """`producers` separate producer clients (one connection each) producing together for `seconds`."""
    errors: list[str] = []
    size = int(params["size"])
    values = payloads(size)
    topic = params["topic"]
    n = int(params["producers"])
    t0 = time.monotonic()
    clients = [_producer(params, errors, {"linger.ms": 5, "queue.buffering.max.kbytes": 4096})
               for _ in range(n)]
    for i, p in enumerate(clients):
        p.produce(topic, values[i % len(values)])
    for p in clients:
        p.flush(30)
    connect_s = time.monotonic() - t0
    print("READY", flush=True)
    sent = 0
    t1 = time.monotonic()
    deadline = t1 + float(params["seconds"])
    while time.monotonic() < deadline:
        for i, p in enumerate(clients):
            for _ in range(10):
                try:
                    p.produce(topic, values[(sent + i) % len(values)])
                    sent += 1
                except BufferError:
                    break
            p.poll(0)
    unacked = sum(p.flush(30) for p in clients)
    elapsed = time.monotonic() - t1
    acked = sent - unacked - len(errors)
    return {"messages": acked, "bytes": acked * size, "seconds": elapsed, "connect_seconds": connect_s,
            "errors": errors[:5]}


class _Member:
    """One group member polling in its own thread, recording when it was last assigned partitions."""

    def __init__(self, params: Params, index: int) -> None:
        self.index = index
        self.assigned_at = 0.0
        self.assignment: list[int] = []
        self.stopping = threading.Event()
        self.consumer = _consumer(params, {
            "group.id": params["group"],
            "session.timeout.ms": int(params.get("session_timeout_ms", 10000)),
            "heartbeat.interval.ms": int(params.get("heartbeat_ms", 500)),
            "partition.assignment.strategy": "range",
        })
        self.consumer.subscribe([params["topic"]], on_assign=self._on_assign)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _on_assign(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        self.assignment = [tp.partition for tp in parts]
        self.assigned_at = time.monotonic()

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.consumer.poll(0.05)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        self.consumer.close()


def _wait_stable(members: list[_Member], partitions: int, since: float, deadline: float) -> float | None:
    """Time at which every member had been (re)assigned after `since` and the assignment covers all."""
    while time.monotonic() < deadline:
        if all(m.assigned_at > since for m in members):
            owned = sorted(p for m in members for p in m.assignment)
            if owned == list(range(partitions)):
                return max(m.assigned_at for m in members)
        time.sleep(0.01)
    return None


def rebalance(params: Params) -> Result:
    """Form a group of `members`-1, then time the join of the last member and the leave of one member."""
    n = int(params["members"])
    parts = int(params["partitions"])
    budget = float(params["seconds"])
    members: list[_Member] = []
    errors: list[str] = []
    out: Result = {"errors": errors}
    try:
        t0 = time.monotonic()
        members = [_Member(params, i) for i in range(n - 1)]
        formed = _wait_stable(members, parts, t0, t0 + budget)
        if formed is None:
            errors.append(f"group of {n - 1} did not form within {budget}s")
            return out
        out["form_seconds"] = formed - t0
        print("READY", flush=True)
        time.sleep(0.5)
        t1 = time.monotonic()
        members.append(_Member(params, n - 1))
        joined = _wait_stable(members, parts, t1, t1 + budget)
        if joined is None:
            errors.append(f"join rebalance did not finish within {budget}s")
            return out
        out["join_seconds"] = joined - t1
        if params.get("skip_leave"):
            return out
        time.sleep(0.5)
        t2 = time.monotonic()
        leaver = members.pop(0)
        leaver.close()
        left = _wait_stable(members, parts, t2, t2 + budget)
        if left is None:
            errors.append(f"leave rebalance did not finish within {budget}s")
            return out
        out["leave_seconds"] = left - t2
        return out
    finally:
        closers = [threading.Thread(target=m.close, daemon=True) for m in members]
        for t in closers:
            t.start()
        for t in closers:
            t.join(15)


WORKERS: dict[str, Callable[[Params], Result]] = {
    "produce": produce,
    "consume": consume,
    "latency_consumer": latency_consumer,
    "latency_producer": latency_producer,
    "connections": connections,
    "rebalance": rebalance,
}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in WORKERS:
        print(f"usage: python -m bench.worker {{{','.join(WORKERS)}}} JSON-PARAMS", file=sys.stderr)
        return 2
    try:
        result = WORKERS[argv[0]](json.loads(argv[1]))
    except Exception as e:  # reported to the runner as a failed run, never a hang
        result = {"errors": [f"{type(e).__name__}: {e}"], "failed": True}
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
