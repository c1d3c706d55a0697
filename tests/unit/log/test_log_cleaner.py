"""The log cleaner on real logs in a temporary directory: what a cleaning keeps, tombstones, several
passes, the crash-safe swap, uncleanable logs, the choice of the dirtiest log, and a model-based
property test over writes, cleanings, rolls and restarts."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from logtest_util import all_records, small_config

from rill.log.checkpoints import read_offset_checkpoint
from rill.log.cleaner_offset_map import OffsetMap
from rill.log.log import Log
from rill.log.log_cleaner import clean, plan_cleaning
from rill.log.log_cleaner_manager import CLEANER_OFFSET_CHECKPOINT, CleanerConfig, LogCleaner
from rill.log.log_config import LogConfig
from rill.log.log_segment import SWAP_SUFFIX
from rill.records import batch as b
from rill.records.builder import build_batch
from rill.records.record import Record

pytestmark = pytest.mark.timeout(120)

NOW = (time.time_ns() // 1_000_000) + 10_000


def compact_config(**kw: int | str | float) -> LogConfig:
    base: dict[str, int | str | float] = {
        "cleanup_policy": "compact",
        "segment_bytes": 1024,
        "delete_retention_ms": 1000,
    }
    base.update(kw)
    return small_config(**base)  # type: ignore[arg-type]


def write(log: Log, pairs: list[tuple[str, str | None]], *, codec: int = 0, ts: int = NOW) -> tuple[int, int]:
    records = [Record(0, ts, k.encode(), None if v is None else v.encode()) for k, v in pairs]
    info = log.append(build_batch(records, compression=codec), leader_epoch=0, now_ms=ts)
    log.high_watermark = log.log_end_offset
    return info.first_offset, info.last_offset


def table(log: Log) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for r in all_records(log):
        assert r.key is not None
        if r.value is None:
            out.pop(r.key, None)
        else:
            out[r.key] = r.value
    return out


def fill(log: Log, n: int, keys: int = 5, codec: int = 0) -> dict[int, tuple[bytes, bytes | None]]:
    """``n`` batches of 3 updates over ``keys`` keys; returns offset -> (key, value)."""
    written: dict[int, tuple[bytes, bytes | None]] = {}
    for i in range(n):
        pairs: list[tuple[str, str | None]] = [(f"k{(3 * i + j) % keys}", f"v{i}-{j}") for j in range(3)]
        first, _ = write(log, pairs, codec=codec)
        for j, (k, v) in enumerate(pairs):
            written[first + j] = (k.encode(), None if v is None else v.encode())
    return written


@pytest.mark.parametrize("codec", [0, 1, 3, 4])
def test_cleaning_keeps_the_latest_record_of_each_key_at_its_offset(tmp_path: Path, codec: int) -> None:
    log = Log(tmp_path / "t-0", compact_config())
    written = fill(log, 120, codec=codec)
    before = table(log)
    segments = log.num_segments
    cleaner = LogCleaner(CleanerConfig())
    result = cleaner.clean_now(log, OffsetMap(100), NOW)
    assert result is not None and result.records_removed > 0
    records = all_records(log)
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets))
    assert all(written[r.offset] == (r.key, r.value) for r in records)
    assert table(log) == before
    # below the map's end one record per key; at and after it everything is untouched
    assert len([o for o in offsets if o < result.map_end]) == 5
    assert [o for o in offsets if o >= result.map_end] == [o for o in written if o >= result.map_end]
    # the cleaned segments are merged as far as segment.bytes allows: one cleaned segment and the active one
    assert segments > 10 and log.num_segments == 2
    assert len(result.cleaned) == 1 and sum(len(g) for g in result.groups) == segments - 1
    log.close()


def test_a_partly_kept_batch_keeps_its_header_fields(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", compact_config())
    records = [Record(0, NOW + i, f"k{i % 2}".encode(), f"v{i}".encode()) for i in range(4)]
    batch = build_batch(records, compression=1, producer_id=7, producer_epoch=2, base_sequence=0)
    log.append(batch, leader_epoch=3, now_ms=NOW)
    write(log, [("k0", "late")])
    log.roll(now_ms=NOW)
    log.high_watermark = log.log_end_offset
    LogCleaner(CleanerConfig()).clean_now(log, OffsetMap(100), NOW)
    data = log.read_bytes(0, 1 << 20)
    h = b.parse_header(data)
    assert b.crc_ok(data, 0, h)
    assert (h.base_offset, h.last_offset_delta, h.records_count) == (0, 3, 1)
    assert (h.partition_leader_epoch, h.producer_id, h.producer_epoch, h.base_sequence) == (3, 7, 2, 0)
    assert h.attributes & b.COMPRESSION_MASK == 1 and h.max_timestamp == NOW + 3
    assert [(r.offset, r.key, r.value) for r in all_records(log)] == [(3, b"k1", b"v3"), (4, b"k0", b"late")]
    log.close()


def test_tombstones_go_delete_retention_ms_after_their_segment_was_cleaned(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", compact_config(delete_retention_ms=5000))
    write(log, [("a", "1"), ("b", "1")])
    write(log, [("a", None)])
    log.roll(now_ms=NOW)
    write(log, [("c", "1")])
    log.roll(now_ms=NOW)
    cleaner = LogCleaner(CleanerConfig())
    cleaner.clean_now(log, OffsetMap(100), NOW)
    assert [(r.key, r.value) for r in all_records(log)] == [(b"b", b"1"), (b"a", None), (b"c", b"1")]
    # cleaned again before delete.retention.ms has passed: the tombstone stays
    write(log, [("d", "1")])
    log.roll(now_ms=NOW)
    cleaner.clean_now(log, OffsetMap(100), NOW + 4000)
    assert (b"a", None) in [(r.key, r.value) for r in all_records(log)]
    write(log, [("e", "1")])
    log.roll(now_ms=NOW)
    cleaner.clean_now(log, OffsetMap(100), NOW + 5001)
    assert [(r.key, r.value) for r in all_records(log)] == [(b"b", b"1"), (b"c", b"1"), (b"d", b"1"), (b"e", b"1")]
    log.close()


def test_a_small_offset_map_cleans_in_several_passes(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", compact_config(segment_bytes=2048))
    written: dict[int, tuple[bytes, bytes | None]] = {}
    for i in range(60):
        pairs: list[tuple[str, str | None]] = [(f"k{(4 * i + j) % 40}", f"v{i}") for j in range(4)]
        first, _ = write(log, pairs)
        written.update({first + j: (k.encode(), v.encode() if v else None) for j, (k, v) in enumerate(pairs)})
    cleaner = LogCleaner(CleanerConfig())
    ends = []
    for _ in range(10):
        result = cleaner.clean_now(log, OffsetMap(12), NOW)
        if result is None:
            break
        ends.append(result.map_end)
    assert len(ends) > 2 and ends == sorted(ends)
    assert table(log) == {k: v for k, v in (written[o] for o in sorted(written)) if v is not None}
    assert all(written[r.offset] == (r.key, r.value) for r in all_records(log))
    log.close()


def test_a_swap_left_by_a_crash_is_completed_and_cleaned_files_deleted(tmp_path: Path) -> None:
    config = compact_config()
    log = Log(tmp_path / "t-0", config)
    written = fill(log, 60)
    expected = table(log)
    plan = plan_cleaning(log, 0, NOW)
    assert plan is not None
    result = clean(plan, OffsetMap(100))
    assert result is not None
    names = os.listdir(log.dir)
    assert any(n.endswith(".log.cleaned") for n in names) and not any(n.endswith(".log.swap") for n in names)
    (log.dir / "00000000000000099999.log.cleaned").write_bytes(b"partial")
    for seg in result.cleaned:  # the swap's first step: the cleaned segments are named .swap
        seg.rename_suffix(SWAP_SUFFIX)
        seg.close()
    log.close(clean=False)  # the crash: the swap files are complete, the old segments still there
    log = Log(tmp_path / "t-0", config, recovery_point=0)
    names = os.listdir(log.dir)
    assert not any(n.endswith((".swap", ".cleaned")) for n in names)
    records = all_records(log)
    assert table(log) == expected
    assert all(written[r.offset] == (r.key, r.value) for r in records)
    assert len([r for r in records if r.offset < result.map_end]) == 5
    log.close()


def test_a_corrupt_log_is_marked_uncleanable_and_others_are_still_cleaned(tmp_path: Path) -> None:
    bad = Log(tmp_path / "bad-0", compact_config())
    good = Log(tmp_path / "good-0", compact_config())
    fill(bad, 60)
    fill(good, 40)
    seg = bad.segments[1]
    with open(seg.log_path, "r+b") as f:  # a flipped byte inside the first batch's records
        f.seek(70)
        byte = f.read(1)
        f.seek(70)
        f.write(bytes([byte[0] ^ 0xFF]))
    cleaner = LogCleaner(CleanerConfig())
    logs = {bad.topic_partition: (bad, tmp_path), good.topic_partition: (good, tmp_path)}

    async def run() -> None:
        m = OffsetMap(100)
        assert await cleaner.clean_one(logs, m)  # the dirtiest: bad (more segments, same ratio) or good
        assert await cleaner.clean_one(logs, m)
        assert not await cleaner.clean_one(logs, m)

    asyncio.run(run())
    assert list(cleaner.uncleanable) == [bad.topic_partition]
    assert "CRC" in cleaner.uncleanable[bad.topic_partition]
    assert cleaner.first_dirty[good.topic_partition] > 0
    assert not any(n.endswith((".cleaned", ".swap")) for n in os.listdir(bad.dir))
    cleaner.write_checkpoints(cleaner.checkpoint_snapshot(logs), [tmp_path])
    saved = read_offset_checkpoint(tmp_path / CLEANER_OFFSET_CHECKPOINT)
    assert saved[good.topic_partition] == cleaner.first_dirty[good.topic_partition]
    bad.close()
    good.close()


def test_which_log_is_cleaned_dirty_ratio_and_compaction_lags(tmp_path: Path) -> None:
    cleaner = LogCleaner(CleanerConfig())
    plain = Log(tmp_path / "plain-0", small_config(segment_bytes=1024))  # cleanup.policy=delete
    lazy = Log(tmp_path / "lazy-0", compact_config(min_cleanable_dirty_ratio=1.0))
    young = Log(tmp_path / "young-0", compact_config(min_compaction_lag_ms=60_000))
    for plog in (plain, lazy, young):
        fill(plog, 30)
    logs = {p.topic_partition: (p, tmp_path) for p in (plain, lazy, young)}
    # dirty ratio below 1.0 is not enough for `lazy`; `young` records are within the lag
    assert cleaner.dirty_ratio(lazy, NOW)[0] == pytest.approx(1.0)
    assert cleaner.pick(logs, NOW) is lazy
    cleaner.clean_now(lazy, OffsetMap(100), NOW)
    fill(lazy, 12)
    assert 0 < cleaner.dirty_ratio(lazy, NOW)[0] < 1.0
    assert cleaner.pick(logs, NOW) is None
    assert cleaner.pick(logs, NOW + 61_000) is young
    # max.compaction.lag.ms forces a cleaning whatever the ratio
    lazy.config = compact_config(min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=1000)
    assert cleaner.pick(logs, NOW + 2000) is lazy
    for plog in (plain, lazy, young):
        plog.close()


def test_cleanup_policies(tmp_path: Path) -> None:
    old = NOW - 10 * 86_400_000
    for policy, retention_applies in (("delete", True), ("compact,delete", True), ("compact", False), ("", False)):
        config = LogConfig.from_topic_configs({"cleanup.policy": policy, "retention.ms": "1000"}, compact_config())
        log = Log(tmp_path / f"p{len(policy)}-0", config)
        for i in range(20):
            write(log, [("k", f"v{i}")], ts=old)
        deleted = log.delete_old_segments(NOW)
        assert (deleted > 0) == retention_applies, policy
        assert config.compacted == ("compact" in policy)
        log.close()


# ---- model-based property test -------------------------------------------------------------------

KEYS = ["a", "b", "c", "d", "e", "f"]
value = st.one_of(st.none(), st.text("xyz", min_size=1, max_size=30))
write_op = st.tuples(st.just("write"), st.lists(st.tuples(st.sampled_from(KEYS), value), min_size=1, max_size=4),
                     st.sampled_from([0, 1, 4]))  # fmt: skip
ops = st.lists(
    st.one_of(
        write_op,
        st.tuples(st.just("clean"), st.integers(0, 3000)),
        st.tuples(st.just("roll")),
        st.tuples(st.just("restart"), st.booleans()),
        st.tuples(st.just("crash_after_swap_files")),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_model(tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[object, ...]]) -> None:
    path = tmp_path_factory.mktemp("model") / "m-0"
    config = compact_config(segment_bytes=400, delete_retention_ms=1000)
    log = Log(path, config)
    cleaner = LogCleaner(CleanerConfig())
    written: dict[int, tuple[bytes, bytes | None]] = {}
    cleaned_at: dict[int, int] = {}  # tombstone offset -> time of the first cleaning that covered it
    now = NOW

    def cleaned(map_end: int) -> None:
        for o, (_, v) in written.items():
            if v is None and o < map_end:
                cleaned_at.setdefault(o, now)

    try:
        for step in steps:
            if step[0] == "write":
                pairs, codec = step[1], step[2]
                assert isinstance(pairs, list) and isinstance(codec, int)
                first, _ = write(log, pairs, codec=codec)
                written.update(
                    {first + j: (k.encode(), None if v is None else v.encode()) for j, (k, v) in enumerate(pairs)}
                )
            elif step[0] == "clean":
                assert isinstance(step[1], int)
                now += step[1]
                done = cleaner.clean_now(log, OffsetMap(4), now)
                if done is not None:
                    cleaned(done.map_end)
            elif step[0] == "roll":
                log.roll(now_ms=now)
            elif step[0] == "restart":
                clean_close = bool(step[1])
                log.close(clean=clean_close)
                log = Log(path, config, had_clean_shutdown=clean_close, recovery_point=0)
                log.high_watermark = log.log_end_offset
            else:
                now += 500
                plan = plan_cleaning(log, cleaner.first_dirty_offset(log), now)
                result = None if plan is None else clean(plan, OffsetMap(4))
                if result is not None:
                    for seg in result.cleaned:
                        seg.close()
                    cleaner.first_dirty[log.topic_partition] = result.map_end
                    cleaned(result.map_end)
                log.close(clean=False)
                log = Log(path, config, recovery_point=0)
                log.high_watermark = log.log_end_offset
            records = all_records(log)
            offsets = [r.offset for r in records]
            assert offsets == sorted(set(offsets))
            assert all(written[r.offset] == (r.key, r.value) for r in records)
            first_dirty = cleaner.first_dirty.get(log.topic_partition, 0)
            assert [o for o in offsets if o >= first_dirty] == [o for o in sorted(written) if o >= first_dirty]
            latest: dict[bytes, bytes | None] = {}
            for o in sorted(written):
                latest[written[o][0]] = written[o][1]
            assert table(log) == {k: v for k, v in latest.items() if v is not None}
            kept = {(r.key, r.value) for r in records}
            assert all((k, v) in kept for k, v in latest.items() if v is not None)
            # a key's latest record, a tombstone, stays delete.retention.ms after the cleaning that first covered it
            last_of = {written[o][0]: o for o in sorted(written)}
            present = set(offsets)
            for o in last_of.values():
                if written[o][1] is None and now < cleaned_at.get(o, now) + config.delete_retention_ms:
                    assert o in present, (o, now, cleaned_at.get(o))
    finally:
        log.close()


def test_appends_while_cleaning_are_kept_and_a_truncation_drops_the_cleaning(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", compact_config())
    written = fill(log, 60)
    cleaner = LogCleaner(CleanerConfig())
    logs = {log.topic_partition: (log, tmp_path)}
    plan = plan_cleaning(log, cleaner.first_dirty_offset(log), NOW)
    assert plan is not None
    result = clean(plan, OffsetMap(100))
    assert result is not None
    written.update(fill(log, 30))  # appended (and rolled) between the planning and the swap
    cleaner._swap(result, logs)
    assert cleaner.first_dirty[log.topic_partition] == result.map_end
    records = all_records(log)
    assert all(written[r.offset] == (r.key, r.value) for r in records)
    assert [r.offset for r in records if r.offset >= result.map_end] == [
        o for o in sorted(written) if o >= result.map_end
    ]

    # a truncation into the cleaned range between the planning and the swap: the cleaning is dropped
    written.update(fill(log, 30))
    plan = plan_cleaning(log, cleaner.first_dirty_offset(log), NOW)
    assert plan is not None
    result = clean(plan, OffsetMap(100))
    assert result is not None
    segments = log.segments
    log.truncate_to(result.map_end - 5, now_ms=NOW)
    cleaner._swap(result, logs)
    assert log.segments == segments[: len(log.segments)]
    assert not any(n.endswith((".swap", ".cleaned")) for n in os.listdir(log.dir))
    assert cleaner.first_dirty_offset(log) <= result.map_end - 5
    records = all_records(log)
    assert [r.offset for r in records][-1] < result.map_end - 5
    assert all(written[r.offset] == (r.key, r.value) for r in records)
    log.close()


def test_a_deleted_log_is_not_marked_uncleanable(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", compact_config())
    fill(log, 60)
    cleaner = LogCleaner(CleanerConfig())
    logs = {log.topic_partition: (log, tmp_path)}

    async def run() -> bool:
        task = asyncio.ensure_future(cleaner.clean_one(logs, OffsetMap(100)))
        await asyncio.sleep(0)  # the plan is made, the thread starts
        log.delete()
        return await task

    assert asyncio.run(run())
    assert not cleaner.uncleanable


def test_max_compaction_lag_rolls_the_active_segment_of_a_compacted_log(tmp_path: Path) -> None:
    for policy, rolls in (("compact", True), ("compact,delete", True), ("delete", False)):
        config = compact_config(cleanup_policy=policy, max_compaction_lag_ms=1000, segment_bytes=1 << 20)
        log = Log(tmp_path / f"p{len(policy)}-0", config)
        write(log, [("a", "1")], ts=NOW)
        write(log, [("a", "2")], ts=NOW + 500)
        assert log.num_segments == 1
        write(log, [("a", "3")], ts=NOW + 1500)
        assert (log.num_segments == 2) == rolls, policy
        log.close()


def test_io_max_bytes_per_second_slows_a_cleaning_down(tmp_path: Path) -> None:
    from rill.log.log_cleaner import Throttler

    times = []
    for rate in (1e308, 200_000.0):
        log = Log(tmp_path / f"r{len(times)}-0", compact_config())
        fill(log, 100)
        plan = plan_cleaning(log, 0, NOW)
        assert plan is not None
        started = time.monotonic()
        result = clean(plan, OffsetMap(100), Throttler(rate))
        times.append(time.monotonic() - started)
        assert result is not None
        moved = result.bytes_read * 2 + result.bytes_written  # the map's pass, the rewrite's pass, the writes
        if rate < 1e300:
            assert times[-1] >= moved / rate * 0.8
        for seg in result.cleaned:
            seg.close()
        log.close()
    assert times[1] > times[0]  # the bound above is the throttle's; against the unthrottled time only loosely


def test_the_log_manager_runs_the_cleaner_and_forgets_a_deleted_log(tmp_path: Path) -> None:
    import uuid

    from rill.common import TopicPartition
    from rill.log.log_manager import LogManager

    tp = TopicPartition("t", 0)
    manager = LogManager([tmp_path], compact_config(), broker_config={"log.cleaner.backoff.ms": 20})
    manager.startup()
    log = manager.get_or_create_log(tp, uuid.uuid4(), compact_config())
    expected = table_of(fill(log, 60))

    async def background() -> None:
        task = asyncio.ensure_future(manager.run_background())
        deadline = time.monotonic() + 20
        while manager.cleaner.first_dirty.get(tp, 0) == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        task.cancel()

    asyncio.run(background())
    assert manager.cleaner.first_dirty[tp] > 0 and table(log) == expected
    manager.shutdown()
    assert read_offset_checkpoint(tmp_path / CLEANER_OFFSET_CHECKPOINT)[tp] > 0
    manager = LogManager([tmp_path], compact_config())
    manager.startup()
    assert manager.cleaner.first_dirty[tp] > 0
    manager.delete_log(tp)
    assert tp not in manager.cleaner.first_dirty  # the topic made again starts dirty from its start
    log = manager.get_or_create_log(tp, uuid.uuid4(), compact_config())
    fill(log, 60)
    assert manager.cleaner.first_dirty_offset(log) == 0
    manager.shutdown()


def table_of(written: dict[int, tuple[bytes, bytes | None]]) -> dict[bytes, bytes]:
    latest: dict[bytes, bytes | None] = {}
    for o in sorted(written):
        latest[written[o][0]] = written[o][1]
    return {k: v for k, v in latest.items() if v is not None}


def test_the_offset_map_stays_within_its_buffer() -> None:
    import tracemalloc

    from rill.log.cleaner_offset_map import key_digest, slots_for

    buffer_bytes = 4 * 1024 * 1024
    slots = slots_for(buffer_bytes, 1.0)
    offset_map = OffsetMap(slots)
    tracemalloc.start()
    try:
        for i in range(slots):
            offset_map.put(key_digest(b"a key of more than sixteen bytes %d" % i), 2**40 + i)
        used, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert offset_map.full and used <= buffer_bytes


def test_a_full_disk_fails_a_cleaning_without_giving_up_on_the_log(tmpfs: Path) -> None:
    log = Log(tmpfs / "t-0", compact_config(segment_bytes=16384))
    for i in range(60):  # distinct keys: the cleaning keeps most of what it reads
        write(log, [(f"key-{i}-{j}", "v" * 40) for j in range(20)])
    log.roll(now_ms=NOW)
    log.high_watermark = log.log_end_offset
    expected = table(log)
    junk = tmpfs / "junk"
    fd = os.open(junk, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 1024):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    cleaner = LogCleaner(CleanerConfig())
    logs = {log.topic_partition: (log, tmpfs)}
    assert not asyncio.run(cleaner.clean_one(logs, OffsetMap(10_000)))
    assert not cleaner.uncleanable and cleaner.first_dirty[log.topic_partition] == 0
    assert not any(n.endswith((".cleaned", ".swap")) for n in os.listdir(log.dir))
    assert table(log) == expected
    junk.unlink()
    assert asyncio.run(cleaner.clean_one(logs, OffsetMap(10_000)))
    assert cleaner.first_dirty[log.topic_partition] > 0 and table(log) == expected
    log.close()


def test_a_cleaning_in_its_thread_leaves_the_event_loop_responsive(tmp_path: Path) -> None:
    """The cleaner's thread gives the GIL up every millisecond: the loop's timers fire about on time
    instead of waiting out Python's 5 ms switch interval at every wake-up (median 5.2 ms late before)."""
    import statistics

    log = Log(tmp_path / "t-0", compact_config(segment_bytes=4 << 20))
    payload = "x" * 100
    for i in range(1500):
        write(log, [(f"key-{(100 * i + j) % 5000}", payload) for j in range(100)])
    log.roll(now_ms=NOW)
    log.high_watermark = log.log_end_offset
    cleaner = LogCleaner(CleanerConfig())
    late: list[float] = []

    async def run() -> None:
        async def probe() -> None:
            while True:
                t = time.perf_counter()
                await asyncio.sleep(0.001)
                late.append(time.perf_counter() - t - 0.001)

        task = asyncio.ensure_future(probe())
        assert await cleaner.clean_one({log.topic_partition: (log, tmp_path)}, OffsetMap(100_000))
        task.cancel()

    asyncio.run(run())
    assert len(late) > 20
    assert statistics.median(late) < 0.003
    log.close()


