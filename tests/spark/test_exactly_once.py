"""The rill sink's exactlyOnce mode: micro-batches written in transactions the driver commits, a replayed batch
not written twice, a prepared transaction of a dead run aborted, and a driver SIGKILLed again and again."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from tests.compat._txn import BROKER_CONFIGS, read_all

from rill.client import KafkaClient
from rill.client.transactional import TransactionalProducer
from rill.common import TopicPartition
from rill.spark.options import OptionError, SourceOptions
from rill.spark.session import worker_env

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

DRIVER = Path(__file__).with_name("eos_driver.py")


@pytest.fixture(scope="module")
def broker() -> Iterator[Any]:
    """A broker of its own with transactions configured for one node (overrides the session's broker)."""
    from rill.testing import broker as rill_broker

    with rill_broker({**BROKER_CONFIGS, "num.partitions": "1", "log.retention.ms": "-1"}, subprocess=True) as b:
        yield b


def produce_keyed(bootstrap: str, topic: str, start: int, n: int, partitions: int) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(start, start + n):
        p.produce(topic, key=b"k%d" % i, value=b"%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def copy_once(spark: Any, bootstrap: str, src: str, dst: str, ckpt: Path, **options: str) -> None:
    q = (
        spark.readStream.format("rill")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
        .selectExpr("key", "value")
        .writeStream.format("rill")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", dst)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", str(ckpt))
        .options(**options)
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert q.awaitTermination(120), "the query did not finish within 120 s"
        assert q.exception() is None, q.exception()
    finally:
        q.stop()


def exactly_once(bootstrap: str, dst: str, partitions: int, n: int) -> list[bytes]:
    """The target read with read_committed holds each source value once; returns the uncommitted view."""
    got = Counter(read_all(bootstrap, dst, partitions))
    expected = Counter(b"%d" % i for i in range(n))
    assert got == expected, (sum(got.values()), sorted((got - expected).items())[:5], sorted(expected - got)[:5])
    return read_all(bootstrap, dst, partitions, committed=False)


def test_options_are_checked(spark: Any, bootstrap: str, new_topic: Callable[..., str]) -> None:
    opts = SourceOptions.parse(
        {"kafka.bootstrap.servers": bootstrap, "exactlyOnce": "true", "checkpointLocation": "/x/ckpt"}, for_write=True
    )
    assert opts.exactly_once and opts.transactional_id_prefix and opts.transactional_id_prefix.startswith("rill-spark-")
    same = SourceOptions.parse({"kafka.bootstrap.servers": bootstrap, "checkpointlocation": "/x/ckpt"}, for_write=True)
    assert same.transactional_id_prefix == opts.transactional_id_prefix
    with pytest.raises(OptionError, match="transactionalIdPrefix must not be empty"):
        SourceOptions.parse({"kafka.bootstrap.servers": bootstrap, "transactionalIdPrefix": " "}, for_write=True)
    dst = new_topic(partitions=1)
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="exactlyOnce applies to streaming writes"):
        df.write.format("rill").option("kafka.bootstrap.servers", bootstrap).option("topic", dst).option(
            "exactlyOnce", "true"
        ).option("transactionalIdPrefix", "x").mode("append").save()


def test_copy_replayed_batch_and_dead_prepared_transaction(
    spark: Any, bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    src, dst = new_topic(partitions=2), new_topic(partitions=2)
    ckpt = tmp_path / "ckpt"
    prefix = f"eos-{dst}"
    produce_keyed(bootstrap, src, 0, 500, 2)
    copy_once(spark, bootstrap, src, dst, ckpt, transactionalIdPrefix=prefix)
    assert len(exactly_once(bootstrap, dst, 2, 500)) == 500

    # The driver "died" after committing the last batch's transactions but before its commit log entry:
    # Spark replays that batch. Meanwhile a task of the dead run had left a transaction prepared.
    commits = sorted((ckpt / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    last = commits[-1]
    assert last.name.isdigit()
    last.unlink()
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)  # Spark's checksum of the entry
    with KafkaClient(bootstrap, timeout_s=20) as client:
        zombie = TransactionalProducer(client, f"{prefix}-0")
        zombie.begin_transaction()
        zombie.send(dst, b"zombie", partition=0)
        zombie.prepare_commit()
        record = client.fetch_committed(f"{prefix}-0", [TopicPartition(dst, 0)])[TopicPartition(dst, 0)]
    assert record == int(last.name)  # the batch record of task 0: the last batch it committed
    produce_keyed(bootstrap, src, 500, 100, 2)
    copy_once(spark, bootstrap, src, dst, ckpt, transactionalIdPrefix=prefix)
    uncommitted = exactly_once(bootstrap, dst, 2, 600)
    # The replayed batch was not written again; the zombie's record is in the log, aborted.
    assert Counter(uncommitted) == Counter([b"%d" % i for i in range(600)] + [b"zombie"])
    assert (ckpt / "commits" / last.name).exists()


def _start_driver(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(DRIVER), *args],
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, **worker_env()},
        start_new_session=True,  # its own process group: the JVM dies with it
    )


def _batches(log: Path) -> int:
    return log.read_text(errors="replace").count("\nbatch ")


@pytest.mark.slow
def test_driver_sigkilled_during_micro_batches(
    spark: Any, bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Three SIGKILLs of the driver at random moments of its micro-batches, then a run to the end: the target,
    read with read_committed, holds every source record exactly once."""
    src, dst = new_topic(partitions=3), new_topic(partitions=2)
    ckpt = tmp_path / "ckpt"
    total = 0
    rng = random.Random(23)
    kills = 0
    for run in range(3):
        produce_keyed(bootstrap, src, total, 1500, 3)
        total += 1500
        log = tmp_path / f"driver{run}.log"
        proc = _start_driver([bootstrap, src, dst, str(ckpt), "continuous", "200"], log)
        try:
            deadline = time.monotonic() + 60
            while _batches(log) < 2 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            time.sleep(rng.uniform(0.0, 0.6))  # somewhere inside a micro-batch
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            kills += 1
    log = tmp_path / "driver-final.log"
    done = _start_driver([bootstrap, src, dst, str(ckpt), "available-now", "2000"], log)
    assert done.wait(180) == 0, log.read_text(errors="replace")[-3000:]
    uncommitted = exactly_once(bootstrap, dst, 2, total)
    assert kills == 3
    assert len(uncommitted) >= total
