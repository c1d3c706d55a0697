"""The web console's page times on a busy cluster: one broker with N topics and M consumer groups (each with
committed offsets), a `rill console` beside it, and the server time of each main page (the time to the full
response, over loopback, so it includes the cluster round trips the page makes).

    python bench/console_bench.py [--topics 1000] [--groups 100] [--rounds 10]

Prints a table: page, median and largest time over the rounds (after one warm-up request).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import urllib.request

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from rill.testing import broker


def _prepare(bootstrap: str, topics: int, groups: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"bench-{i:04d}" for i in range(topics)]
    for start in range(0, topics, 200):
        for f in admin.create_topics([NewTopic(n, 1, 1) for n in names[start:start + 200]]).values():
            f.result(120)
    for g in range(groups):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-group-{g:03d}"})
        consumer.commit(offsets=[TopicPartition(names[(g * 7 + k) % topics], 0, 0) for k in range(5)],
                        asynchronous=False)  # fmt: skip
        consumer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    with broker() as b:
        started = time.monotonic()
        _prepare(b.bootstrap_servers, args.topics, args.groups)
        print(f"{args.topics} topics and {args.groups} groups made in {time.monotonic() - started:.1f} s",
              file=sys.stderr)  # fmt: skip
        proc = subprocess.Popen([sys.executable, "-m", "rill", "console", "--bootstrap-server", b.bootstrap_servers,
                                 "--listen", "127.0.0.1:0", "--log-level", "WARNING"], stdout=subprocess.PIPE,
                                text=True)  # fmt: skip
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1]
        pages = ["/", "/topics", "/topics/bench-0001", "/topics/bench-0001/messages", "/groups",
                 "/groups/bench-group-001", "/acls", "/users"]  # fmt: skip
        rows = []
        try:
            for page in pages:
                times = []
                for i in range(args.rounds + 1):
                    t = time.perf_counter()
                    with urllib.request.urlopen(url + page, timeout=60) as r:
                        r.read()
                    if i:
                        times.append((time.perf_counter() - t) * 1000)
                rows.append((page, statistics.median(times), max(times)))
        finally:
            proc.terminate()
            proc.wait(15)
    print(f"| page ({args.topics} topics, {args.groups} groups) | median ms | max ms |")
    print("| --- | ---: | ---: |")
    for page, median, worst in rows:
        print(f"| `{page}` | {median:.1f} | {worst:.1f} |")


if __name__ == "__main__":
    main()