def test_a_cleaning_whose_coroutine_was_cancelled_leaves_no_swap_files_after_stop(tmp_path: Path) -> None:
    """Stopping the broker cancels the cleaner's tasks; a cleaning finishing in its thread after that is
    never swapped in: its files are removed at once (the next start would delete them too: only the swap names
    them .swap)."""
    log = Log(tmp_path / "t-0", compact_config())
    fill(log, 200)
    cleaner = LogCleaner(CleanerConfig())

    async def run() -> None:
        task = asyncio.ensure_future(cleaner.clean_one({log.topic_partition: (log, tmp_path)}, OffsetMap(100)))
        while not cleaner._running:  # the thread has started the cleaning
            await asyncio.sleep(0.0001)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(run())
    deadline = time.monotonic() + 10
    while cleaner._running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert any(n.endswith(".cleaned") for n in os.listdir(log.dir))  # finished, never swapped in
    cleaner.stop()
    assert not any(n.endswith((".swap", ".cleaned")) for n in os.listdir(log.dir))
    log.close()


def test_a_producers_last_batch_stays_as_an_empty_batch(tmp_path: Path) -> None:
    """Every record of an idempotent producer's batches superseded: its earlier batch goes, its last one stays
    without records, so the producer's sequence survives a restart without snapshots (and reaches a
    follower copying the log)."""
    log = Log(tmp_path / "t-0", compact_config())
    for seq in (0, 2):
        records = [Record(0, NOW, b"a", b"p"), Record(0, NOW, b"b", b"p")]
        log.append(build_batch(records, producer_id=9, producer_epoch=1, base_sequence=seq), leader_epoch=0)
    write(log, [("a", "late"), ("b", "late")])
    log.roll(now_ms=NOW)
    log.high_watermark = log.log_end_offset
    LogCleaner(CleanerConfig()).clean_now(log, OffsetMap(100), NOW)
    data = log.read_bytes(0, 1 << 20)
    headers = [h for _, h in b.iter_batches(data)]
    assert [(h.base_offset, h.records_count, h.producer_id, h.base_sequence) for h in headers] == [
        (2, 0, 9, 2),
        (4, 2, -1, -1),
    ]
    assert b.crc_ok(data, 0, headers[0]) and headers[0].last_offset_delta == 1
    assert [(r.offset, r.value) for r in all_records(log)] == [(4, b"late"), (5, b"late")]
    log.close(clean=False)
    for snapshot in log.dir.glob("*.snapshot"):
        snapshot.unlink()
    log = Log(tmp_path / "t-0", compact_config(), recovery_point=0)
    assert log.producer_state.producers[9].last_seq == 3
    follower = Log(tmp_path / "f-0", compact_config())
    follower.append_as_follower(log.read_bytes(0, 1 << 20))
    assert follower.producer_state.producers[9].last_seq == 3
    # a later batch of the producer: the empty one goes at the next cleaning
    log.append(
        build_batch([Record(0, NOW, b"c", b"p")], producer_id=9, producer_epoch=1, base_sequence=4), leader_epoch=0
    )
    write(log, [("c", "late")])
    log.roll(now_ms=NOW)
    log.high_watermark = log.log_end_offset
    LogCleaner(CleanerConfig()).clean_now(log, OffsetMap(100), NOW)
    headers = [h for _, h in b.iter_batches(log.read_bytes(0, 1 << 20))]
    assert [(h.base_offset, h.records_count) for h in headers] == [(4, 2), (6, 0), (7, 1)]
    follower.close()
    log.close()


