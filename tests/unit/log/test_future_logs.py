"""Future logs at the log layer: a log whose directory is renamed keeps working (its segments, indexes,
checkpoint and snapshots follow the rename), the swap's two renames, and what a start makes of each state a
crash can leave (a copy under way goes on, a swap cut between its renames is finished)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from logtest_util import all_records, make_batch, small_config

from rill.common import TopicPartition
from rill.log.log import parse_topic_partition
from rill.log.log_manager import LogManager

TP = TopicPartition("orders", 0)


def _crash(m: LogManager) -> None:
    """What a SIGKILL leaves: no flush, no checkpoints, no marker; the kernel drops the locks."""
    for lg in [*m.all_logs(), *(f for f, _ in m.future_logs().values()), *m.retired_logs()]:
        lg.close(clean=False)
    m.release_dir_locks()


def _copy(m: LogManager) -> None:
    """Copy the current log into the future log as the copier does (whole batches, as a follower)."""
    current, future = m.get_log(TP), m.future_log(TP)
    assert current is not None and future is not None
    while future.log_end_offset < current.log_end_offset:
        data = current.read_bytes(future.log_end_offset, 1000)  # whole batches
        base = int.from_bytes(data[:8], "big")
        if base < future.log_end_offset:  # the batch holding the start begins below it
            future.truncate_fully_and_start_at(base)
        future.append_as_follower(data)


def test_a_future_log_name_parses() -> None:
    hex_ = uuid.uuid4().hex
    assert parse_topic_partition(f"orders-0.{hex_}-future") == TP
    assert parse_topic_partition("orders-0.abc-future") is None
    assert parse_topic_partition(f"orders-x.{hex_}-future") is None


def test_a_renamed_log_appends_rolls_and_reopens(tmp_path: Path) -> None:
    """Before, the segments and the epoch checkpoint kept their old paths: the first file opened by name after the
    rename (an index growing, the leader-epoch checkpoint written) was not found, and the append failed."""
    m = LogManager([tmp_path], small_config(segment_bytes=600))
    m.startup()
    lg = m.get_or_create_log(TP, None, small_config(segment_bytes=600))
    lg.append(make_batch(2, tag=0), leader_epoch=0)
    lg.rename_dir(tmp_path / "elsewhere-0")
    for i in range(1, 30):
        lg.append(make_batch(2, tag=i), leader_epoch=1)
    assert lg.num_segments > 3 and lg.leader_epoch_cache.entries == [(0, 0), (1, 2)]
    lg.flush()
    lg.close()
    assert not (tmp_path / "orders-0").exists()
    (tmp_path / "elsewhere-0").rename(tmp_path / "orders-0")
    m.release_dir_locks()
    m = LogManager([tmp_path], small_config(segment_bytes=600))
    m.startup()
    again = m.get_log(TP)
    assert again is not None and len(all_records(again)) == 60
    assert again.leader_epoch_cache.entries == [(0, 0), (1, 2)]
    m.shutdown()


def test_the_swap_and_a_restart(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = LogManager([a, b], small_config())
    m.startup()
    m.maybe_update_preferred_log_dir(TP, a)
    lg = m.get_or_create_log(TP, uuid.uuid4(), small_config(file_delete_delay_ms=60000))
    assert lg.dir.parent == a
    for i in range(20):
        lg.append(make_batch(3, tag=i), leader_epoch=0)
    future = m.create_future_log(TP, b)
    assert future.is_future and future.dir.parent == b
    _copy(m)
    assert m.replace_current_with_future(TP) == [a, b]
    assert m.get_log(TP) is future and m.log_dir_of(TP) == b and m.future_log(TP) is None
    assert future.dir == b / "orders-0" and not (a / "orders-0").exists()
    future.append(make_batch(3, tag=99), leader_epoch=0)
    # the log swapped out stays readable (a coordinator may be loading it) until file.delete.delay.ms
    assert len(all_records(lg)) == 60 and lg.dir.name.endswith("-delete")
    now = int(time.time() * 1000)
    asyncio.run(m.delete_due_files(now))
    assert len(all_records(lg)) == 60 and lg.dir.exists()
    asyncio.run(m.delete_due_files(now + 61000))
    assert not lg.dir.exists()
    m.shutdown()
    m = LogManager([a, b], small_config())
    m.startup()
    moved = m.get_log(TP)
    assert moved is not None and moved.dir == b / "orders-0" and len(all_records(moved)) == 63
    assert not [p for p in a.iterdir() if p.is_dir()]  # the -delete directory is gone
    m.shutdown()


def test_a_start_goes_on_with_a_copy_and_finishes_a_cut_swap(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = LogManager([a, b], small_config())
    m.startup()
    m.maybe_update_preferred_log_dir(TP, a)
    lg = m.get_or_create_log(TP, uuid.uuid4(), small_config())
    for i in range(20):
        lg.append(make_batch(3, tag=i), leader_epoch=0)
    m.create_future_log(TP, b)
    _copy(m)
    _crash(m)  # during the copy: both logs, the future one under its -future name
    m = LogManager([a, b], small_config())
    m.startup()
    current, future = m.get_log(TP), m.future_log(TP)
    assert current is not None and future is not None
    assert m.log_dir_of(TP) == a and m.future_logs()[TP][1] == b and future.log_end_offset == 60
    current.high_watermark = 60
    assert current.maybe_increment_log_start_offset(9)  # DeleteRecords, checkpointed in the current log's dir
    m.checkpoint_log_start_offsets()
    # cut between the swap's renames: the current directory set aside, the future one not renamed yet
    current.rename_dir(a / f"orders-0.{uuid.uuid4().hex}-delete")
    _crash(m)
    m = LogManager([a, b], small_config())
    m.startup()
    moved = m.get_log(TP)
    assert moved is not None and moved.dir == b / "orders-0" and m.future_log(TP) is None
    assert moved.log_start_offset == 9 and len(all_records(moved)) == 51
    m.shutdown()


def test_a_dropped_future_log_is_removed(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = LogManager([a, b], small_config())
    m.startup()
    m.maybe_update_preferred_log_dir(TP, a)
    lg = m.get_or_create_log(TP, uuid.uuid4(), small_config())
    lg.append(make_batch(3), leader_epoch=0)
    m.create_future_log(TP, b)
    assert m.abandon_future_log(TP) and m.future_log(TP) is None
    assert not list(b.glob("*-future"))
    m.create_future_log(TP, b)
    assert m.delete_log(TP) and m.future_log(TP) is None  # deleting the partition drops its move
    m.shutdown()
    assert not [p for p in [*a.iterdir(), *b.iterdir()] if p.is_dir()]


def test_a_crash_right_after_the_swap_keeps_the_log_start(tmp_path: Path) -> None:
    """Killed after both renames, before the checkpoints were written again: the moved log starts where
    DeleteRecords had moved the start (it started at 0 again before: the destination's checkpoint had no entry)."""
    a, b = tmp_path / "a", tmp_path / "b"
    m = LogManager([a, b], small_config())
    m.startup()
    m.maybe_update_preferred_log_dir(TP, a)
    lg = m.get_or_create_log(TP, uuid.uuid4(), small_config())
    for i in range(20):
        lg.append(make_batch(3, tag=i), leader_epoch=0)
    lg.high_watermark = 60
    assert lg.maybe_increment_log_start_offset(13)  # inside the batch of offsets 12 to 14
    m.checkpoint_log_start_offsets()
    future = m.create_future_log(TP, b)
    _copy(m)
    assert future.log_start_offset == 12  # the copy starts with the whole batch; the copier then moves the start
    future.high_watermark = 60
    future.maybe_increment_log_start_offset(13)
    m.replace_current_with_future(TP)
    _crash(m)
    m = LogManager([a, b], small_config())
    m.startup()
    moved = m.get_log(TP)
    assert moved is not None and moved.dir == b / "orders-0"
    assert moved.log_start_offset == 13 and len(all_records(moved)) == 47
    m.shutdown()
