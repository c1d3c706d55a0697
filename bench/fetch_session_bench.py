"""The brokers' CPU on a 3-broker cluster with many partitions, idle and under a trickle of produce.

`python bench/fetch_session_bench.py [--partitions N] [--seconds S] [--rate R] [--rounds N] [--src DIR,DIR]`

ZooKeeper and three `rill broker` processes on this machine; one topic of `--partitions` partitions, replication
factor 3 (leaders spread over the brokers), every partition's ISR complete before measuring. Then, for `--seconds`
each: idle (no client), and a trickle (one producer, acks=all, `--rate` records of 100 B a second spread over the
partitions). For each phase: the three brokers' CPU time (user + system, from /proc/PID/stat) per second, the Fetch
requests they handled per second (their Prometheus counter) and the CPU per fetch. Last, the time of 10
CreateTopics (3 partitions, RF 3) one after another, each waiting for the new partitions' leaders.

CPU time is measured rather than rates because the machine's cores are shared: other load slows a phase down
but changes its CPU time less. `--src` runs the brokers on other source trees (each a directory holding the
`rill` package), one cluster per tree and round, alternating, to compare code before and after a change.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rill.testing.cluster import TestCluster

_TICK = os.sysconf("SC_CLK_TCK")
_FETCHES = re.compile(r'^kafka_network_requestmetrics_requests_total\{request="Fetch"[^}]*\} ([0-9.e+]+)$', re.M)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def _fetches(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return sum(float(m) for m in _FETCHES.findall(resp.read().decode()))


def _sample(c: TestCluster) -> tuple[float, float]:
    cpu = sum(_cpu_seconds(c.pid(b)) for b in c.brokers)
    fetches = sum(_fetches(c.metrics_port(b)) for b in c.brokers)
    return cpu, fetches


def _measure(c: TestCluster, seconds: float) -> tuple[float, float]:
    """CPU seconds per second of the three brokers, and Fetch requests per second, over ``seconds``."""
    cpu0, f0 = _sample(c)
    t0 = time.monotonic()
    time.sleep(seconds)
    cpu1, f1 = _sample(c)
    dt = time.monotonic() - t0
    return (cpu1 - cpu0) / dt, (f1 - f0) / dt


def _trickle(bootstrap: str, topic: str, partitions: int, rate: float, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    i = 0
    start = time.monotonic()
    while not stop.is_set():
        producer.produce(topic, b"x" * 100, partition=i % partitions)
        producer.poll(0)
        i += 1
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            stop.wait(delay)
    producer.flush(30)


def _run(src: str, args: argparse.Namespace) -> dict[str, float]:
    os.environ["PYTHONPATH"] = src
    c = TestCluster(3, {"auto.leader.rebalance.enable": "false"}, metrics=True)
    try:
        c.start()
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([NewTopic("many", args.partitions, 3)])["many"].result(120)
        c.wait_for(lambda: all(len(c.isr("many", p)) == 3 for p in range(args.partitions)), 180, "full ISRs")
        time.sleep(3)
        out: dict[str, float] = {}
        out["idle cpu/s"], out["idle fetch/s"] = _measure(c, args.seconds)
        stop = threading.Event()
        t = threading.Thread(target=_trickle, args=(c.bootstrap_servers, "many", args.partitions, args.rate, stop))
        t.start()
        time.sleep(2)
        try:
            out["trickle cpu/s"], out["trickle fetch/s"] = _measure(c, args.seconds)
        finally:
            stop.set()
            t.join()
        times = []
        for i in range(10):
            t0 = time.monotonic()
            admin.create_topics([NewTopic(f"t{i}", 3, 3)])[f"t{i}"].result(120)
            times.append(time.monotonic() - t0)
        out["CreateTopics ms"] = statistics.median(times) * 1000
        return out
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--src", default=str(Path(__file__).resolve().parent.parent / "src"))
    args = ap.parse_args()
    srcs = args.src.split(",")
    results: dict[str, list[dict[str, float]]] = {s: [] for s in srcs}
    for r in range(args.rounds):
        for s in srcs:
            got = _run(s, args)
            results[s].append(got)
            print(f"round {r + 1} {s}: " + ", ".join(f"{k} {v:.3f}" for k, v in got.items()), flush=True)
    print(f"\n{args.partitions} partitions RF 3, {args.seconds:g} s phases, trickle {args.rate:g} records/s; "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print("| source | idle CPU s/s | idle fetches/s | idle CPU ms/fetch | trickle CPU s/s | trickle fetches/s "
          "| trickle CPU ms/fetch | CreateTopics median ms |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for s, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"| {s} | {med['idle cpu/s']:.3f} | {med['idle fetch/s']:.1f} "
              f"| {1000 * med['idle cpu/s'] / max(med['idle fetch/s'], 1e-9):.2f} "
              f"| {med['trickle cpu/s']:.3f} | {med['trickle fetch/s']:.1f} "
              f"| {1000 * med['trickle cpu/s'] / max(med['trickle fetch/s'], 1e-9):.2f} "
              f"| {med['CreateTopics ms']:.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