def test_cleaner_metrics_dead_threads_last_run_and_uncleanable_per_log_dir(tmp_path: Path) -> None:
    """DeadThreadCount counts a cleaner task an error stopped until a reconfigure starts it again;
    time-since-last-run-ms stays below the backoff while the cleaner looks for work; the per-log-dir gauges
    name every log dir, and an uncleanable log counts in its own with its dirty bytes."""
    good_dir, bad_dir = tmp_path / "a", tmp_path / "b"
    bad = Log(bad_dir / "bad-0", compact_config())
    fill(bad, 60)
    cleaner = LogCleaner(CleanerConfig(backoff_ms=10))
    failures = [RuntimeError("the first look fails")]

    def logs_of() -> dict[object, tuple[Log, Path]]:
        if failures:
            raise failures.pop()
        return {bad.topic_partition: (bad, bad_dir)}

    async def until(check: object) -> None:
        for _ in range(500):
            if check():  # type: ignore[operator]
                return
            await asyncio.sleep(0.01)
        raise AssertionError("timed out")

    async def run() -> None:
        task = asyncio.create_task(cleaner.run(logs_of, lambda: [good_dir, bad_dir]))
        await until(lambda: cleaner.dead_workers == {0})
        assert cleaner.metric_values()["kafka_log_logcleaner_deadthreadcount"] == 1
        cleaner.uncleanable[bad.topic_partition] = "marked by the test"
        cleaner.reconfigure(CleanerConfig(backoff_ms=20))
        await until(lambda: not cleaner.dead_workers and cleaner.workers == 1)
        await asyncio.sleep(0.2)
        values = cleaner.metric_values()
        assert values["kafka_log_logcleaner_deadthreadcount"] == 0
        assert values["kafka_log_logcleanermanager_time_since_last_run_ms"] < 150
        per_dir = cleaner.log_dir_metric_values()
        counts = per_dir["kafka_log_logcleanermanager_uncleanable_partitions_count"]
        dirty = per_dir["kafka_log_logcleanermanager_uncleanable_bytes"]
        assert counts == {str(good_dir.absolute()): 0, str(bad_dir.absolute()): 1}
        assert dirty[str(good_dir.absolute())] == 0
        assert dirty[str(bad_dir.absolute())] == sum(s.size for s in bad.segments[:-1])
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(run())
    bad.close()


