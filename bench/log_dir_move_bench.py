"""Moving a replica between a broker's log dirs (AlterReplicaLogDirs): how fast the copy goes, how long its last
step (catch-up and swap) holds the broker's loop, and what it costs a producer writing to the same broker.

    python bench/log_dir_move_bench.py [--mib N] [--value-bytes N]

One thread-mode broker with two log dirs; a one-partition topic filled with ``--mib`` MiB (acks=all); then a
producer sends one 100-byte record at a time (acks=all, waiting for each) for a second before the move and during
it, and the move is asked for with kafka-python's admin client. Prints the move's time and MB/s, the last step's
time, and the producer's latency percentiles before and during the move.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, TopicPartitionReplica

import rill.testing


def _pct(xs: list[float], f: float) -> float:
    return sorted(xs)[max(0, int(len(xs) * f) - 1)] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=200)
    ap.add_argument("--value-bytes", type=int, default=1000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="log-dir-move-"))
    a, b = tmp / "a", tmp / "b"
    broker = rill.testing.TestBroker({"log.dirs": f"{a},{b}", "num.partitions": "1"}, data_dir=tmp).start()
    try:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic("m", 1, 1)]).values():
            f.result(30)
        fill = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 262144, "acks": "all"})
        value = b"x" * args.value_bytes
        for _ in range(args.mib * (1 << 20) // args.value_bytes):
            while True:
                try:
                    fill.produce("m", value=value)
                    break
                except BufferError:
                    fill.poll(0.05)
        fill.flush(300)
        dest = b if (a / "m-0").is_dir() else a
        latencies: list[float] = []
        stop = threading.Event()

        def produce() -> None:
            p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
            while not stop.is_set():
                start = time.perf_counter()
                p.produce("m", value=b"y" * 100,
                          on_delivery=lambda e, m, s=start: latencies.append(time.perf_counter() - s))
                p.flush(10)

        writer = threading.Thread(target=produce)
        writer.start()
        time.sleep(1.0)
        before = list(latencies)
        latencies.clear()
        mover = broker.broker.replica_manager.log_dir_mover
        start = time.monotonic()
        kadmin = KafkaAdminClient(bootstrap_servers=bootstrap)
        kadmin.alter_replica_log_dirs({TopicPartitionReplica("m", 0, 0): str(dest)})
        while mover.moves_completed == 0:
            time.sleep(0.005)
        took = time.monotonic() - start
        during = list(latencies)
        stop.set()
        writer.join()
        kadmin.close()
        size = sum(f.stat().st_size for f in (dest / "m-0").glob("*.log"))
        print(f"moved {size / 1e6:.0f} MB in {took:.2f} s ({size / 1e6 / took:.0f} MB/s, the request included); "
              f"the last step held the loop {mover.last_swap_ms:.1f} ms")
        for name, xs in (("before", before), ("during", during)):
            print(f"acks=all produce latency {name} the move: n={len(xs)} p50={_pct(xs, .5):.2f} ms "
                  f"p99={_pct(xs, .99):.2f} ms max={max(xs) * 1000:.1f} ms")
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
