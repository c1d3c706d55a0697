"""SIGKILL of a broker at random points of its log cleanings, many times: after each kill the log recovers
(the next start deletes ``.cleaned`` files and completes ``.swap`` ones) and holds the compaction invariants.

Each run appends a round of updates (and tombstones) of a compacted topic with small segments, then kills the
broker while the cleaner, slowed by ``log.cleaner.io.max.bytes.per.second`` so that a cleaning lasts about half
a second, works on the log: one run in three at a random moment of the next 0.6 s (building the key map,
rewriting, renaming, swapping), one within 0.1 s of the moment the rewrite's first file appears (so that kills
land in rewrites however late a loaded machine starts the cleaning), the third once the log is clean (idle, or
just as the next cleaning starts), which also keeps the dirty part from growing over the runs. What the kill
left on disk (no cleaning files, half-written ``.cleaned`` segments, complete ``.swap`` ones) is recorded; then
the broker starts with the cleaner off and the test checks, against every record it was acknowledged with its
offset:

- the segments on disk cover disjoint offset ranges in order, each starting at or after its file's base
  offset, and no ``.cleaned`` or ``.swap`` file is left (none lost, none doubled);
- reading the partition from the start gives offsets strictly increasing, each record exactly the one
  acknowledged at that offset (offsets are never reassigned);
- every acknowledged record is still there unless a later record of its key is (so each key reads as its
  latest value, tombstones included: ``delete.retention.ms`` is a day), and every record of the segment that
  was active at the kill is there (the cleaner never touches it).

Then the broker restarts with its cleaner for the next run.
"""

from __future__ import annotations

import contextlib
import os
import random
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import rill.testing
from rill.log.checkpoints import read_offset_checkpoint
from rill.log.log_cleaner_manager import CLEANER_OFFSET_CHECKPOINT

pytestmark = pytest.mark.timeout(240)

RUNS = 25
KEYS = 400
PER_RUN = 1500
PAD = b"x" * 200  # values of about 200 bytes: each run appends about 20 segments
CLEANING = {
    "log.cleaner.backoff.ms": "10",
    "log.segment.delete.delay.ms": "0",
    "log.cleaner.io.max.bytes.per.second": "1500000",
    "num.partitions": "1",
}

Record = tuple[bytes, bytes | None]


def _segment_ranges(log_dir: Path) -> list[tuple[int, int, int]]:
    """(file base offset, first offset, last offset) of each non-empty ``.log`` file, read from its batch
    headers (base offset at byte 0, length at 8, last offset delta at 23)."""
    out = []
    for path in sorted(log_dir.glob("*.log")):
        data = path.read_bytes()
        pos = 0
        first = last = -1
        while pos + 61 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            if length <= 0:
                break
            (delta,) = struct.unpack_from(">i", data, pos + 23)
            if first < 0:
                first = base
            last = base + delta
            pos += 12 + length
        assert pos == len(data), f"{path.name}: {len(data) - pos} trailing bytes after the last whole batch"
        if first >= 0:
            out.append((int(path.name.split(".")[0]), first, last))
    return out


def _wait_for_rewrite(log_dir: Path, timeout: float) -> None:
    """Until a cleaning writes its ``.cleaned`` segments (or ``timeout`` passes: the kill then lands where it may)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError):
            if any(p.name.endswith((".cleaned", ".swap")) for p in log_dir.iterdir()):
                return
        time.sleep(0.005)


def _wait_for_clean(log_dir: Path, timeout: float) -> None:
    """Until the cleaner's checkpoint says the log is clean up to its active segment."""
    tp = TopicPartition("table", 0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        active = max(int(name.split(".")[0]) for name in os.listdir(log_dir) if name.endswith(".log"))
        with contextlib.suppress(OSError, ValueError):
            saved = read_offset_checkpoint(log_dir.parent / CLEANER_OFFSET_CHECKPOINT)
            if any((k.topic, k.partition) == (tp.topic, tp.partition) and v >= active for k, v in saved.items()):
                return
        time.sleep(0.01)
    raise AssertionError("the log was not cleaned up to its active segment")


def _read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False})
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + 30
        while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            out.append((msg.offset(), msg.key(), msg.value()))
        assert out and out[-1][0] == end - 1, "the partition could not be read to its end"
        return out
    finally:
        consumer.close()


