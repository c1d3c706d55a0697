"""Mirror benchmark: ``rill mirror``'s copy loop against a plain consume-and-produce of the same records, in the
same run, between two Rill brokers on this machine.

    python bench/mirror_bench.py [--quick] [--records N] [--value-bytes N] [--partitions N]

Writes ``--records`` (500,000) records of ``--value-bytes`` (100) into a topic of ``--partitions`` (4) on the
source broker, then copies them to the target three times: once with a plain loop (a confluent-kafka consumer
and an idempotent acks=all producer, the records produced to the same partition, nothing else), once with
``MirrorMaker`` (which also keeps per-partition order bookkeeping, writes offset syncs and commits its
positions), and once with ``MirrorMaker`` in exactly-once mode (a transaction per partition and batch). Each
copy goes to a topic of its own; the time is from the start of the copy until the target has acknowledged
the last record. Prints a table. ``--quick``: 100,000 records.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rill.mirror import MirrorConfig, MirrorMaker
from rill.testing import broker


def fill(bootstrap: str, topic: str, partitions: int, records: int, value_bytes: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    value = b"v" * value_bytes
    for n in range(records):
        while True:
            try:
                producer.produce(topic, value, b"%d" % n, partition=n % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def plain_copy(source: str, target: str, topic: str, copy: str, partitions: int, records: int) -> float:
    admin = AdminClient({"bootstrap.servers": target})
    admin.create_topics([NewTopic(copy, partitions)])[copy].result(30)
    consumer = Consumer({"bootstrap.servers": source, "group.id": "plain-copy", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})  # fmt: skip
    producer = Producer({"bootstrap.servers": target, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    acked = 0

    def delivered(err: Any, _msg: Any) -> None:
        nonlocal acked
        acked += err is None

    consumer.subscribe([topic])
    started = time.monotonic()
    copied = 0
    while copied < records:
        for msg in consumer.consume(5000, 0.5):
            if msg.error():
                continue
            while True:
                try:
                    producer.produce(copy, msg.value(), msg.key(), msg.partition(), on_delivery=delivered,
                                     timestamp=msg.timestamp()[1])  # fmt: skip
                    break
                except BufferError:
                    producer.poll(0.05)
            copied += 1
        producer.poll(0)
    producer.flush(120)
    took = time.monotonic() - started
    consumer.close()
    assert acked == records, (acked, records)
    return took


def mirror_copy(source: str, target: str, topic: str, prefix: str, records: int, exactly_once: bool = False) -> float:
    config = MirrorConfig(source, target, topic, prefix=prefix, name=prefix.strip("."), group_sync_interval_s=3600,
                          exactly_once=exactly_once)  # fmt: skip
    mirror = MirrorMaker(config)
    stop = threading.Event()
    started = time.monotonic()
    thread = threading.Thread(target=mirror.run, args=(stop,))
    thread.start()
    while mirror.stats.records < records:
        time.sleep(0.01)
        if not thread.is_alive():
            raise RuntimeError("the mirror stopped")
    took = time.monotonic() - started
    stop.set()
    thread.join(60)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    records = 100_000 if args.quick else args.records
    with broker({}, subprocess=True) as src, broker({}, subprocess=True) as dst:
        fill(src.bootstrap_servers, "events", args.partitions, records, args.value_bytes)
        plain = plain_copy(src.bootstrap_servers, dst.bootstrap_servers, "events", "plain.events", args.partitions,
                           records)  # fmt: skip
        mirrored = mirror_copy(src.bootstrap_servers, dst.bootstrap_servers, "events", "copy.", records)
        once = mirror_copy(src.bootstrap_servers, dst.bootstrap_servers, "events", "once.", records, True)
    mib = records * args.value_bytes / (1 << 20)
    print(f"{records:,} records of {args.value_bytes} B, {args.partitions} partitions, two brokers on this machine")
    print(f"{'copy':<28}{'seconds':>10}{'records/s':>12}{'MiB/s':>8}{'vs plain':>10}")
    rows = (("consume-and-produce loop", plain), ("rill mirror", mirrored), ("rill mirror --exactly-once", once))
    for name, took in rows:
        print(f"{name:<28}{took:>10.2f}{records / took:>12,.0f}{mib / took:>8.1f}{plain / took:>10.2f}")


if __name__ == "__main__":
    main()
