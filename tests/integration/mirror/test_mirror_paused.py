"""A mirror process paused past its session timeout (a long stop of the machine, a stalled VM): the source
group takes its partitions away, and when it runs again it joins again and copies on from the committed
positions, as a Kafka consumer does, instead of ending."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from tests.integration.mirror.test_mirror_kills import _create, _Mirror, _produce, _read, _stop, fast_groups

from rill.testing import TestBroker

__all__ = ["fast_groups"]
pytestmark = pytest.mark.timeout(240)


def _holds(dst: str, at_least: int) -> bool:
    """Whether the target topic holds ``at_least`` records in each partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": dst, "group.id": "watcher"})
    try:
        ends = []
        for p in range(2):
            try:
                ends.append(consumer.get_watermark_offsets(TopicPartition("paused", p), timeout=5)[1])
            except Exception:
                ends.append(0)
        return min(ends) >= at_least
    finally:
        consumer.close()


def _copied(dst: str, at_least: int) -> None:
    deadline = time.monotonic() + 60
    while not _holds(dst, at_least):
        assert time.monotonic() < deadline, "the first records were not copied"
        time.sleep(0.2)


def test_a_mirror_paused_past_its_session_timeout_copies_on(
    fast_groups: tuple[TestBroker, TestBroker], tmp_path: Path
) -> None:
    source, target = fast_groups
    src, dst = source.bootstrap_servers, target.bootstrap_servers
    _create(src, "paused")
    _produce(src, "paused", 0, 200)
    mirror = _Mirror(src, dst, "paused", "paused", tmp_path)
    proc = mirror.start()
    try:
        _copied(dst, 100)
        proc.send_signal(signal.SIGSTOP)
        time.sleep(4)  # well past the 1.5 s session timeout: the source group drops the member
        _produce(src, "paused", 200, 200)
        proc.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 60
        while not _holds(dst, 200):
            assert proc.poll() is None, f"the mirror ended ({proc.returncode}): {mirror.last_log()}"
            assert time.monotonic() < deadline, f"the mirror copies nothing more: {mirror.last_log()}"
            time.sleep(0.3)
        got = _read(dst, "paused", 2, at_least={0: 200, 1: 200})
        values = {v for vs in got.values() for v in vs}
        assert values >= {b"paused-%07d" % n for n in range(400)}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            _stop(proc, mirror)
