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


def _delete_records(w: Wire, offset: int, topic: str = "t") -> tuple[int, int]:
    body = {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": offset}]}], "timeout_ms": 5000}
    part = w.call(ApiKey.DELETE_RECORDS, 2, body)["topics"][0]["partitions"][0]
    return int(part["error_code"]), int(part["low_watermark"])


def _earliest(w: Wire, topic: str = "t") -> int:
    partitions = [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]
    body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": partitions}]}
    return int(w.call(ApiKey.LIST_OFFSETS, 5, body)["topics"][0]["partitions"][0]["offset"])


def test_delete_records_on_a_full_disk_is_refused_and_changes_nothing(tmpfs: Path) -> None:
    """Compute, make durable, then apply: KAFKA_STORAGE_ERROR when the new log start offset cannot be
    written, and the log start stays where it was, for the retry and after a restart; once space is
    back the deletion is taken and survives a kill."""
    with rill.testing.broker(data_dir=tmpfs / "data") as b:
        w = Wire(b.bootstrap_servers)
        _create(w)
        for _ in range(10):
            assert _produce(w, _batch(10)) == ErrorCode.NONE
        _fill(tmpfs, w)
        for _ in range(2):  # the retry is refused the same way
            assert _delete_records(w, 5) == (ErrorCode.KAFKA_STORAGE_ERROR, -1)
            assert _earliest(w) == 0
        w.close()

        (tmpfs / "filler").unlink()
        b.restart(kill=True)
        w = Wire(b.bootstrap_servers)
        assert _earliest(w) == 0  # nothing of the refused deletion reached the disk either
        assert _delete_records(w, 5) == (ErrorCode.NONE, 5)
        w.close()
        b.restart(kill=True)
        w = Wire(b.bootstrap_servers)
        assert _earliest(w) == 5
        w.close()
