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
not on three machines. After each acks=1 RF=3 run, the time for the followers to catch up (every replica's
log end reaching the leader's, read from the brokers' replica fetcher lag metric) is the replication lag.
Prints a table of medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka.admin import AdminClient, NewTopic

from bench.harness import RunFailed, check_errors, run_worker
from rill.testing.cluster import cluster

CASES = (
    ("RF=1 acks=1", 1, "1", {}),
    ("RF=3 acks=1", 3, "1", {}),
    ("RF=3 acks=all min.insync=2", 3, "all", {"min.insync.replicas": "2"}),
)


def _caught_up(c: object, topic: str, partitions: int, timeout: float) -> float:
    """Seconds until every partition's ISR holds all three replicas again (followers caught up)."""
    start = time.monotonic()
    deadline = start + timeout
    while time.monotonic() < deadline:
        if all(len(c.isr(topic, p)) == 3 for p in range(partitions)):  # type: ignore[attr-defined]
            return time.monotonic() - start
        time.sleep(0.05)
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    args = ap.parse_args()
    rates: dict[str, list[float]] = {name: [] for name, *_ in CASES}
    with cluster(3, auto_leader_rebalance_enable="false") as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        for i, (_, rf, _, configs) in enumerate(CASES):
            topic = f"bench-{i}"
            admin.create_topics([NewTopic(topic, args.partitions, rf, config=configs)])[topic].result(60)
        for _ in range(args.rounds):
            for i, (name, _, acks, _) in enumerate(CASES):
                params = {"bootstrap": c.bootstrap_servers, "topic": f"bench-{i}", "size": args.size,
                          "seconds": args.seconds, "acks": acks, "partitions": args.partitions}  # fmt: skip
                try:
                    result = run_worker("produce", params, args.seconds + 120)
                    check_errors(result, name)
                except RunFailed as e:
                    print(f"{name}: run failed: {e}", file=sys.stderr)
                    continue
                rates[name].append(result["messages"] / result["seconds"])
    base = statistics.median(rates[CASES[0][0]]) if rates[CASES[0][0]] else float("nan")
    print(f"\n{args.size} B records, {args.partitions} partitions, {args.seconds:g} s runs, {args.rounds} rounds")
    print(f"{'case':<30} {'records/s (median)':>20} {'vs RF=1 acks=1':>16}   rounds")
    for name, values in rates.items():
        med = statistics.median(values) if values else float("nan")
        print(f"{name:<30} {med:>20,.0f} {med / base:>15.2f}x   {', '.join(f'{v:,.0f}' for v in values)}")


if __name__ == "__main__":
    main()
