"""CPU time of a follower per MB it replicates against its leader's per MB produced, on a local 3-broker cluster.

`python bench/replication_cpu_bench.py [--mb N] [--size BYTES] [--rounds N] [--src DIR,DIR]`

One topic of 3 partitions, every one led by broker 0 and followed by brokers 1 and 2 (RF 3, acks=1); a producer
process (confluent-kafka) writes `--mb` MB of `--size`-byte records, then the run waits until every record is
below its partition's high watermark (both followers hold everything). Each broker's CPU time (user and system,
from /proc/PID/stat) from the producer's start to then, per MB: the leader's is its produce path (and the
followers' fetches it answers), the followers' their fetch and append path. `--src` alternates source trees
(one cluster per tree and round), to compare code before and after a change.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import check_errors, run_worker
from rill.testing.cluster import TestCluster

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / _TICK, int(fields[12]) / _TICK


def _high_watermarks(consumer: Consumer) -> int:
    return sum(consumer.get_watermark_offsets(TopicPartition("repl", p), timeout=10)[1] for p in range(3))


def _run(src: str, args: argparse.Namespace) -> dict[str, float]:
    os.environ["PYTHONPATH"] = src
    c = TestCluster(3, {"auto.leader.rebalance.enable": "false"})
    try:
        c.start()
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([NewTopic("repl", 3, replica_assignment=[[0, 1, 2]] * 3)])["repl"].result(60)
        c.wait_for(lambda: all(len(c.isr("repl", p)) == 3 for p in range(3)), 60, "full ISRs")
        consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "repl-bench"})
        c.wait_for(lambda: _high_watermarks(consumer) == 0, 60, "the partitions' leaders known")
        time.sleep(2)
        count = int(args.mb * 1_000_000 / args.size)
        before = {b: _cpu(c.pid(b)) for b in c.brokers}
        t0 = time.monotonic()
        result = run_worker("produce", {"bootstrap": c.bootstrap_servers, "topic": "repl", "size": args.size,
                                        "seconds": 600, "messages": count, "acks": "1", "partitions": 3},
                            700)  # fmt: skip
        check_errors(result, "produce")
        total = int(result["messages"])
        c.wait_for(lambda: _high_watermarks(consumer) >= total, 300, "every record replicated")
        elapsed = time.monotonic() - t0
        after = {b: _cpu(c.pid(b)) for b in c.brokers}
        consumer.close()
        mb = total * args.size / 1_000_000
        out = {"seconds": elapsed, "MB": mb}
        for b in c.brokers:
            user, system = (after[b][i] - before[b][i] for i in range(2))
            out[f"b{b} user us/MB"] = user * 1e6 / mb
            out[f"b{b} sys us/MB"] = system * 1e6 / mb
        return out
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=200.0)
    ap.add_argument("--size", type=int, default=10240)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--src", default=str(Path(__file__).resolve().parent.parent / "src"))
    args = ap.parse_args()
    srcs = args.src.split(",")
    results: dict[str, list[dict[str, float]]] = {s: [] for s in srcs}
    for r in range(args.rounds):
        for s in srcs:
            got = _run(s, args)
            results[s].append(got)
            print(f"round {r + 1} {s}: " + ", ".join(f"{k} {v:,.0f}" for k, v in got.items()), flush=True)
    print(f"\n{args.mb:g} MB of {args.size} B records, acks=1, RF 3, leader broker 0; "
          f"load average {os.getloadavg()[0]:.1f}; CPU us per MB (user + system), medians")  # fmt: skip
    print("| source | leader (b0) | follower b1 | follower b2 | seconds |")
    print("| --- | --- | --- | --- | --- |")
    for s, runs in results.items():

        def med(key: str, runs: list[dict[str, float]] = runs) -> float:
            return statistics.median(r[key] for r in runs)

        cells = [f"{med(f'b{b} user us/MB'):,.0f} + {med(f'b{b} sys us/MB'):,.0f}" for b in range(3)]
        print(f"| {s} | {' | '.join(cells)} | {med('seconds'):.1f} |")


if __name__ == "__main__":
    main()
