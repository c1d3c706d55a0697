"""Log: append, read, time lookup, rolling, retention, truncation, restart, config."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from logtest_util import BASE_TS, all_records, make_batch, open_log, small_config

from rill.errors import ErrorCode, KafkaError
from rill.log.checkpoints import read_epoch_checkpoint, read_partition_metadata
from rill.log.log import Log, parse_topic_partition
from rill.log.log_config import LogConfig
from rill.records import batch as b
from rill.records.record import decode_records_in

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("append_input_kind")]


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "orders-0"


def test_layout_and_offsets(log_dir: Path) -> None:
    tid = uuid.uuid4()
    log = open_log(log_dir, topic_id=tid)
    info = log.append(make_batch(3), leader_epoch=0, now_ms=BASE_TS)
    assert (info.first_offset, info.last_offset, info.record_count, info.duplicate) == (0, 2, 3, False)
    info = log.append(make_batch(2, tag=1), leader_epoch=0, now_ms=BASE_TS)
    assert (info.first_offset, info.last_offset) == (3, 4)
    assert log.log_end_offset == 5 and (log.topic, log.partition) == ("orders", 0)
    names = sorted(os.listdir(log_dir))
    assert "00000000000000000000.log" in names and "00000000000000000000.index" in names
    assert "00000000000000000000.timeindex" in names and "partition.metadata" in names
    assert read_partition_metadata(log_dir / "partition.metadata") == tid
    assert read_epoch_checkpoint(log_dir / "leader-epoch-checkpoint") == [(0, 0)]
    recs = all_records(log)
    assert [r.offset for r in recs] == [0, 1, 2, 3, 4]
    assert recs[3].key == b"k1-0"
    data = log.read_bytes(0, 1 << 20)
    h = b.parse_header(data)
    assert h.partition_leader_epoch == 0 and b.crc_ok(data, 0, h)
    log.close()


class FsyncSpy:
    """Counts ``os.fsync`` calls and names what ``Log`` syncs by path; both still reach the disk."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from rill.log import local_log as log_module  # Log's durability (flush_segments, _sync_names)

        self.names: list[str] = []
        self.calls = 0
        real_path, real_fsync = log_module.fsync_path, os.fsync

        def sync_path(path: Path) -> None:
            real_path(path)
            self.names.append(path.name)

        def fsync(fd: int) -> None:
            real_fsync(fd)
            self.calls += 1

        monkeypatch.setattr(log_module, "fsync_path", sync_path)
        monkeypatch.setattr(os, "fsync", fsync)


