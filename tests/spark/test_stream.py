"""Streaming reads: checkpointed offsets across stop/restart and a SIGKILLed driver, admission control,
AvailableNow, partitions added while running; streaming writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest

from rill.spark.session import worker_env

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

DRIVER = Path(__file__).with_name("stream_driver.py")


def produce_seq(bootstrap: str, topic: str, start: int, n: int, partitions: int) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, value=b"%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def check_exactly_once(spark: Any, output: Path, expected: int, partitions: int) -> None:
    """Spark's file sink, read by Spark (which honours the sink's commit log): every offset once."""
    rows = spark.read.parquet(str(output)).select("partition", "offset", "value").collect()
    keys = [(r.partition, r.offset) for r in rows]
    assert len(keys) == len(set(keys)), "duplicates in the sink"
    assert sorted(int(bytes(r.value)) for r in rows) == list(range(expected))
    for p in range(partitions):
        offs = sorted(o for pp, o in keys if pp == p)
        assert offs == list(range(len(offs))), f"gap in partition {p}"


def stream_once(
    spark: Any, bootstrap: str, topic: str, out: Path, ckpt: Path, **options: str
) -> tuple[list[Any], Exception | None]:
    """One AvailableNow run of the source into a Parquet sink over the checkpoint: the query's progress
    reports, and the error it ended with (None when it finished)."""
    q = (
        spark.readStream.format("rill")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("fetchOffset.retryIntervalMs", "100")
        .options(**options)
        .load()
        .select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    error: Exception | None = None
    try:
        if not q.awaitTermination(120):
            error = TimeoutError("the query did not finish within 120 s")
    except Exception as e:
        error = e
    finally:
        q.stop()
    return list(q.recentProgress), error


def run_stream(spark: Any, bootstrap: str, topic: str, out: Path, ckpt: Path, **options: str) -> list[Any]:
    progress, error = stream_once(spark, bootstrap, topic, out, ckpt, **options)
    assert error is None
    return progress


def test_stream_restart_admission_control_and_new_partitions(
    spark: Any, bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    produce_seq(bootstrap, topic, 0, 300, 2)
    progress = run_stream(spark, bootstrap, topic, out, ckpt, maxOffsetsPerTrigger="100")
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert sum(sizes) == 300 and max(sizes) <= 101 and len(sizes) >= 3  # admission control
    check_exactly_once(spark, out, 300, 2)

    # Restart with more data and a partition added while stopped: read from where the checkpoint ends,
    # and the new partition from its earliest offset. Its backlog counts against maxOffsetsPerTrigger.
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_partitions([confluent_kafka.admin.NewPartitions(topic, 3)])
    futures[topic].result(30)
    time.sleep(0.5)
    produce_seq(bootstrap, topic, 300, 150, 3)
    progress = run_stream(spark, bootstrap, topic, out, ckpt, maxOffsetsPerTrigger="100")
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert sum(sizes) == 150 and max(sizes) <= 100, sizes
    check_exactly_once(spark, out, 450, 3)


def test_stream_over_a_recreated_topic_reports_data_loss(
    spark: Any,
    bootstrap: str,
    new_topic: Callable[..., str],
    recreate_topic: Callable[..., None],
    tmp_path: Path,
) -> None:
    topic = new_topic()
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    produce_seq(bootstrap, topic, 0, 50, 1)
    assert stream_once(spark, bootstrap, topic, out, ckpt)[1] is None
    # Deleted and recreated while the query is stopped: its offsets (0..19) are below the checkpoint's 50.
    recreate_topic(topic)
    produce_seq(bootstrap, topic, 1000, 20, 1)
    failed = stream_once(spark, bootstrap, topic, out, ckpt)[1]
    assert failed is not None and f"Partition {topic}-0's offset was changed from 50 to 20" in str(failed)
    # failOnDataLoss=false: a warning, and the query goes on from the new offsets.
    assert stream_once(spark, bootstrap, topic, out, ckpt, failOnDataLoss="false")[1] is None
    produce_seq(bootstrap, topic, 2000, 30, 1)
    assert stream_once(spark, bootstrap, topic, out, ckpt, failOnDataLoss="false")[1] is None
    values = sorted(int(bytes(r.value)) for r in spark.read.parquet(str(out)).collect())
    assert values == list(range(50)) + list(range(2000, 2030))


def _memory_count(spark: Any, name: str, want: int, within_s: float) -> int:
    deadline = time.monotonic() + within_s
    while True:
        n = int(spark.table(name).count())
        if n >= want or time.monotonic() > deadline:
            return n
        time.sleep(0.2)


def test_min_offsets_per_trigger_and_max_trigger_delay(
    spark: Any, bootstrap: str, new_topic: Callable[..., str]
) -> None:
    def start(topic: str, name: str, min_offsets: str, delay: str) -> Any:
        return (
            spark.readStream.format("rill")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("minOffsetsPerTrigger", min_offsets)
            .option("maxTriggerDelay", delay)
            .load()
            .select("offset")
            .writeStream.format("memory")
            .queryName(name)
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    held, delayed = new_topic(partitions=2), new_topic()
    produce_seq(bootstrap, held, 0, 10, 2)
    produce_seq(bootstrap, delayed, 0, 10, 1)
    q = start(held, "min_offsets_held", "50", "10m")
    try:
        assert _memory_count(spark, "min_offsets_held", 10, 90) == 10  # the first batch is never held back
        produce_seq(bootstrap, held, 10, 30, 2)
        assert _memory_count(spark, "min_offsets_held", 11, 4) == 10  # 30 new offsets < 50: no batch
        produce_seq(bootstrap, held, 40, 25, 2)
        assert _memory_count(spark, "min_offsets_held", 65, 60) == 65  # 55 >= 50: one batch reads them
        assert q.exception() is None
    finally:
        q.stop()
    q = start(delayed, "min_offsets_delayed", "1000", "2s")
    try:
        assert _memory_count(spark, "min_offsets_delayed", 10, 90) == 10
        produce_seq(bootstrap, delayed, 10, 5, 1)
        # Fewer than 1000 new offsets, but no batch is held back longer than maxTriggerDelay.
        assert _memory_count(spark, "min_offsets_delayed", 15, 60) == 15
    finally:
        q.stop()


def test_stream_write_into_a_topic(spark: Any, bootstrap: str, new_topic: Callable[..., str], tmp_path: Path) -> None:
    src, dst = new_topic(partitions=2), new_topic(partitions=1)
    produce_seq(bootstrap, src, 0, 200, 2)
    q = (
        spark.readStream.format("rill")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("CAST(partition AS STRING) AS key", "concat(value, '!') AS value")
        .writeStream.format("rill")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", dst)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None
    rows = (
        spark.read.format("rill").option("kafka.bootstrap.servers", bootstrap).option("subscribe", dst).load().collect()
    )
    assert sorted(bytes(r.value) for r in rows) == sorted(b"%d!" % i for i in range(200))


def _start_driver(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(DRIVER), *args],
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, **worker_env()},
        start_new_session=True,  # its own process group: the JVM dies with it
    )


@pytest.mark.slow
def test_stream_survives_sigkill_of_the_driver(
    spark: Any, bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    out, ckpt, log = tmp_path / "out", tmp_path / "ckpt", tmp_path / "driver.log"
    produce_seq(bootstrap, topic, 0, 3000, 2)
    args = [bootstrap, topic, str(out), str(ckpt)]
    proc = _start_driver([*args, "continuous", "200"], log)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if log.read_text(errors="replace").count("\nbatch ") >= 3 or proc.poll() is not None:
                break
            time.sleep(0.2)
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    produce_seq(bootstrap, topic, 3000, 500, 2)
    done = _start_driver([*args, "available-now"], tmp_path / "driver2.log")
    assert done.wait(180) == 0, (tmp_path / "driver2.log").read_text(errors="replace")[-3000:]
    check_exactly_once(spark, out, 3500, 2)
