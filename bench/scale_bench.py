"""The scale of one broker: how it holds many one-segment partitions.

`python bench/scale_bench.py [--partitions N] [--per-topic N] [--nofile N]`

One `rill broker` process (under `prlimit --nofile=N:N` when `--nofile` is given), ten topics of 1,000
partitions by default, created one CreateTopics after another. Reported: the time to create them (each request
and in all), the broker's open descriptors and resident memory per partition, a Metadata request for every
topic, one produce that touches every partition (one 100-byte record each, acks=all, until every record is
acknowledged), the stop (SIGTERM to exit), the start after that clean stop and the start after SIGKILL (process
start to ready on its listener).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import rss_kib
from rill.testing import TestBroker


def _fds(pid: int) -> int:
    return sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())


def _pid(b: TestBroker) -> int:
    pid = b.pid
    assert pid is not None
    return pid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--per-topic", type=int, default=1_000)
    ap.add_argument("--nofile", type=int, default=0, help="the broker's open-files limit, hard and soft")
    args = ap.parse_args()
    data = Path(tempfile.mkdtemp(prefix="rill-scale-"))
    prefix = ["prlimit", f"--nofile={args.nofile}:{args.nofile}", "--"] if args.nofile else []
    b = TestBroker({}, subprocess=True, data_dir=data, startup_timeout=600.0, command_prefix=prefix)
    rows: list[tuple[str, str]] = []
    try:
        b.start()
        pid = _pid(b)
        fds0, rss0 = _fds(pid), rss_kib(pid)
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        topics = [f"scale{i}" for i in range(args.partitions // args.per_topic)]
        times: list[float] = []
        for name in topics:
            t = time.monotonic()
            for f in admin.create_topics([NewTopic(name, args.per_topic, 1)], request_timeout=600).values():
                f.result(600)
            times.append(time.monotonic() - t)
        total = len(topics) * args.per_topic
        fds1, rss1 = _fds(pid), rss_kib(pid)
        rows.append((f"create {len(topics)} x {args.per_topic} partitions", f"{sum(times):.1f} s (per request "
                     f"{min(times):.2f}-{max(times):.2f} s, last {times[-1]:.2f} s)"))  # fmt: skip
        rows.append(("open descriptors per partition", f"{(fds1 - fds0) / total:.2f} ({fds1} in all)"))
        rows.append(("resident memory per partition", f"{(rss1 - rss0) / total:.1f} KiB ({rss1 // 1024} MiB in all)"))
        t = time.monotonic()
        md = admin.list_topics(timeout=120)
        rows.append(("Metadata, every topic", f"{(time.monotonic() - t) * 1000:.0f} ms ({len(md.topics)} topics)"))
        producer = Producer({"bootstrap.servers": b.bootstrap_servers, "acks": "all", "linger.ms": 20})
        failed: list[str] = []
        t = time.monotonic()
        for name in topics:
            for p in range(args.per_topic):
                producer.produce(name, b"x" * 100, partition=p,
                                 on_delivery=lambda err, _m: failed.append(str(err)) if err else None)  # fmt: skip
                producer.poll(0)
        left = producer.flush(300)
        rows.append(("produce one record to every partition", f"{time.monotonic() - t:.1f} s ({len(failed)} failed, "
                     f"{left} unacknowledged)"))  # fmt: skip
        rows.append(("open descriptors after the produce", f"{_fds(pid)}"))
        t = time.monotonic()
        b.stop(timeout=600)
        rows.append(("clean stop", f"{time.monotonic() - t:.1f} s"))
        t = time.monotonic()
        b.start()
        rows.append(("start after a clean stop", f"{time.monotonic() - t:.1f} s"))
        b.kill()
        t = time.monotonic()
        b.start()
        rows.append(("start after SIGKILL", f"{time.monotonic() - t:.1f} s"))
        b.kill()
    finally:
        b.close()
        shutil.rmtree(data, ignore_errors=True)
    print(f"| one broker, {args.partitions} partitions | |\n| --- | --- |")
    for what, value in rows:
        print(f"| {what} | {value} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
