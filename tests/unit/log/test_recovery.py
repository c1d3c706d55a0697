"""Recovery and hostile conditions: torn and garbage tails, lost indexes, odd names, full disks,
read-only directories, and a process killed with SIGKILL in the middle of writing."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from logtest_util import BASE_TS, all_records, make_batch, open_log, small_config

from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.log.log_config import LogConfig
from rill.log.log_manager import LogManager

pytestmark = pytest.mark.timeout(120)


def filled_log(path: Path, n: int = 30, cfg: LogConfig | None = None) -> list[tuple[int, bytes | None]]:
    log = open_log(path, cfg)
    for i in range(n):
        log.append(make_batch(2, tag=i, value_size=40), leader_epoch=0, now_ms=BASE_TS)
    recs = [(r.offset, r.value) for r in all_records(log)]
    log.close(clean=False)
    return recs


def last_segment(path: Path) -> Path:
    return sorted(path.glob("*.log"))[-1]


@pytest.mark.parametrize("damage", ["torn", "garbage", "zeros", "flipped"])
def test_damaged_tail_is_truncated(tmp_path: Path, damage: str) -> None:
    d = tmp_path / "t-0"
    recs = filled_log(d)
    seg = last_segment(d)
    size = seg.stat().st_size
    if damage == "torn":
        os.truncate(seg, size - 7)
    elif damage == "garbage":
        with open(seg, "ab") as f:
            f.write(os.urandom(300))
    elif damage == "zeros":
        with open(seg, "ab") as f:
            f.write(bytes(4096))
    else:
        with open(seg, "r+b") as f:
            f.seek(size - 5)
            byte = f.read(1)
            f.seek(size - 5)
            f.write(bytes([byte[0] ^ 0x40]))
    log = open_log(d, had_clean_shutdown=False, recovery_point=0)
    expected = recs[:-2] if damage in ("torn", "flipped") else recs
    assert [(r.offset, r.value) for r in all_records(log)] == expected
    assert log.log_end_offset == len(expected) and log.truncated_bytes > 0
    # the log goes on from the cut
    assert log.append(make_batch(1), leader_epoch=0).first_offset == len(expected)
    log.close()


def test_garbage_tail_after_clean_shutdown_is_still_caught(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    for i in range(10):
        log.append(make_batch(2, tag=i), leader_epoch=0)
    log.close(clean=True)
    with open(last_segment(d), "ab") as f:
        f.write(b"\xff" * 100)
    log = open_log(d, had_clean_shutdown=True)
    assert log.log_end_offset == 20 and len(all_records(log)) == 20
    log.close()


def test_corrupt_middle_segment_cuts_the_rest(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    recs = filled_log(d, n=40, cfg=small_config(segment_bytes=800))
    segs = sorted(d.glob("*.log"))
    assert len(segs) >= 4
    with open(segs[1], "r+b") as f:
        f.seek(200)
        f.write(b"\x00" * 8)
    log = open_log(d, small_config(segment_bytes=800), had_clean_shutdown=False, recovery_point=0)
    got = [(r.offset, r.value) for r in all_records(log)]
    assert got == recs[: len(got)] and len(got) < len(recs)
    assert log.num_segments == 2 and len(list(d.glob("*.log"))) == 2
    log.close()


def test_deleted_or_corrupt_index_is_rebuilt(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    cfg = small_config(segment_bytes=2000, index_interval_bytes=100)
    log = open_log(d, cfg)
    for i in range(60):
        log.append(make_batch(2, tag=i, ts=BASE_TS + i), leader_epoch=0)
    recs = all_records(log)
    log.close(clean=True)
    segs = sorted(d.glob("*.log"))
    (segs[0].with_suffix(".index")).unlink()
    (segs[0].with_suffix(".timeindex")).unlink()
    segs[1].with_suffix(".index").write_bytes(b"\x00\x00\x01" + os.urandom(40))
    log = open_log(d, cfg, had_clean_shutdown=True)
    assert log.recovered_segments == 2
    assert all_records(log) == recs
    assert log.segments[0].offset_index.entries > 0 and segs[0].with_suffix(".index").exists()
    assert log.fetch_offset_by_timestamp(BASE_TS + 30) == (59, BASE_TS + 30)  # batch 29 = ts 29, 30
    log.close()


def test_unparsable_names_are_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "t-0"
    recs = filled_log(d, n=5)
    (d / "junk.log").write_bytes(b"nonsense")
    (d / "123.log").write_bytes(b"nonsense")
    (d / "00000000000000000999.index").write_bytes(b"")  # orphan index
    log = open_log(d, had_clean_shutdown=False)
    assert [(r.offset, r.value) for r in all_records(log)] == recs
    assert "junk.log" in caplog.text and "123.log" in caplog.text
    assert not (d / "00000000000000000999.index").exists()
    assert (d / "junk.log").exists()
    log.close()
    root = tmp_path / "root"
    root.mkdir()
    (root / "not a partition").mkdir()
    (root / "t-x").mkdir()
    (root / "t-1").mkdir()
    manager = LogManager([root], small_config())
    manager.startup()
    assert [lg.topic_partition for lg in manager.all_logs()] == [TopicPartition("t", 1)]
    manager.shutdown()


def test_enospc_simulated_at_the_write_seam(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same path as a real full disk, with the OSError injected into os.pwritev after a partial write."""
    d = tmp_path / "t-0"
    log = open_log(d)
    log.append(make_batch(3), leader_epoch=0)
    size = log.size_bytes
    real = os.pwritev

    def full(fd: int, bufs: list[memoryview], offset: int) -> int:
        real(fd, [bytes(bufs[0])[:10]], offset)  # a torn prefix reaches the file first
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwritev", full)
    with pytest.raises(KafkaError) as e:
        log.append(make_batch(3, tag=1), leader_epoch=0)
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert log.log_end_offset == 3 and log.size_bytes == size == os.path.getsize(last_segment(d))
    assert len(all_records(log)) == 3
    monkeypatch.setattr(os, "pwritev", real)
    assert log.append(make_batch(3, tag=1), leader_epoch=0).first_offset == 3
    log.close()


