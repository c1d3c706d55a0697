"""Steadiness of consumption: one topic read again and again from offset 0, Rill and Tansu alternating.

`python bench/consume_steady.py [--records N] [--size B] [--repeat N] [--brokers rill,tansu] [--consumer-conf K=V]`

Each broker gets one one-partition topic of `--records` records (1 KiB by default, produced once with
confluent-kafka, acks=1); then a fresh confluent-kafka consumer process with librdkafka's defaults (unless
`--consumer-conf` says otherwise) assigns offset 0 and reads the topic to its end, `--repeat` times per broker,
the brokers alternating. Prints every read's MB/s, the spread per broker, and each pair's ratio.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.brokers import BrokerProcess, free_port, rill_spec, tansu_spec
from bench.harness import RunFailed, Target, check_errors, cpu_seconds, create_topic, run_worker, topic_name

MB = 1e6
# The worker sets a 10 ms fetch.queue.backoff.ms for the suite; this benchmark reads with librdkafka's default.
DEFAULT_CONSUMER = {"fetch.queue.backoff.ms": "1000"}


def fill(target: Target, records: int, size: int) -> str:
    topic = topic_name("steady")
    create_topic(target, topic, 1)
    res = run_worker(
        "produce",
        {
            "bootstrap": target.bootstrap,
            "topic": topic,
            "size": size,
            "acks": "1",
            "compression": "none",
            "seconds": 600,
            "messages": records,
            "flush_timeout": 120,
            "producer_conf": {},
        },
        700,
    )
    check_errors(res, "produce")
    if int(res["messages"]) < records:
        raise RunFailed(f"produced {res['messages']} of {records}")
    return topic


def read(target: Target, topic: str, records: int, size: int, conf: dict[str, str]) -> tuple[float, float]:
    assert target.broker is not None and target.broker.pid is not None
    cpu0 = cpu_seconds(target.broker.pid)
    res = run_worker(
        "consume",
        {
            "bootstrap": target.bootstrap,
            "topic": topic,
            "size": size,
            "messages": records,
            "seconds": 120,
            "consumer_conf": conf,
        },
        180,
    )
    check_errors(res, "consume")
    cpu1 = cpu_seconds(target.broker.pid)
    mb = res["bytes"] / MB
    return mb / res["seconds"], (sum(cpu1) - sum(cpu0)) * 1e6 / mb


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=6)
    ap.add_argument("--brokers", default="rill,tansu")
    ap.add_argument("--consumer-conf", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    conf = {**DEFAULT_CONSUMER, **dict(item.split("=", 1) for item in args.consumer_conf)}
    work = Path(tempfile.mkdtemp(prefix="rill-steady-"))
    targets: list[Target] = []
    try:
        for name in args.brokers.split(","):
            port = free_port()
            spec = tansu_spec(port) if name == "tansu" else rill_spec(port, work / f"data-{name}")
            proc = BrokerProcess(spec, work / f"{name}.log")
            proc.start()
            targets.append(Target(name, proc))
        topics = {t.name: fill(t, args.records, args.size) for t in targets}
        rates: dict[str, list[float]] = {t.name: [] for t in targets}
        cpus: dict[str, list[float]] = {t.name: [] for t in targets}
        for rnd in range(args.repeat):
            for t in targets:
                mbps, cpu = read(t, topics[t.name], args.records, args.size, conf)
                rates[t.name].append(mbps)
                cpus[t.name].append(cpu)
                print(f"read {rnd + 1}  {t.name:6} {mbps:8.1f} MB/s  broker {cpu:6.0f} us CPU/MB", flush=True)
        print(f"\n{args.records:,} records of {args.size} B, read {args.repeat} times; consumer {conf}")
        print("| broker | reads (MB/s) | min | median | max | broker CPU us/MB (median) |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, rs in rates.items():
            print(
                f"| {name} | {', '.join(f'{r:.0f}' for r in rs)} | {min(rs):.0f} | {statistics.median(rs):.0f} | "
                f"{max(rs):.0f} | {statistics.median(cpus[name]):.0f} |"
            )
        if len(targets) == 2:
            a, b = (t.name for t in targets)
            ratios = [x / y for x, y in zip(rates[a], rates[b], strict=True)]
            print(f"\n{a}/{b} per pair: {', '.join(f'{r:.2f}x' for r in ratios)} (min {min(ratios):.2f}x)")
        return 0
    finally:
        for t in targets:
            if t.broker is not None:
                t.broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