def test_names_made_durable_by_the_next_flush(log_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Creating a log fsyncs nothing (a 1,000-partition topic is 5,000 new files); the first flush
    syncs the checkpoint files, the directory and its entry in the log dir, a later one only what
    changed since (the directory after a roll, the epoch checkpoint after a new epoch)."""
    spy = FsyncSpy(monkeypatch)
    log = open_log(log_dir, topic_id=uuid.uuid4())
    log.leader_epoch_cache.assign(0, 0)
    assert spy.calls == 0 and spy.names == []
    log.append(make_batch(3), leader_epoch=0, now_ms=BASE_TS)
    log.flush()
    assert spy.names == ["partition.metadata", "leader-epoch-checkpoint", "orders-0", log_dir.parent.name]
    spy.names.clear()
    log.append(make_batch(3, tag=1), leader_epoch=0, now_ms=BASE_TS)
    log.flush()
    assert spy.names == []  # only segment bytes changed
    log.roll()
    log.flush()
    assert spy.names == ["partition.metadata", "leader-epoch-checkpoint", "orders-0"]
    spy.names.clear()
    log.append(make_batch(1, tag=2), leader_epoch=1, now_ms=BASE_TS)
    log.flush()
    assert spy.names == ["partition.metadata", "leader-epoch-checkpoint", "orders-0"]
    assert read_epoch_checkpoint(log_dir / "leader-epoch-checkpoint") == [(0, 0), (1, 6)]
    log.close()
    reopened = open_log(log_dir)
    assert [r.offset for r in all_records(reopened)] == list(range(7))
    reopened.close()


def test_idle_logs_flush_and_close_without_fsync(log_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a broker's shutdown does to each partition: an empty log, or one with nothing new since
    its last flush and snapshot, costs no fsync (as in Kafka: no flush at or below the recovery point,
    no producer snapshot at an offset already snapshotted)."""
    spy = FsyncSpy(monkeypatch)
    log = open_log(log_dir, topic_id=uuid.uuid4())
    log.leader_epoch_cache.assign(0, 0)
    log.flush()
    log.close()
    assert spy.calls == 0
    log = open_log(log_dir, had_clean_shutdown=True)
    log.append(make_batch(3), leader_epoch=0, now_ms=BASE_TS)
    log.flush()
    assert spy.calls > 0
    spy.calls = 0
    log.flush()
    assert spy.calls == 0
    log.close()  # the producer snapshot at the new log end: one fsync
    assert spy.calls == 1
    assert (log_dir / "00000000000000000003.snapshot").exists()
    spy.calls = 0
    log = open_log(log_dir, had_clean_shutdown=True, recovery_point=3)
    log.flush()
    log.close()
    assert spy.calls == 0
    log = open_log(log_dir, had_clean_shutdown=True, recovery_point=3)
    assert [r.offset for r in all_records(log)] == [0, 1, 2]
    log.close()


def test_read_semantics(log_dir: Path) -> None:
    log = open_log(log_dir, small_config(segment_bytes=10_000_000))
    sizes = []
    for i in range(10):
        log.append(make_batch(5, tag=i), leader_epoch=0, now_ms=BASE_TS)
    sizes = [h.size for _, h in b.iter_batches(log.read_bytes(0, 1 << 20))]
    assert len(sizes) == 10
    # an offset inside a batch returns that whole batch
    data = log.read_bytes(7, 1 << 20)
    assert b.parse_header(data).base_offset == 5
    # max_bytes bounds whole batches; below one batch still returns one (min_one_batch)
    assert len(log.read_bytes(0, sizes[0] + sizes[1] + 5)) == sizes[0] + sizes[1]
    assert len(log.read_bytes(0, 1)) == sizes[0]
    assert log.read_bytes(0, 1, min_one_batch=False) == b""
    # max_offset (the high watermark) excludes batches at or above it
    data = log.read_bytes(0, 1 << 20, max_offset=20)
    assert [h.base_offset for _, h in b.iter_batches(data)] == [0, 5, 10, 15]
    assert log.read_bytes(20, 1 << 20, max_offset=20) == b""
    assert log.read(50, 100).regions == []
    for bad in (-1, 51):
        with pytest.raises(KafkaError) as e:
            log.read(bad, 100)
        assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    log.close()


def test_read_across_segments_returns_several_regions(log_dir: Path) -> None:
    log = open_log(log_dir, small_config(segment_bytes=600))
    for i in range(20):
        log.append(make_batch(2, tag=i, value_size=50), leader_epoch=0, now_ms=BASE_TS)
    assert log.num_segments > 3
    info = log.read(0, 1 << 20)
    assert len(info.regions) == log.num_segments
    assert info.size == log.size_bytes
    assert [r.offset for r in all_records(log)] == list(range(40))
    log.close()


def test_validation_errors(log_dir: Path) -> None:
    log = open_log(log_dir, small_config(max_message_bytes=500))
    good = make_batch(2)
    corrupt = bytearray(good)
    corrupt[-1] ^= 1
    old_magic = bytearray(good)
    old_magic[16] = 1
    cases: list[tuple[bytes, ErrorCode]] = [
        (bytes(corrupt), ErrorCode.CORRUPT_MESSAGE),
        (good[:-3], ErrorCode.CORRUPT_MESSAGE),
        (good + b"\x00" * 5, ErrorCode.CORRUPT_MESSAGE),
        (bytes(old_magic), ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT),
        (make_batch(1, value_size=600), ErrorCode.MESSAGE_SIZE_TOO_LARGE),
    ]
    zero = bytearray(good)
    zero[57:61] = (0).to_bytes(4, "big")
    b.set_log_append_time(zero, 0, 1)  # any CRC rewrite will do
    cases.append((bytes(zero), ErrorCode.INVALID_RECORD))
    for data, code in cases:
        with pytest.raises(KafkaError) as e:
            log.append(data, leader_epoch=0, now_ms=BASE_TS)
        assert e.value.code == code, data
    assert log.log_end_offset == 0 and log.size_bytes == 0
    info = log.append(memoryview(good), leader_epoch=0, now_ms=BASE_TS)  # read-only input is fine
    assert info.last_offset == 1
    log.close()


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_a_client_batch_marked_log_append_time_is_refused(tmp_path: Path, timestamp_type: str) -> None:
    """Only the broker sets LogAppendTime: a producer's batch carrying it gets INVALID_TIMESTAMP on
    both append paths (writable single batch, read-only input) and on either topic type, while a
    follower copies such a batch (its leader stamped it) as it is."""
    log = open_log(tmp_path / "t-0", small_config(message_timestamp_type=timestamp_type))
    marked = bytearray(make_batch(2))
    b.set_log_append_time(marked, 0, BASE_TS + 7)
    for data in (marked, bytes(marked), bytes(make_batch(1)) + bytes(marked)):
        with pytest.raises(KafkaError) as e:
            log.append(data, leader_epoch=0, now_ms=BASE_TS)
        assert e.value.code == ErrorCode.INVALID_TIMESTAMP, data
    assert log.log_end_offset == 0 and log.size_bytes == 0
    follower = open_log(tmp_path / "f-0", small_config())
    assert follower.append_as_follower(bytes(marked)).last_offset == 1
    assert b.parse_header(follower.read_bytes(0, 1 << 20)).timestamp_type == b.TIMESTAMP_LOG_APPEND_TIME
    log.close()
    follower.close()


def test_log_append_time(log_dir: Path) -> None:
    log = open_log(log_dir, small_config(message_timestamp_type="LogAppendTime"))
    info = log.append(make_batch(3, ts=5), leader_epoch=0, now_ms=BASE_TS + 99)
    assert info.log_append_time == BASE_TS + 99
    data = log.read_bytes(0, 1 << 20)
    h = b.parse_header(data)
    assert h.timestamp_type == b.TIMESTAMP_LOG_APPEND_TIME and h.max_timestamp == BASE_TS + 99
    assert b.crc_ok(data, 0, h)
    assert {r.timestamp for r in decode_records_in(data)} == {BASE_TS + 99}
    assert log.fetch_offset_by_timestamp(BASE_TS) == (0, BASE_TS + 99)
    log.close()


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_writable_input_is_patched_in_place_and_logs_the_same_bytes(tmp_path: Path, timestamp_type: str) -> None:
    config = small_config(message_timestamp_type=timestamp_type)
    batches = make_batch(3) + make_batch(2, tag=1, ts=BASE_TS + 10)
    logs = [open_log(tmp_path / f"{name}-0", config) for name in ("ro", "rw")]
    for log in logs:
        log.append(make_batch(1), leader_epoch=3, now_ms=BASE_TS)
    buf = bytearray(batches)
    infos = [
        logs[0].append(batches, leader_epoch=3, now_ms=BASE_TS + 50),
        logs[1].append(buf, leader_epoch=3, now_ms=BASE_TS + 50),
    ]
    assert infos[0] == infos[1] and (infos[0].first_offset, infos[0].last_offset) == (1, 5)
    tail = logs[0].read_bytes(1, 1 << 20)
    assert tail == logs[1].read_bytes(1, 1 << 20) == bytes(buf) != batches
    for pos, h in b.iter_batches(tail):
        assert h.partition_leader_epoch == 3 and b.crc_ok(tail, pos, h)
    assert [r.offset for r in decode_records_in(tail)] == [1, 2, 3, 4, 5]
    for log in logs:
        log.close()


def test_roll_by_size_index_and_time(tmp_path: Path) -> None:
    log = open_log(tmp_path / "a-0", small_config(segment_bytes=1000))
    for i in range(30):
        log.append(make_batch(1, tag=i, value_size=80), leader_epoch=0, now_ms=BASE_TS)
    assert log.num_segments >= 3
    assert all(s.size <= 1000 for s in log.segments)
    # inactive segments' indexes are trimmed to their entries
    first = log.segments[0]
    assert os.path.getsize(first.offset_index.path) == first.offset_index.entries * 8
    log.close()

    log = open_log(tmp_path / "b-0", small_config(segment_bytes=10**9, index_interval_bytes=0, segment_index_bytes=40))
    for i in range(12):
        log.append(make_batch(1, tag=i), leader_epoch=0, now_ms=BASE_TS)
    assert log.num_segments >= 2  # 5 offset-index entries fill 40 bytes
    log.close()

    log = open_log(tmp_path / "c-0", small_config(segment_bytes=10**9, segment_ms=1000))
    log.append(make_batch(1, ts=BASE_TS), leader_epoch=0, now_ms=BASE_TS)
    log.append(make_batch(1, ts=BASE_TS + 500), leader_epoch=0, now_ms=BASE_TS)
    assert log.num_segments == 1
    log.append(make_batch(1, ts=BASE_TS + 1500), leader_epoch=0, now_ms=BASE_TS)
    assert log.num_segments == 2 and log.segments[1].base_offset == 2
    assert log.roll() is log.segments[-1] and log.num_segments == 3
    assert log.roll() is log.segments[-1] and log.num_segments == 3  # empty active segment is kept
    log.close()


def test_segment_jitter_is_drawn_per_segment_and_shortens_its_time_roll(tmp_path: Path) -> None:
    """As in Kafka, each segment draws its roll jitter in [0, min(segment.jitter.ms, segment.ms)) when
    it is made, and rolls by time after segment.ms less that jitter."""
    cfg = small_config(segment_bytes=10**9, segment_ms=1000, segment_jitter_ms=5000)
    jitters = set()
    for n in range(40):
        log = open_log(tmp_path / f"j-{n}", cfg)
        seg = log.segments[0]
        assert 0 <= seg.roll_jitter_ms < 1000
        jitters.add(seg.roll_jitter_ms)
        log.append(make_batch(1, ts=BASE_TS), leader_epoch=0, now_ms=BASE_TS)
        deadline = 1000 - seg.roll_jitter_ms
        log.append(make_batch(1, ts=BASE_TS + deadline), leader_epoch=0, now_ms=BASE_TS)
        assert log.num_segments == 1  # records spanning exactly segment.ms - jitter stay
        log.append(make_batch(1, ts=BASE_TS + deadline + 1), leader_epoch=0, now_ms=BASE_TS)
        assert log.num_segments == 2
        log.close()
    assert len(jitters) > 10  # drawn, not one fixed value
    assert small_config(segment_jitter_ms=0).random_segment_jitter() == 0


def test_fetch_offset_by_timestamp(log_dir: Path) -> None:
    log = open_log(log_dir, small_config(segment_bytes=800, index_interval_bytes=100))
    for i in range(40):
        log.append(make_batch(4, ts=BASE_TS + i * 100, ts_step=10, tag=i), leader_epoch=0, now_ms=BASE_TS)
    assert log.num_segments > 2
    assert log.fetch_offset_by_timestamp(0) == (0, BASE_TS)
    assert log.fetch_offset_by_timestamp(BASE_TS + 1215) == (4 * 12 + 2, BASE_TS + 1220)
    assert log.fetch_offset_by_timestamp(BASE_TS + 1200) == (48, BASE_TS + 1200)
    assert log.fetch_offset_by_timestamp(BASE_TS + 3930) == (159, BASE_TS + 3930)
    assert log.fetch_offset_by_timestamp(BASE_TS + 3931) is None
    assert log.max_timestamp_and_offset() == (BASE_TS + 3930, 159)
    log.close()
    log = open_log(log_dir, small_config(segment_bytes=800, index_interval_bytes=100), had_clean_shutdown=True)
    assert log.fetch_offset_by_timestamp(BASE_TS + 1215) == (50, BASE_TS + 1220)
    assert log.max_timestamp_and_offset() == (BASE_TS + 3930, 159)
    log.close()


def test_compressed_batches_and_time_lookup(log_dir: Path) -> None:
    log = open_log(log_dir)
    for codec in (1, 2, 3, 4):
        log.append(make_batch(5, ts=BASE_TS + codec * 100, ts_step=10, compression=codec), leader_epoch=0)
    assert [r.offset for r in all_records(log)] == list(range(20))
    assert log.fetch_offset_by_timestamp(BASE_TS + 325) == (13, BASE_TS + 330)
    log.close()


def test_retention_by_time_bytes_and_start_offset(tmp_path: Path) -> None:
    cfg = small_config(segment_bytes=500, retention_ms=10_000)
    log = open_log(tmp_path / "r-0", cfg)
    for i in range(30):
        log.append(make_batch(1, ts=BASE_TS + i * 1000, tag=i, value_size=60), leader_epoch=0, now_ms=BASE_TS)
    segs = log.num_segments
    assert log.delete_old_segments(now_ms=BASE_TS + 100_000) == 0  # high watermark 0 protects everything
    log.high_watermark = log.log_end_offset
    deleted = log.delete_old_segments(now_ms=BASE_TS + 30_000)
    assert deleted > 0 and log.num_segments == segs - deleted
    assert log.log_start_offset == log.segments[0].base_offset > 0
    assert all(s.largest_timestamp() >= BASE_TS + 20_000 for s in log.segments[:-1])
    # deleted files are renamed, then removed when due
    assert any(n.endswith(".deleted") for n in os.listdir(log.dir))
    for seg in log.take_due_deletions(now_ms=BASE_TS + 30_000):
        seg.delete_files()
    assert not any(n.endswith(".deleted") for n in os.listdir(log.dir))
    with pytest.raises(KafkaError):
        log.read(0, 100)
    # everything expired: the active segment rolls and goes too, the log stays writable
    log.delete_old_segments(now_ms=BASE_TS + 10**9)
    assert log.num_segments == 1 and log.size_bytes == 0 and log.log_start_offset == 30
    assert log.append(make_batch(1), leader_epoch=0).first_offset == 30
    log.close()

    log = open_log(tmp_path / "s-0", small_config(segment_bytes=500, retention_bytes=1000, retention_ms=-1))
    for i in range(30):
        log.append(make_batch(1, tag=i, value_size=60), leader_epoch=0, now_ms=BASE_TS)
    log.high_watermark = log.log_end_offset
    log.delete_old_segments(now_ms=BASE_TS)
    assert 1000 - 500 <= log.size_bytes <= 1000 + 500
    log.close()

    log = open_log(tmp_path / "d-0", small_config(segment_bytes=500))
    for i in range(30):
        log.append(make_batch(1, tag=i, value_size=60), leader_epoch=0, now_ms=BASE_TS)
    log.high_watermark = 20
    with pytest.raises(KafkaError) as e:
        log.maybe_increment_log_start_offset(21)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.maybe_increment_log_start_offset(17)
    assert log.log_start_offset == 17 and log.segments[0].base_offset <= 17
    assert all_records(log)[0].offset == 17
    with pytest.raises(KafkaError):
        log.read(16, 100)
    log.close()
    log = open_log(tmp_path / "d-0", small_config(segment_bytes=500), log_start_offset=17, had_clean_shutdown=True)
    assert log.log_start_offset == 17
    log.close()


def test_truncation(log_dir: Path) -> None:
    log = open_log(log_dir, small_config(segment_bytes=400))
    for i in range(20):
        log.append(make_batch(2, tag=i), leader_epoch=i // 5, now_ms=BASE_TS)
    log.high_watermark = 40
    assert log.leader_epoch_cache.entries == [(0, 0), (1, 10), (2, 20), (3, 30)]
    assert log.truncate_to(25)
    # truncation happens at batch boundaries: offset 25 sits in batch 24-25
    assert log.log_end_offset == 24 and log.high_watermark == 24
    assert [r.offset for r in all_records(log)] == list(range(24))
    assert log.leader_epoch_cache.entries == [(0, 0), (1, 10), (2, 20)]
    assert not log.truncate_to(30)
    assert log.append(make_batch(1), leader_epoch=4).first_offset == 24
    assert log.truncate_to(10)
    assert log.log_end_offset == 10
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.num_segments) == (100, 100, 1)
    assert log.leader_epoch_cache.entries == []
    assert log.append(make_batch(1), leader_epoch=5).first_offset == 100
    log.close()
    log = open_log(log_dir, small_config(segment_bytes=400), log_start_offset=100, had_clean_shutdown=True)
    assert [r.offset for r in all_records(log)] == [100]
    log.close()


def test_leader_epoch_cache_semantics(log_dir: Path) -> None:
    log = open_log(log_dir)
    log.append(make_batch(5), leader_epoch=1)
    log.append(make_batch(5), leader_epoch=3)
    log.append(make_batch(5), leader_epoch=3)
    cache = log.leader_epoch_cache
    leo = log.log_end_offset
    assert cache.latest_epoch == 3
    assert cache.end_offset_for(3, leo) == (3, 15)
    assert cache.end_offset_for(2, leo) == (1, 5)
    assert cache.end_offset_for(1, leo) == (1, 5)
    assert cache.end_offset_for(0, leo) == (0, 0)
    assert cache.end_offset_for(4, leo) == (-1, -1)
    assert cache.end_offset_for(-1, leo) == (-1, -1)
    log.close()


def test_follower_append_keeps_offsets_and_epochs(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "f-0")
    for i in range(5):
        leader.append(make_batch(2, tag=i), leader_epoch=2 + i // 3)
    follower = open_log(tmp_path / "f-1")
    data = leader.read_bytes(0, 1 << 20)
    info = follower.append_as_follower(data)
    assert (info.first_offset, info.last_offset) == (0, 9)
    assert follower.read_bytes(0, 1 << 20) == data
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries
    with pytest.raises(KafkaError):
        follower.append_as_follower(data)  # offsets below the log end
    leader.close()
    follower.close()


def test_restart_clean_and_unclean_keeps_everything(log_dir: Path) -> None:
    cfg = small_config(segment_bytes=700)
    log = open_log(log_dir, cfg)
    for i in range(40):
        log.append(make_batch(3, tag=i), leader_epoch=0, now_ms=BASE_TS)
    before = all_records(log)
    log.close()
    log = open_log(log_dir, cfg, had_clean_shutdown=True)
    assert log.recovered_segments == 0 and all_records(log) == before
    log.append(make_batch(1), leader_epoch=0)
    log.close(clean=False)
    log = open_log(log_dir, cfg, had_clean_shutdown=False, recovery_point=0)
    assert log.recovered_segments == log.num_segments and log.truncated_bytes == 0
    assert all_records(log)[:-1] == before and log.log_end_offset == 121
    log.close()


def test_config_from_topic_configs() -> None:
    defaults = LogConfig()
    assert defaults.segment_bytes == 1 << 30 and defaults.max_message_bytes == 1048588
    cfg = LogConfig.from_topic_configs(
        {
            "segment.bytes": "1048576",
            "retention.ms": "-1",
            "message.timestamp.type": "LogAppendTime",
            "x.y": "z",
        },
        defaults,
    )
    assert cfg.segment_bytes == 1048576 and cfg.retention_ms == -1 and cfg.log_append_time
    for name, value in [
        ("segment.bytes", "abc"),
        ("retention.ms", "-2"),
        ("message.timestamp.type", "Other"),
    ]:
        with pytest.raises(KafkaError) as e:
            LogConfig.from_topic_configs({name: value}, defaults)
        assert e.value.code == ErrorCode.INVALID_CONFIG and name in e.value.message
    assert LogConfig.from_topic_configs(cfg.to_topic_configs(), defaults) == cfg


def test_parse_topic_partition() -> None:
    assert parse_topic_partition("my-topic-12") is not None
    assert parse_topic_partition("my-topic-12").partition == 12  # type: ignore[union-attr]
    for bad in ("nopartition", "-1", "t-x", "t-1.abc-delete"):
        assert parse_topic_partition(bad) is None
    with pytest.raises(ValueError):
        Log(Path("/nonexistent/not_a_partition"), LogConfig())


def test_index_full_flag_follows_the_indexes(tmp_path: Path) -> None:
    # 3 offset-index slots (24 bytes), an entry before every batch after the first
    log = open_log(tmp_path / "f-0", small_config(segment_bytes=10**9, index_interval_bytes=0, segment_index_bytes=24))
    for i in range(4):
        log.append(make_batch(1, tag=i), leader_epoch=0, now_ms=BASE_TS)
    seg = log.segments[-1]
    assert seg.offset_index.is_full and seg.index_full and log.num_segments == 1
    log.truncate_to(2)  # drops index entries: room again, and the same segment takes appends
    assert not seg.offset_index.is_full and not seg.index_full
    log.append(make_batch(1, tag=9), leader_epoch=0, now_ms=BASE_TS)
    assert log.num_segments == 1 and log.log_end_offset == 3
    while not seg.index_full:
        log.append(make_batch(1, tag=9), leader_epoch=0, now_ms=BASE_TS)
    log.append(make_batch(1, tag=10), leader_epoch=0, now_ms=BASE_TS)  # rolls before it is written
    assert log.num_segments == 2 and log.segments[1].base_offset == log.log_end_offset - 1
    assert seg.index_full  # trimmed to its entries when it stopped being active
    log.truncate_to(seg.next_offset - 1)  # the old segment is active again, its index regrown
    assert log.num_segments == 1 and log.segments[-1] is seg and not seg.index_full
    assert [r.offset for r in all_records(log)] == list(range(log.log_end_offset))
    log.close()