def test_enospc_on_a_real_full_tmpfs(tmpfs: Path) -> None:
    d = tmpfs / "t-0"
    cfg = small_config(segment_bytes=10**8, segment_index_bytes=4096)
    log = open_log(d, cfg)
    acked: list[int] = []
    with pytest.raises(KafkaError) as e:
        for i in range(10_000):
            info = log.append(make_batch(4, tag=i, value_size=1000), leader_epoch=0)
            acked.append(info.last_offset)
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert log.log_end_offset == acked[-1] + 1
    assert os.path.getsize(last_segment(d)) == log.size_bytes
    assert [r.offset for r in all_records(log)] == list(range(acked[-1] + 1))
    # the broker stays up: a truncation frees space and writing works again
    log.truncate_to(4)
    assert log.append(make_batch(1), leader_epoch=0).first_offset == 4
    log.close(clean=False)
    log = open_log(d, cfg, had_clean_shutdown=False)
    assert log.truncated_bytes == 0 and log.log_end_offset == 5
    log.close()


def test_read_only_directory(tmpfs: Path) -> None:
    root = tmpfs / "logs"
    manager = LogManager([root], small_config())
    manager.startup()
    log = manager.get_or_create_log(TopicPartition("t", 0), uuid.uuid4(), small_config())
    log.append(make_batch(2), leader_epoch=0)
    manager.shutdown()
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    manager = LogManager([root], small_config())
    manager.startup()  # must not raise
    assert root in manager.offline_dirs and manager.all_logs() == []
    with pytest.raises(KafkaError) as e:
        manager.get_or_create_log(TopicPartition("t", 1), None, small_config())
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    manager.shutdown()


CHILD = r"""
import sys, os
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from logtest_util import make_batch, small_config
from rill.log.log import Log
log = Log(Path(sys.argv[1]), small_config(segment_bytes=3_000_000, index_interval_bytes=4096))
i = 0
while True:
    info = log.append(make_batch(8, tag=i % 251, value_size=20_000), leader_epoch=0)
    if i % 3 == 2:
        log.flush()
        # one write per line: with PYTHONUNBUFFERED set, print() writes each piece separately, and the
        # kill could land between "ACK" and the offset
        sys.stdout.write(f"ACK {info.last_offset}\n")
        sys.stdout.flush()
    i += 1
"""


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.3, 0.7])
def test_sigkill_mid_write_loses_no_flushed_record(tmp_path: Path, delay: float) -> None:
    d = tmp_path / "t-0"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(d), str(Path(__file__).parent)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("ACK"), first
        time.sleep(delay)
    finally:
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
    acked = max(int(line.split()[1]) for line in [first, *out.splitlines()] if line.startswith("ACK"))
    log = open_log(
        d, small_config(segment_bytes=3_000_000, index_interval_bytes=4096), had_clean_shutdown=False
    )
    records = all_records(log)
    assert log.log_end_offset > acked
    # every record reads back at its offset with the bytes the child wrote, nothing else appears
    for r in records:
        batch_no, i = divmod(r.offset, 8)
        assert r.key == f"k{batch_no % 251}-{i}".encode()
        assert r.value == bytes([(batch_no % 251 + i) % 256]) * 20_000
    assert [r.offset for r in records] == list(range(log.log_end_offset))
    log.close()


def test_recovery_names_each_segment_it_recovers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """As Kafka logs "Recovering unflushed segment ...": an unclean start says which segments it re-reads, and
    that their missing indexes are rebuilt; a clean start says nothing of the kind."""
    d = tmp_path / "t-0"
    cfg = small_config(segment_bytes=800)
    filled_log(d, 30, cfg)
    segments = sorted(d.glob("*.log"))
    assert len(segments) > 2
    segments[-1].with_suffix(".index").unlink()
    with caplog.at_level("INFO", logger="rill.log.log_loader"):
        open_log(d, cfg, had_clean_shutdown=False, recovery_point=0).close()
    lines = [r.getMessage() for r in caplog.records if "Recovering unflushed segment" in r.getMessage()]
    assert len(lines) == len(segments)
    assert lines[-1].endswith("; its missing indexes are rebuilt") and segments[-1].name in lines[-1]
    caplog.clear()
    with caplog.at_level("INFO", logger="rill.log.log_loader"):
        open_log(d, cfg, had_clean_shutdown=True).close()
    assert not [r for r in caplog.records if "Recovering" in r.getMessage()]
