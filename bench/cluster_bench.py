"""Replication's cost, measured on a local 3-broker cluster (ZooKeeper and three `rill broker` processes).

`python bench/cluster_bench.py [--seconds S] [--rounds N] [--size BYTES] [--partitions N]`

In one run, alternating (A/B/C per round): a producer process (confluent-kafka, 1 KiB records by default,
linger.ms=5) produces for `--seconds` to
- a topic with replication factor 1, acks=1 (no replication: the baseline),
- a topic with replication factor 3, acks=1 (replication in the background),
- a topic with replication factor 3, min.insync.replicas=2, acks=all (each batch waits for the followers).
Kafka's own 2014 figures on three machines were 821k (RF=1, acks=1) against 421k (RF=3, acks=all)
records/s, about 0.5x. Here the three brokers, ZooKeeper and the client share two cores, so every
follower's fetch and append takes CPU from the leader: the ratio says what replication costs in CPU here,
not on three machines.

Replication lag under load, for the two RF=3 cases: while the producer runs, every broker's replica fetcher lag
(`kafka_server_replicafetchermanager_maxlag`: the largest number of records a followed partition is behind the
leader's high watermark) is scraped every 250 ms (each scrape renders every metric: 100 ms cost a broker about
6% of its loop), and its largest value over the run is reported; after the producer's flush, the catch-up time
is how long until every acknowledged record is below the high watermark of its partition (held by the whole ISR:
with acks=1 the producer does not wait for that). Prints a table of medians.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.harness import RunFailed, check_errors, run_worker
from rill.testing.cluster import cluster

CASES = (
    ("RF=1 acks=1", 1, "1", {}),
    ("RF=3 acks=1", 3, "1", {}),
    ("RF=3 acks=all min.insync=2", 3, "all", {"min.insync.replicas": "2"}),
)


_MAX_LAG = re.compile(r'^kafka_server_replicafetchermanager_maxlag\{clientid="Replica"\} ([0-9.e+]+)$', re.M)


def _max_lag(port: int) -> int:
    """The broker's replica fetcher max lag (records), from its Prometheus endpoint."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        match = _MAX_LAG.search(resp.read().decode())
    return int(float(match.group(1))) if match else 0


class LagSampler:
    """Scrapes every broker's replica fetcher max lag every 250 ms in a thread; ``peak`` is the largest seen."""

    def __init__(self, ports: list[int]) -> None:
        self.peak = 0
        self._ports = ports
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LagSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            for port in self._ports:
                with contextlib.suppress(OSError):
                    self.peak = max(self.peak, _max_lag(port))


def _high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cluster-bench", "enable.auto.commit": False})
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                        for p in range(partitions)]  # fmt: skip
            except KafkaException:  # a topic just created: its partitions' leaders not yet in the client's metadata
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        consumer.close()


def _catch_up_seconds(bootstrap: str, topic: str, partitions: int, target: int, timeout: float = 60) -> float:
    """Seconds until the partitions' high watermarks sum to ``target`` (every acknowledged record replicated
    to the whole ISR), or NaN after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if sum(_high_watermarks(bootstrap, topic, partitions)) >= target:
            return time.monotonic() - start
        time.sleep(0.02)
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--fresh", action="store_true",
                    help="each run on a cluster of its own (the first seconds of a fresh cluster: no page cache "
                         "grown by the runs before; see PERFORMANCE.md)")  # fmt: skip
    args = ap.parse_args()
    rates: dict[str, list[float]] = {name: [] for name, *_ in CASES}
    peaks: dict[str, list[int]] = {name: [] for name, *_ in CASES}
    catch_up: dict[str, list[float]] = {name: [] for name, *_ in CASES}
    if args.fresh:
        for _ in range(args.rounds):
            for case in range(len(CASES)):
                _run_rounds(args, [case], 1, rates, peaks, catch_up)
    else:
        _run_rounds(args, list(range(len(CASES))), args.rounds, rates, peaks, catch_up)
    _print(args, rates, peaks, catch_up)


def _run_rounds(args: argparse.Namespace, cases: list[int], rounds: int, rates: dict[str, list[float]],
                peaks: dict[str, list[int]], catch_up: dict[str, list[float]]) -> None:  # fmt: skip
    with cluster(3, metrics=True, auto_leader_rebalance_enable="false") as c:
        ports = [c.metrics_port(b) for b in c.brokers]
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        for i in cases:
            _, rf, _, configs = CASES[i]
            topic = f"bench-{i}"
            admin.create_topics([NewTopic(topic, args.partitions, rf, config=configs)])[topic].result(60)
        for _ in range(rounds):
            for i in cases:
                name, rf, acks, _ = CASES[i]
                topic = f"bench-{i}"
                params = {"bootstrap": c.bootstrap_servers, "topic": topic, "size": args.size,
                          "seconds": args.seconds, "acks": acks, "partitions": args.partitions}  # fmt: skip
                before = sum(_high_watermarks(c.bootstrap_servers, topic, args.partitions))
                try:
                    with LagSampler(ports) as sampler:
                        result = run_worker("produce", params, args.seconds + 120)
                        check_errors(result, name)
                        if rf > 1:
                            catch_up[name].append(
                                _catch_up_seconds(
                                    c.bootstrap_servers, topic, args.partitions, before + int(result["messages"])
                                )
                            )
                except RunFailed as e:
                    print(f"{name}: run failed: {e}", file=sys.stderr)
                    continue
                rates[name].append(result["messages"] / result["seconds"])
                if rf > 1:
                    peaks[name].append(sampler.peak)


def _print(args: argparse.Namespace, rates: dict[str, list[float]], peaks: dict[str, list[int]],
           catch_up: dict[str, list[float]]) -> None:  # fmt: skip
    base = statistics.median(rates[CASES[0][0]]) if rates[CASES[0][0]] else float("nan")
    fresh = ", each on a fresh cluster" if args.fresh else ""
    print(f"\n{args.size} B records, {args.partitions} partitions, {args.seconds:g} s runs, "
          f"{args.rounds} rounds{fresh}")
    print(f"{'case':<30} {'records/s (median)':>20} {'vs RF=1 acks=1':>16} {'max lag (records)':>18}"
          f" {'catch-up (s)':>13}   rounds")  # fmt: skip
    for name, values in rates.items():
        med = statistics.median(values) if values else float("nan")
        lag = f"{statistics.median(peaks[name]):,.0f}" if peaks[name] else "-"
        caught = f"{statistics.median(catch_up[name]):.3f}" if catch_up[name] else "-"
        print(f"{name:<30} {med:>20,.0f} {med / base:>15.2f}x {lag:>18} {caught:>13}"
              f"   {', '.join(f'{v:,.0f}' for v in values)}")  # fmt: skip


if __name__ == "__main__":
    main()
