"""A FileRegion holds its segment's file open: closing, deleting or truncating away the segment leaves the
region reading the bytes it was cut from, and the descriptor closes when the last region is dropped."""

from __future__ import annotations

import gc
import os
from pathlib import Path

from tests.unit.log.logtest_util import make_batch, open_log


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _read(region: object) -> bytes:
    fd, position, length = region.fd, region.position, region.length  # type: ignore[attr-defined]
    return os.pread(fd, length, position)


def test_a_region_outlives_its_deleted_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "a-0")
    for i in range(3):
        log.append(make_batch(5, tag=i), leader_epoch=0)
    expected = log.read_bytes(0, 1 << 20)
    (region,) = log.read(0, 1 << 20).regions
    log.delete()  # closes every segment and removes the directory
    assert _is_open(region.fd)
    other = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT)  # a file opened now gets another number
    try:
        assert other != region.fd
        assert _read(region) == expected
    finally:
        os.close(other)
    fd = region.fd
    del region
    gc.collect()
    assert not _is_open(fd)


def test_regions_outlive_truncation(tmp_path: Path) -> None:
    log = open_log(tmp_path / "a-0")  # 4 KiB segments, file.delete.delay.ms = 0
    while len(log.segments) < 4:
        log.append(make_batch(5, value_size=200, tag=log.log_end_offset), leader_epoch=0)
    middle = log.segments[2].base_offset
    expected = log.read_bytes(middle, 1 << 20)
    regions = log.read(middle, 1 << 20).regions
    assert len(regions) == 2
    assert log.truncate_to(log.segments[1].base_offset + 1)
    for seg in log.take_due_deletions(1 << 62):
        seg.delete_files()
    assert b"".join(_read(r) for r in regions) == expected
    fds = [r.fd for r in regions]
    del regions
    gc.collect()
    assert not any(_is_open(fd) for fd in fds)
    log.close()
