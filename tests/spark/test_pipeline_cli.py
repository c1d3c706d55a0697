"""The derived feed (per-minute counts into a topic, named in UTC in any session time zone) and the
``rill pipeline`` commands run as processes: ``load`` (killed mid-run, rerun, rerun after new records: every
record exactly once; a topic named twice is loaded once) and ``audit`` (exit status 0 when the counts match,
3 with a MISMATCH line per differing window, 4 when there was nothing to check)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka
import pyarrow.dataset as ds
import pytest

from rill.client import IdempotentProducer, KafkaClient
from rill.spark.audit import AuditCounter
from rill.spark.feed import per_minute_counts
from rill.spark.session import worker_env

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

MINUTE = 60_000
BASE = 1_700_000_040_000 - 1_700_000_040_000 % MINUTE


def test_feed_writes_per_minute_counts(
    spark: Any, bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    source, target = new_topic(partitions=2), new_topic(prefix="per-minute")
    events = [("a", 0)] * 3 + [("b", 0)] * 2 + [("a", 1)] + [("b", 2)] * 4
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, (key, minute) in enumerate(events):
        p.produce(source, key=key, value=b"e%d" % i, timestamp=BASE + minute * MINUTE + i * 100, partition=i % 2)
    # A late event pushes the watermark (1 minute) past minutes 0-2; its own window stays open.
    p.produce(source, key="z", value=b"tick", timestamp=BASE + 10 * MINUTE, partition=0)
    assert p.flush(30) == 0

    def window(minute: int) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((BASE + minute * MINUTE) / 1000))

    expected = {
        (window(0), "a", 3),
        (window(0), "b", 2),
        (window(1), "a", 1),
        (window(2), "b", 4),
    }
    # The windows are named in UTC whatever the session's time zone.
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    query = per_minute_counts(spark, bootstrap, source, target, str(tmp_path / "ckpt"))
    try:
        got: list[tuple[str, str, int]] = []
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            assert query.exception() is None
            rows = (
                spark.read.format("rill").option("kafka.bootstrap.servers", bootstrap).option("subscribe", target)
                .load().collect()
            )
            got = []
            for r in rows:
                doc = json.loads(bytes(r.value))
                got.append((doc["window_start"], doc["key"], doc["count"]))
                assert bytes(r.key).decode() == doc["key"]
            if len(got) >= len(expected):
                break
            time.sleep(1)
    finally:
        query.stop()
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    assert len(got) == len(set(got))  # each finished window written once
    assert set(got) == expected  # and the open window of the late event not at all


def _rill(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rill", "pipeline", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **worker_env()},
    )


def _loaded_offsets(output: Path) -> list[tuple[int, int]]:
    table = ds.dataset(str(output), format="parquet", partitioning="hive").to_table(columns=["partition", "offset"])
    return list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))


def test_load_and_audit_commands(
    bootstrap: str, new_topic: Callable[..., str], client: KafkaClient, tmp_path: Path
) -> None:
    topic, audit_topic = new_topic(partitions=2), f"_audit-{uuid.uuid4().hex[:10]}"
    out = tmp_path / "warehouse"
    counter = AuditCounter(window_ms=MINUTE, host="web-1")
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def produce(first: int, n: int) -> None:
        for i in range(first, first + n):
            ts, headers = counter.stamp(topic, now_ms=BASE + (i % 3) * MINUTE + i)
            p.produce(topic, value=b"v%d" % i, timestamp=ts, headers=headers, partition=i % 2)
        assert p.flush(30) == 0

    produce(0, 120)
    common = ["--bootstrap-server", bootstrap, "--master", "local[1]"]
    load = ["load", *common, "--topics", topic, "--output", str(out)]

    # A run SIGKILLed while Spark writes (or, at worst, just after it published) leaves no partial batch.
    proc = subprocess.Popen(
        [sys.executable, "-m", "rill", "pipeline", *load],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **worker_env()},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if (out / "_staging").exists() and any((out / "_staging").rglob("*.parquet")):
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM
        proc.wait(30)

    done = _rill(*load)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "published batch=" in done.stdout
    produce(120, 30)
    again = _rill(*load[:-4], "--topics", f"{topic},{topic}", "--output", str(out))  # a topic named twice: once
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"{topic}-0: loaded offsets 60..75 (15 records)" in again.stdout
    assert f"{topic}-1: loaded offsets 60..75 (15 records)" in again.stdout
    rows = _loaded_offsets(out)
    assert len(rows) == len(set(rows)) == 150
    assert sorted(rows) == [(part, o) for part in (0, 1) for o in range(75)]

    # An audit topic that does not exist yet, or holds no counts: nothing checked is not a pass (status 4).
    audit = ["audit", "--bootstrap-server", bootstrap, "--output", str(out)]
    missing = _rill(*audit, "--audit-topic", audit_topic, timeout=60)
    assert missing.returncode == 4, (missing.stdout, missing.stderr)
    assert f"audit topic '{audit_topic}' does not exist: nothing was checked" in missing.stderr
    assert "all windows match" not in missing.stdout
    empty = _rill(*audit, "--audit-topic", new_topic(prefix="audit"), timeout=60)
    assert empty.returncode == 4 and "holds no counts: nothing was checked" in empty.stderr, empty.stderr
    # The audit uses no Spark: it takes no --master.
    master = _rill(*audit, "--audit-topic", audit_topic, "--master", "local[1]", timeout=60)
    assert master.returncode == 2 and "--master" in master.stderr, master.stderr

    # The docs' snippet publishes into an audit topic that does not exist yet: the producer creates it.
    with KafkaClient(bootstrap) as c, IdempotentProducer(c) as p_audit:
        counter.publish(p_audit, audit_topic)
    ok = _rill(*audit, "--audit-topic", audit_topic, timeout=60)
    assert (ok.returncode, ok.stdout.strip().splitlines()[-1]) == (0, "audit: all windows match"), ok.stderr

    # Five events counted by the producer but never written: their window differs.
    for _ in range(5):
        counter.stamp(topic, now_ms=BASE + 7 * MINUTE)
    with IdempotentProducer(client) as audit_producer:
        counter.publish(audit_producer, audit_topic)
    bad = _rill(*audit, "--audit-topic", audit_topic, timeout=60)
    assert bad.returncode == 3, bad.stderr
    window = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((BASE + 7 * MINUTE) / 1000))
    assert f"MISMATCH {topic} window {window}: produced 5, loaded 0" in bad.stdout
    assert "audit: 1 window(s) differ" in bad.stdout
