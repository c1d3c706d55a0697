"""The segment's append: a failed write is cut back on a real full disk, bad arguments change nothing,
and short writes are continued (past the iovec limit too)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rill.errors import KafkaError
from rill.log import log_segment
from rill.log.log import Log
from rill.log.log_config import LogConfig
from rill.records.builder import build_batch
from rill.records.record import Record

BASE_TS = 1_700_000_000_000


def _batch(n: int, value_size: int, tag: int) -> bytes:
    return build_batch([Record(0, BASE_TS + i, b"k%d" % tag, bytes([tag % 256]) * value_size) for i in range(n)])


def test_a_full_disk_cuts_the_failed_write_back(tmpfs: Path) -> None:
    """On a real full tmpfs the write that fails leaves the file as it was."""
    config = LogConfig(segment_bytes=10**8, segment_index_bytes=4096)
    log = Log(tmpfs / "t-0", config)
    acked = 0
    with pytest.raises(KafkaError):
        for i in range(10_000):
            acked = log.append(memoryview(bytearray(_batch(4, 1000, i))), leader_epoch=0).last_offset
    seg = log.segments[-1]
    assert os.path.getsize(seg.log_path) == seg.size == log.size_bytes
    assert log.log_end_offset == acked + 1 == seg.next_offset
    log.truncate_to(4)
    assert log.append(memoryview(bytearray(_batch(1, 10, 0))), leader_epoch=0).first_offset == 4
    log.close()


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig())
    seg = log.segments[-1]
    with pytest.raises(ValueError):
        seg.try_append(bytearray(10), 0, 0, 0, 0, 0, 1000, 1000)
    with pytest.raises((BufferError, TypeError)):
        seg.try_append(bytes(100), 0, 0, 0, 0, 0, 1000, 1000)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        seg.should_roll(1, 2, 3)  # type: ignore[call-arg]
    assert seg.size == 0 and os.path.getsize(seg.log_path) == 0
    log.close()


def test_write_all_finishes_partial_writes_and_refuses_a_write_of_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Short writes (a signal, a nearly full disk) are continued where they stopped, past the
    iovec limit too; a write that makes no progress is an error, not a loop."""
    real = os.pwritev
    bufs = [bytes([i % 251]) * (i % 5) for i in range(2_500)]  # empty ones among them
    expected = b"".join(bufs)

    def short(fd: int, views: list[memoryview], offset: int) -> int:
        assert len(views) <= 1024
        return real(fd, [bytes(b"".join(views)[:7])], offset)

    monkeypatch.setattr(os, "pwritev", short)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        for chunk in (bufs[:3], bufs):
            os.ftruncate(fd, 0)
            data = b"".join(chunk)
            assert log_segment.write_all(fd, chunk, 0) == len(data)
            assert os.pread(fd, len(expected) + 1, 0) == data
        monkeypatch.setattr(os, "pwritev", lambda fd, views, offset: 0)
        with pytest.raises(OSError, match="wrote nothing"):
            log_segment.write_all(fd, [b"abc"], 0)
    finally:
        os.close(fd)