def _check(acked: dict[int, Record], read: list[tuple[int, bytes, bytes | None]], active_base: int) -> None:
    offsets = [o for o, _, _ in read]
    assert offsets == sorted(set(offsets)), "offsets not strictly increasing (a record doubled or reordered)"
    present = set(offsets)
    for offset, key, value in read:
        assert acked.get(offset) == (key, value), f"offset {offset} holds another record than was acknowledged"
    last_of_key: dict[bytes, int] = {}
    for offset in sorted(acked):
        last_of_key[acked[offset][0]] = offset
    for offset, (key, _) in acked.items():
        if offset not in present:
            assert last_of_key[key] > offset and last_of_key[key] in present, f"offset {offset} lost"
            assert offset < active_base, f"offset {offset} of the active segment removed"


@pytest.mark.slow
def test_sigkill_at_random_points_of_cleanings_leaves_a_log_that_recovers_whole(tmp_path: Path) -> None:
    rng = random.Random(22)
    b = rill.testing.TestBroker(CLEANING, subprocess=True, data_dir=tmp_path / "data")
    b.start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        configs = {"cleanup.policy": "compact", "segment.bytes": "16384", "min.cleanable.dirty.ratio": "0.01"}
        admin.create_topics([NewTopic("table", 1, config=configs)])["table"].result(10)
        del admin  # no client reconnecting to the killed broker meanwhile
        log_dir = b.data_dir / "logs" / "table-0"
        acked: dict[int, Record] = {}
        seen: dict[str, int] = {}
        n = 0
        for run in range(RUNS):
            producer = Producer(
                {"bootstrap.servers": b.bootstrap_servers, "linger.ms": 2, "batch.size": 4096, "acks": "all"}
            )
            errors: list[object] = []

            def delivered(err: object, msg: object, record: Record, errors: list[object] = errors) -> None:
                if err is not None:
                    errors.append(err)
                else:
                    acked[msg.offset()] = record  # type: ignore[attr-defined]

            for _ in range(PER_RUN):
                record: Record = (f"key-{rng.randrange(KEYS)}".encode(), None if n % 97 == 0 else b"v%d-" % n + PAD)
                producer.produce(
                    "table", key=record[0], value=record[1], on_delivery=lambda e, m, r=record: delivered(e, m, r)
                )
                n += 1
            assert producer.flush(30) == 0 and not errors
            del producer  # no client reconnecting to the killed broker meanwhile
            if run % 3 == 0:  # once all is cleaned: the log idle, or a kill just as a new cleaning starts
                _wait_for_clean(log_dir, 20.0)
                time.sleep(rng.uniform(0.0, 0.05))
            elif run % 3 == 1:  # a random moment of the cleaning: building the key map, writing, renaming, swapping
                time.sleep(rng.uniform(0.0, 0.6))
            else:  # once the rewrite has begun, however late a loaded machine starts the cleaning
                _wait_for_rewrite(log_dir, 10.0)
                time.sleep(rng.uniform(0.0, 0.1))
            b.kill()
            names = [p.name for p in log_dir.iterdir()]
            state = "+".join(s for s in ("cleaned", "swap") if any(x.endswith(f".{s}") for x in names)) or "none"
            seen[state] = seen.get(state, 0) + 1
            active_base = max(int(x.split(".")[0]) for x in names if x.endswith(".log"))
            b.overrides["log.cleaner.enable"] = "false"  # nothing moves while the recovered log is checked
            b.start()
            assert not any(p.name.endswith((".cleaned", ".swap")) for p in log_dir.iterdir())
            ranges = _segment_ranges(log_dir)
            for (base, first, last), nxt in zip(ranges, [*ranges[1:], None], strict=True):
                assert base <= first <= last
                assert nxt is None or last < nxt[1], f"segments {base} and {nxt[0]} overlap"
            _check(acked, _read_all(b.bootstrap_servers, "table"), active_base)
            b.stop()
            b.overrides["log.cleaner.enable"] = "true"
            b.start()
        print(f"{RUNS} kills, {n} records: what each kill left: {seen}")
        assert RUNS - seen.get("none", 0) >= RUNS // 5, f"too few kills landed in a cleaning's rewrite: {seen}"
    finally:
        b.close()
