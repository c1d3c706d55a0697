"""Transactions' cost: transactional produce committing every 100 ms against idempotent produce, same run.

`python bench/txn_bench.py [--seconds S] [--rounds N] [--size BYTES] [--partitions N] [--commit-ms MS]`

A Rill broker (subprocess) and, per run, a producer process (confluent-kafka, `--size` (1024) byte records,
linger.ms=5, acks=all, round robin over `--partitions` (3) partitions) that produces for `--seconds` (5):
- idempotent: `enable.idempotence=true`;
- transactional: a `transactional.id`, a transaction begun, filled for `--commit-ms` (100) and committed
  (commit_transaction waits for the records and the markers), again and again.
The two alternate (A/B per round, `--rounds` (3) rounds). A run's rate counts the records acknowledged
(idempotent) or committed (transactional) over the run's time, final flush or commit included. Kafka's design
measured about 3% overhead for 1 KiB records committed every 100 ms; Rill's goal is at most 10%. Prints the
medians, the overhead of the medians and the median of each round's transactional/idempotent ratio (robust to
a machine whose speed drifts between rounds), and the broker's CPU time per record in each mode (read from
/proc: less sensitive to other load on the machine than the rates).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BROKER_CONFIGS = {
    "transaction.state.log.num.partitions": "5",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}


def worker(mode: str, bootstrap: str, topic: str, seconds: float, size: int, partitions: int, commit_ms: int) -> None:
    import confluent_kafka as ck

    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "enable.idempotence": True}
    if mode == "transactional":
        conf["transactional.id"] = f"txn-bench-{uuid.uuid4().hex[:8]}"
    producer = ck.Producer(conf)
    acked = [0]

    def on_delivery(err: object, _msg: object) -> None:
        if err is None:
            acked[0] += 1

    if mode == "transactional":
        producer.init_transactions(30)
    payload = b"x" * size
    sent = 0
    transactions = 0
    start = time.monotonic()
    end = start + seconds

    def produce_until(t: float) -> None:
        nonlocal sent
        while time.monotonic() < t:
            for _ in range(100):
                try:
                    producer.produce(topic, payload, partition=sent % partitions, on_delivery=on_delivery)
                    sent += 1
                except BufferError:
                    producer.poll(0.001)
            producer.poll(0)

    if mode == "transactional":
        committed = 0
        while time.monotonic() < end:
            producer.begin_transaction()
            before = sent
            produce_until(min(time.monotonic() + commit_ms / 1000, end))
            producer.commit_transaction(60)
            committed += sent - before
            transactions += 1
        records = committed
    else:
        produce_until(end)
        producer.flush(60)
        records = acked[0]
    elapsed = time.monotonic() - start
    print(json.dumps({"records": records, "seconds": elapsed, "transactions": transactions}))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_once(mode: str, bootstrap: str, topic: str, args: argparse.Namespace) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--worker", mode, bootstrap, topic, str(args.seconds), str(args.size),
           str(args.partitions), str(args.commit_ms)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.seconds + 120, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--commit-ms", type=int, default=100)
    parser.add_argument("--worker", nargs=7, metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        mode, bootstrap, topic, seconds, size, partitions, commit_ms = args.worker
        worker(mode, bootstrap, topic, float(seconds), int(size), int(partitions), int(commit_ms))
        return

    from confluent_kafka.admin import AdminClient, NewTopic

    from rill.testing import broker

    rates: dict[str, list[float]] = {"idempotent": [], "transactional": []}
    commits: list[float] = []
    cpu: dict[str, list[float]] = {"idempotent": [], "transactional": []}  # broker CPU us per record
    with broker(BROKER_CONFIGS, subprocess=True) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.create_topics([NewTopic("txn-bench", args.partitions, 1)])["txn-bench"].result(30)
        run_once("transactional", b.bootstrap_servers, "txn-bench", argparse.Namespace(**{**vars(args), "seconds": 1}))
        for r in range(args.rounds):
            for mode in ("idempotent", "transactional"):
                pid = b._runner._proc.pid
                before = cpu_seconds(pid)
                res = run_once(mode, b.bootstrap_servers, "txn-bench", args)
                cpu[mode].append((cpu_seconds(pid) - before) * 1e6 / max(res["records"], 1))
                rate = res["records"] / res["seconds"]
                rates[mode].append(rate)
                if mode == "transactional":
                    commits.append(res["transactions"] / res["seconds"])
                per = cpu[mode][-1]
                print(
                    f"round {r + 1} {mode:<13} {rate:>10,.0f} records/s, broker {per:.1f} us CPU per record", flush=True
                )
    idem = statistics.median(rates["idempotent"])
    txn = statistics.median(rates["transactional"])
    mb = args.size / 1e6
    print()
    print("| mode | records/s (median) | MB/s | broker CPU per record (median) | rounds |")
    print("| --- | --- | --- | --- | --- |")
    for mode, med in (("idempotent", idem), (f"transactional, commit every {args.commit_ms} ms", txn)):
        key = "idempotent" if mode == "idempotent" else "transactional"
        per = statistics.median(cpu[key])
        print(f"| {mode} | {med:,.0f} | {med * mb:.1f} | {per:.1f} us | {', '.join(f'{x:,.0f}' for x in rates[key])} |")
    ratios = [t / i for i, t in zip(rates["idempotent"], rates["transactional"], strict=True)]
    by_ratio = 100 * (1 - statistics.median(ratios))
    print(f"\noverhead: {100 * (1 - txn / idem):.1f}% of the medians; {by_ratio:.1f}% by the median of the rounds' "
          f"ratios ({', '.join(f'{r:.2f}' for r in ratios)}); {statistics.median(commits):.1f} commits/s")  # fmt: skip


if __name__ == "__main__":
    main()
