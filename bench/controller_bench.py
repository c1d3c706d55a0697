"""CreateTopics on a 3-broker cluster as the cluster grows (the controller's work per new topic).

`python bench/controller_bench.py [--topics N] [--at 0,300,1000] [--sample N] [--partitions N]`

ZooKeeper and three `rill broker` processes on this machine. Topics of `--partitions` partitions (3 by
default), replication factor 3, are created one CreateTopics after another (each waits until the controller has
elected the new partitions' leaders) until `--topics` exist; for each count in `--at`, the median and largest
time of the `--sample` creations made from that count on.
"""

from __future__ import annotations

import argparse
import statistics
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from rill.testing.cluster import TestCluster


def _controller(admin: AdminClient) -> int:
    try:
        return int(admin.list_topics(timeout=10).controller_id)
    except KafkaException:
        return -1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=1020)
    ap.add_argument("--at", default="0,300,1000")
    ap.add_argument("--sample", type=int, default=20)
    ap.add_argument("--partitions", type=int, default=3)
    args = ap.parse_args()
    marks = [int(x) for x in args.at.split(",")]
    times: list[float] = []
    with TestCluster(3, {"offsets.topic.replication.factor": "3"}).start() as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        deadline = time.monotonic() + 120
        while _controller(admin) < 0:  # clients learn the controller from Metadata
            if time.monotonic() > deadline:
                raise SystemExit("no controller within 120 s")
            time.sleep(0.2)
        print(f"| topics existing | CreateTopics ({args.partitions} partitions, RF 3) median | largest |")
        print("| --- | --- | --- |", flush=True)
        for i in range(args.topics):
            t = time.monotonic()
            for f in admin.create_topics([NewTopic(f"t{i}", args.partitions, 3)], request_timeout=120).values():
                f.result(180)
            times.append(time.monotonic() - t)
            for m in marks:  # each row as soon as its sample is complete
                if i + 1 == min(m + args.sample, args.topics):
                    got = times[m:]
                    print(f"| {m} | {statistics.median(got) * 1000:.0f} ms | {max(got) * 1000:.0f} ms |", flush=True)


if __name__ == "__main__":
    main()
