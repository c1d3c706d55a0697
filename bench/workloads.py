"""The workload catalogue: what each workload does to one broker and which figures it yields.

A workload's `run(target, settings)` returns {metric key: value}; the suite pairs runs against Rill and
Tansu (A/B/A/B) and reports medians. Clients always run in worker processes separate from the suite and
from each other (producer and consumer never share a process).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.brokers import BrokerProcess, BrokerUnavailable, free_port, rill_spec
from bench.harness import (
    BrokerCpu,
    RunFailed,
    Settings,
    Target,
    WorkerProc,
    check_errors,
    create_topic,
    maybe_delete_topic,
    run_worker,
    topic_name,
)

MB = 1e6
SIZES = {"100b": 100, "1k": 1024, "10k": 10240}
ACKS = {"acks1": "1", "acksall": "all"}
COMPRESSIONS = ("none", "lz4", "zstd")


@dataclass(frozen=True, slots=True)
class Metric:
    """One row of the table. `limit` names the raw limit the figure is compared with, if any."""

    key: str
    label: str
    unit: str
    higher_is_better: bool = True
    limit: str | None = None
    compared: bool = True  # False: a figure for context (no ratio, not "better" either way)


Figures = dict[str, float | str]  # a str is why that one figure is missing from an otherwise good run
Runner = Callable[[Target, Settings], Figures]


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    metrics: tuple[Metric, ...]
    run: Runner
    rill_only: str | None = None  # why the peer has no figure (e.g. it keeps data in memory)
    in_quick: bool = True


def _throughput(result: dict[str, float]) -> float:
    if result["seconds"] <= 0 or result["messages"] <= 0:
        raise RunFailed("no records moved")
    return result["bytes"] / result["seconds"] / MB


def _settle_disk() -> None:
    """Write back every dirty page left by earlier runs (a deleted Rill topic's segments linger for
    file.delete.delay.ms), so a timed write starts from the same clean state for every broker."""
    os.sync()


def _produce(size: int, acks: str, compression: str) -> Runner:
    def run(target: Target, s: Settings) -> Figures:
        topic = topic_name("produce")
        create_topic(target, topic, 1)
        try:
            _settle_disk()
            cpu = BrokerCpu(target)
            res = run_worker("produce", {"bootstrap": target.bootstrap, "topic": topic, "size": size,
                                         "acks": acks, "compression": compression,
                                         "seconds": s.produce_seconds, "flush_timeout": s.flush_seconds},
                             s.produce_seconds + 90)
            check_errors(res, "produce")
            return {"mbps": _throughput(res), "msgs": res["messages"] / res["seconds"],
                    "cpu_us_per_mb": cpu.per_mb(res["bytes"]), "client_cores": res["client_cores"]}
        finally:
            maybe_delete_topic(target, topic)
    return run


def _prefill(target: Target, topic: str, size: int, total_bytes: int, partitions: int = 0) -> int:
    """Write about `total_bytes` of `size`-byte records (acks=1, no compression); returns how many."""
    messages = max(1000, total_bytes // size)
    res = run_worker("produce", {"bootstrap": target.bootstrap, "topic": topic, "size": size, "acks": "1",
                                 "messages": messages, "seconds": 60, "partitions": partitions}, 150)
    check_errors(res, "prefill")
    if res["messages"] <= 0:
        raise RunFailed("prefill wrote nothing")
    return int(res["messages"])


def _consume(size: int) -> Runner:
    def run(target: Target, s: Settings) -> Figures:
        topic = topic_name("consume")
        create_topic(target, topic, 1)
        try:
            # 10 KiB records get 4x the prefill so the run lasts about 2 s at 1 GB/s: shorter runs mostly
            # measure the consumer process touching its fresh 64 MiB prefetch queue for the first time.
            count = _prefill(target, topic, size, s.prefill_bytes * (4 if size >= 10240 else 1))
            # Write back the prefill's dirty pages now (both targets), so that the kernel's writeback of the
            # previous phase does not run during the consume; the records stay in the page cache.
            _settle_disk()
            cpu = BrokerCpu(target)
            res = run_worker("consume", {"bootstrap": target.bootstrap, "topic": topic, "size": size,
                                         "messages": count, "seconds": 60}, 90)
            check_errors(res, "consume")
            return {"mbps": _throughput(res), "msgs": res["messages"] / res["seconds"],
                    "cpu_us_per_mb": cpu.per_mb(res["bytes"]), "client_cores": res["client_cores"]}
        finally:
            maybe_delete_topic(target, topic)
    return run


def _consume_repeated(records: int, reads: int) -> Runner:
    """One topic of 1 KiB records read `reads` times from offset 0, each by a fresh consumer with librdkafka's
    default settings (the suite's consumer otherwise sets fetch.queue.backoff.ms=10): the spread of the reads."""
    def run(target: Target, s: Settings) -> Figures:
        topic = topic_name("consume-repeated")
        create_topic(target, topic, 1)
        try:
            count = _prefill(target, topic, 1024, records * 1024)
            _settle_disk()
            rates = []
            for _ in range(reads):
                res = run_worker("consume", {"bootstrap": target.bootstrap, "topic": topic, "size": 1024,
                                             "messages": count, "seconds": 60,
                                             "consumer_conf": {"fetch.queue.backoff.ms": "1000"}}, 90)
                check_errors(res, "consume")
                rates.append(_throughput(res))
            rates.sort()
            return {"min": rates[0], "median": rates[len(rates) // 2], "max": rates[-1]}
        finally:
            maybe_delete_topic(target, topic)
    return run


def _latency(rate: int) -> Runner:
    def run(target: Target, s: Settings) -> Figures:
        topic = topic_name("latency")
        create_topic(target, topic, 1)
        total = int(rate * s.latency_seconds)
        common = {"bootstrap": target.bootstrap, "topic": topic, "size": 1024, "rate": rate,
                  "seconds": s.latency_seconds, "acks": "1"}
        consumer = WorkerProc("latency_consumer", {**common, "messages": total, "warmup": rate // 2,
                                                   "seconds": s.latency_seconds + 30})
        try:
            consumer.wait_for("READY", 30)
            prod = run_worker("latency_producer", common, 2 * s.latency_seconds + 60)
            check_errors(prod, "latency producer")
            res = consumer.result(s.latency_seconds + 40)
            check_errors(res, "latency consumer")
            # The producer must have kept the rate, or the figures measure the client, not the broker.
            achieved = prod["messages"] / prod["seconds"]
            if achieved < 0.9 * rate:
                raise RunFailed(f"producer reached only {achieved:,.0f} of {rate:,} msg/s")
            return {"p50": res["p50"], "p99": res["p99"], "p99.9": res["p99.9"], "rate": achieved}
        finally:
            consumer.kill()
            maybe_delete_topic(target, topic)
    return run


def _partitions(count: int) -> Runner:
    def run(target: Target, s: Settings) -> Figures:
        topic = topic_name("partitions")
        created = create_topic(target, topic, count, timeout=120)
        try:
            _settle_disk()
            res = run_worker("produce", {"bootstrap": target.bootstrap, "topic": topic, "size": 1024,
                                         "acks": "1", "seconds": s.produce_seconds, "partitions": count,
                                         "messages": 50 * count if s.quick else 0,
                                         "flush_timeout": s.flush_seconds},
                             s.produce_seconds + 90)
            check_errors(res, "produce")
            out: Figures = {"create_s": created, "produce_mbps": _throughput(res)}
            cons = run_worker("consume", {"bootstrap": target.bootstrap, "topic": topic, "size": 1024,
                                          "messages": res["messages"], "partitions": count,
                                          "seconds": 60}, 90)
            check_errors(cons, "consume")
            out["consume_mbps"] = _throughput(cons)
            return out
        finally:
            maybe_delete_topic(target, topic)
    return run


def _connections(producers: int) -> Runner:
    def run(target: Target, s: Settings) -> Figures:
        topic = topic_name("connections")
        create_topic(target, topic, 10)
        try:
            _settle_disk()
            res = run_worker("connections", {"bootstrap": target.bootstrap, "topic": topic, "size": 1024,
                                             "producers": producers, "seconds": s.produce_seconds},
                             s.produce_seconds + 120)
            check_errors(res, "connections")
            return {"mbps": _throughput(res), "connect_s": res["connect_seconds"]}
        finally:
            maybe_delete_topic(target, topic)
    return run


def _rebalance(members: int) -> Runner:
    def run(target: Target, s: Settings) -> Figures:
        topic = topic_name("rebalance")
        create_topic(target, topic, members)
        try:
            res = run_worker("rebalance", {"bootstrap": target.bootstrap, "topic": topic,
                                           "group": topic, "members": members, "partitions": members,
                                           "seconds": 30, "skip_leave": s.quick}, 120)
            check_errors(res, "rebalance")
            keys = {"join_s": "join_seconds", "leave_s": "leave_seconds", "form_s": "form_seconds"}
            return {k: float(res[v]) for k, v in keys.items() if v in res}
        finally:
            maybe_delete_topic(target, topic)
    return run


def _restart(target: Target, s: Settings) -> Figures:
    """A private Rill broker: fill it with unflushed log, SIGKILL it, time the restart to ready."""
    run_dir = s.workdir / f"restart-{topic_name('r')}"
    broker = BrokerProcess(rill_spec(free_port(), run_dir / "data"), s.workdir / "rill-restart.log")
    private = Target("rill", broker)
    try:
        try:
            broker.start()
        except BrokerUnavailable as e:
            raise RunFailed(f"rill did not start: {e}") from e
        topic = topic_name("restart")
        create_topic(private, topic, 1)
        written = _prefill(private, topic, 10240, s.restart_bytes)
        private.admin = None
        broker.kill()
        try:
            ready = broker.start(timeout=300)
        except BrokerUnavailable as e:
            raise RunFailed(f"restart failed: {e}") from e
        try:
            serving: float | str = ready + _wait_high_watermark(private.bootstrap, topic, written)
        except RunFailed as e:
            serving = str(e)
        return {"ready_s": ready, "serving_s": serving}
    finally:
        broker.stop()
        _remove_tree(run_dir)


def _wait_high_watermark(bootstrap: str, topic: str, expected: int, timeout: float = 30.0) -> float:
    import time

    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "rill-bench-restart", "log_level": 3})
    t0 = time.monotonic()
    try:
        last, error = -1, "no answer"
        while time.monotonic() - t0 < timeout:
            try:
                _low, last = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
            except Exception as e:
                error = str(e)
                time.sleep(0.05)
                continue
            if last >= expected:
                return time.monotonic() - t0
            raise RunFailed(f"after SIGKILL the log ends at {last}, {expected} records were acked")
        raise RunFailed(f"high watermark not served within {timeout:.0f}s: {error}")
    finally:
        c.close()


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _cpu_metrics(label: str) -> tuple[Metric, Metric]:
    # Where the client bounds the throughput (100 B records), the broker's CPU is what tells the brokers
    # apart, and the client's shows the bound: near 1 core, the client process is what limits the row.
    return (Metric("cpu_us_per_mb", f"{label}: broker CPU", "us per MB", higher_is_better=False),
            Metric("client_cores", f"{label}: client CPU", "cores", compared=False))


def catalogue(restart_bytes: int = 1 << 30) -> list[Workload]:
    out: list[Workload] = []
    for sname, size in SIZES.items():
        for aname, acks in ACKS.items():
            for comp in COMPRESSIONS:
                label = f"produce {sname} {aname.replace('acks', 'acks=')} {comp}"
                out.append(Workload(f"produce-{sname}-{aname}-{comp}",
                                    (Metric("mbps", label, "MB/s", limit="produce"), *_cpu_metrics(label)),
                                    _produce(size, acks, comp), in_quick=comp == "none" or acks == "1"))
    for sname, size in SIZES.items():
        label = f"consume {sname}"
        out.append(Workload(f"consume-{sname}",
                            (Metric("mbps", label, "MB/s", limit="consume"), *_cpu_metrics(label)),
                            _consume(size)))
    out.append(Workload("consume-1k-repeated", tuple(
        Metric(q, f"consume 1k read 6 times, librdkafka defaults: {q} read", "MB/s", limit="consume")
        for q in ("min", "median", "max")), _consume_repeated(300_000, 6), in_quick=False))
    for rate in (10_000, 50_000):
        tag = f"{rate // 1000}k"
        out.append(Workload(f"latency-{tag}", tuple(
            Metric(q, f"e2e latency {tag} msg/s 1k {q}", "ms", higher_is_better=False, limit="rtt")
            for q in ("p50", "p99", "p99.9")), _latency(rate)))
    out.append(Workload("partitions-1000", (
        Metric("create_s", "create 1000-partition topic", "s", higher_is_better=False),
        Metric("produce_mbps", "produce 1k over 1000 partitions", "MB/s", limit="produce"),
        Metric("consume_mbps", "consume 1k over 1000 partitions", "MB/s", limit="consume"),
    ), _partitions(1000)))
    out.append(Workload("connections-200", (
        Metric("connect_s", "200 producers: all connected + acked", "s", higher_is_better=False),
        Metric("mbps", "200 producers 1k produce", "MB/s", limit="produce"),
    ), _connections(200)))
    out.append(Workload("rebalance-10", (
        Metric("form_s", "group of 9 forms from empty", "s", higher_is_better=False),
        Metric("join_s", "group rebalance: 10th member joins", "s", higher_is_better=False),
        Metric("leave_s", "group rebalance: 1 of 10 leaves", "s", higher_is_better=False),
    ), _rebalance(10)))
    mib = restart_bytes >> 20
    out.append(Workload("restart-sigkill", (
        Metric("ready_s", f"restart to ready after SIGKILL, {mib} MiB unflushed", "s",
               higher_is_better=False),
        Metric("serving_s", f"restart to serving, {mib} MiB unflushed", "s", higher_is_better=False),
    ), _restart, rill_only="Tansu keeps data in memory"))
    return out