def test_a_crash_recovery_replaces_the_whole_range_a_swap_was_made_from(tmp_path: Path) -> None:
    """A cleaned segment can end before the range it replaces does (its last sources cleaned empty: tombstones
    past their horizon, aborted transactions); the ``.swap-end`` file beside the ``.swap`` says where the range
    ends, so a crash recovery also drops those sources instead of bringing their removed records back."""
    config = compact_config()
    log = Log(tmp_path / "t-0", config)
    write(log, [("a", "1"), ("b", "1")])
    log.roll(now_ms=NOW)
    write(log, [("a", "2")])  # a source the cleaning emptied (as if its record had gone)
    log.roll(now_ms=NOW)
    write(log, [("c", "1")])  # the next segment, not part of the cleaning
    log.roll(now_ms=NOW)
    bases = [s.base_offset for s in log.segments]
    log.close()
    first = log.dir / f"{bases[0]:020d}.log"
    # The crash state: the cleaned segment (here: the first segment's records) complete as .swap, the end of
    # the range it replaces beside it, the old segments still there.
    (log.dir / f"{bases[0]:020d}.log.swap").write_bytes(first.read_bytes())
    (log.dir / f"{bases[0]:020d}.log.swap-end").write_text(str(bases[2]))
    log = Log(tmp_path / "t-0", config, recovery_point=0)
    names = sorted(os.listdir(log.dir))
    assert f"{bases[1]:020d}.log" not in names, "the emptied source came back"
    assert not any(n.endswith((".swap", ".swap-end")) for n in names)
    assert [(r.offset, r.key, r.value) for r in all_records(log)] == [(0, b"a", b"1"), (1, b"b", b"1"), (3, b"c", b"1")]
    log.close()


def test_the_cleaner_writes_each_swaps_range_end_and_removes_it_after_the_swap(tmp_path: Path) -> None:
    config = compact_config()
    log = Log(tmp_path / "t-0", config)
    fill(log, 60)
    plan = plan_cleaning(log, 0, NOW)
    assert plan is not None
    result = clean(plan, OffsetMap(100))
    assert result is not None and result.cleaned
    for seg, group in zip(result.cleaned, result.groups, strict=True):
        end_file = log.dir / f"{seg.base_offset:020d}.log.swap-end"
        assert int(end_file.read_text()) == group[-1].end_offset
    for seg in result.cleaned:
        seg.close()
    log.close(clean=False)
    log = Log(tmp_path / "t-0", config, recovery_point=0)
    cleaner = LogCleaner(CleanerConfig())
    fill(log, 30)
    assert cleaner.clean_now(log, OffsetMap(100), NOW) is not None
    assert not any(n.endswith((".swap", ".swap-end")) for n in os.listdir(log.dir))
    log.close()
