"""Spark benchmark: topic -> Parquet through the rill source, beside Arrow-in-memory -> Parquet.

    python -m bench.spark_bench [--records 5000000] [--size 200] [--partitions 2] [--master local[2]]

Starts a Rill broker (subprocess, 127.0.0.1), fills a topic with confluent-kafka, then in one Spark session
measures (best of ``--repeat`` runs each):
  - rill:   ``spark.read.format("rill")...load().write.parquet(...)``
  - memory: the same rows (same schema, same sizes) produced by an in-memory Arrow data source, written
            to Parquet by the same session: the ceiling for the rill source.
The goal is rill >= 80% of memory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from rill.client import KafkaClient
from rill.spark.arrow import arrow_schema, schema_ddl
from rill.spark.session import build_session


class _MemReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.records = int(options["records"])
        self.size = int(options["size"])
        self.parts = int(options["partitions"])

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        n = self.records // self.parts
        schema = arrow_schema(False)
        value = os.urandom(self.size)
        step = 32768
        for start in range(0, n, step):
            m = min(step, n - start)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([None] * m, pa.binary()),
                    pa.array([value] * m, pa.binary()),
                    pa.array(["bench"] * m, pa.string()),
                    pa.array([partition.value] * m, pa.int32()),
                    pa.array(range(start, start + m), pa.int64()),
                    pa.array([1_700_000_000_000_000] * m, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                    pa.array([0] * m, pa.int32()),
                ],
                schema=schema,
            )


class MemArrowSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "rill_bench_memory"

    def schema(self) -> str:
        return schema_ddl(False)

    def reader(self, schema: Any) -> DataSourceReader:
        return _MemReader(dict(self.options))


def fill(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    p = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1000000,
        }
    )
    value = os.urandom(size)
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(300) == 0
    return time.perf_counter() - t0


def best_of(repeat: int, fn: Any) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    from rill.testing import broker

    work = tempfile.mkdtemp(prefix="rill-spark-bench-")
    try:
        with broker({"num.partitions": str(args.partitions)}, subprocess=True) as b:
            with KafkaClient(b.bootstrap_servers) as c:
                c.create_topic("bench", args.partitions)
            fill_s = fill(b.bootstrap_servers, "bench", args.records, args.size, args.partitions)
            print(f"filled {args.records} x {args.size} B in {fill_s:.1f}s ({args.records / fill_s:,.0f} rec/s)")
            spark = build_session(args.master, "rill-spark-bench")
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(MemArrowSource)

            def rill_run() -> None:
                out = os.path.join(work, "rill")
                shutil.rmtree(out, ignore_errors=True)
                (
                    spark.read.format("rill")
                    .option("kafka.bootstrap.servers", b.bootstrap_servers)
                    .option("subscribe", "bench")
                    .load()
                    .write.parquet(out)
                )

            def mem_run() -> None:
                out = os.path.join(work, "mem")
                shutil.rmtree(out, ignore_errors=True)
                (
                    spark.read.format("rill_bench_memory")
                    .option("records", str(args.records))
                    .option("size", str(args.size))
                    .option("partitions", str(args.partitions))
                    .load()
                    .write.parquet(out)
                )

            # Interleaved (memory, rill, memory, rill, ...) so load from elsewhere hits both alike.
            mem_s = rill_s = float("inf")
            for _ in range(args.repeat):
                mem_s = min(mem_s, best_of(1, mem_run))
                rill_s = min(rill_s, best_of(1, rill_run))
            count = spark.read.parquet(os.path.join(work, "rill")).count()
            assert count == args.records, f"read {count} of {args.records}"
            spark.stop()
        mem_rate, rill_rate = args.records / mem_s, args.records / rill_s
        print(f"memory -> parquet: {mem_s:.2f}s  {mem_rate:,.0f} rec/s  {mem_rate * args.size / 1e6:.0f} MB/s")
        print(f"rill   -> parquet: {rill_s:.2f}s  {rill_rate:,.0f} rec/s  {rill_rate * args.size / 1e6:.0f} MB/s")
        print(f"rill / memory: {rill_rate / mem_rate:.0%} (goal >= 80%)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
