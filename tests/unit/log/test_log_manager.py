"""LogManager: startup/shutdown, checkpoints, clean-shutdown marker, deletion, background duties."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from logtest_util import BASE_TS, all_records, make_batch, small_config

from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.log.checkpoints import read_offset_checkpoint, write_offset_checkpoint
from rill.log.log_manager import CLEAN_SHUTDOWN_FILE, LOCK_FILE, LogDirInUseError, LogManager

pytestmark = pytest.mark.timeout(60)
TP = TopicPartition("orders", 0)


def test_startup_shutdown_checkpoints_and_marker(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs, small_config())
    m.startup()
    logs = [m.get_or_create_log(TopicPartition("orders", p), uuid.uuid4(), small_config()) for p in range(4)]
    assert {lg.dir.parent for lg in logs} == set(dirs)  # spread over the log dirs
    for lg in logs:
        for i in range(5):
            lg.append(make_batch(2, tag=i), leader_epoch=0)
        lg.high_watermark = 6
    m.shutdown()
    for d in dirs:
        assert (d / CLEAN_SHUTDOWN_FILE).exists()
        rp = read_offset_checkpoint(d / "recovery-point-offset-checkpoint")
        assert set(rp.values()) == {10}
        assert set(read_offset_checkpoint(d / "replication-offset-checkpoint").values()) == {6}
        assert (d / "recovery-point-offset-checkpoint").read_text().splitlines()[:2] == ["0", "2"]
    m = LogManager(dirs, small_config())
    m.startup()
    assert not any((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    lg = m.get_log(TP)
    assert lg is not None and lg.recovered_segments == 0 and lg.high_watermark == 6
    assert len(all_records(lg)) == 10
    m.shutdown()


def test_unclean_start_recovers_from_recovery_point(tmp_path: Path) -> None:
    m = LogManager([tmp_path], small_config(segment_bytes=500))
    m.startup()
    lg = m.get_or_create_log(TP, None, small_config(segment_bytes=500))
    for i in range(30):
        lg.append(make_batch(2, tag=i), leader_epoch=0)
    lg.flush(upto=20)
    m.checkpoint_recovery_points()
    lg.close(clean=False)  # crash: no marker
    m.release_dir_locks()  # and the kernel drops a dead process's locks
    m = LogManager([tmp_path], small_config(segment_bytes=500))
    m.startup()
    lg2 = m.get_log(TP)
    assert lg2 is not None and lg2.log_end_offset == 60
    assert 0 < lg2.recovered_segments < lg2.num_segments  # only from the recovery point on
    m.shutdown()


def test_a_roll_flushes_the_segments_before_it(tmp_path: Path) -> None:
    """Kafka flushes the segments below a new one when a log rolls, so the recovery point follows the log
    and a crash re-reads only the last segments (it re-read every segment since the last flush)."""
    config = small_config(segment_bytes=500)
    m = LogManager([tmp_path], config)
    m.startup()
    lg = m.get_or_create_log(TP, None, config)
    for i in range(30):
        lg.append(make_batch(2, tag=i), leader_epoch=0)
    assert lg.num_segments > 5 and lg.recovery_point == 0
    asyncio.run(m.flush_dirty_logs(0))  # what the background loop runs when a roll asks for a flush
    assert lg.recovery_point == 60
    for i in range(3):
        lg.append(make_batch(2, tag=100 + i), leader_epoch=0)
    m.checkpoint_recovery_points()
    _crash(m)
    m = LogManager([tmp_path], config)
    m.startup()
    again = m.get_log(TP)
    assert again is not None and again.log_end_offset == 66
    assert again.recovered_segments <= 2 < again.num_segments
    m.shutdown()


def test_delete_log_renames_then_removes(tmp_path: Path) -> None:
    m = LogManager([tmp_path], small_config())
    m.startup()
    lg = m.get_or_create_log(TP, None, small_config())
    lg.append(make_batch(1), leader_epoch=0)
    assert m.delete_log(TP) and m.get_log(TP) is None
    renamed = [p.name for p in tmp_path.iterdir() if p.is_dir()]
    assert len(renamed) == 1 and renamed[0].startswith("orders-0.") and renamed[0].endswith("-delete")
    asyncio.run(m.delete_due_files())
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]
    m.shutdown()


def _crash(m: LogManager) -> None:
    """What a SIGKILL leaves: no flush, no checkpoints, no marker; the kernel drops the locks."""
    for lg in m.all_logs():
        lg.close(clean=False)
    m.release_dir_locks()


def test_a_topic_created_again_does_not_take_the_deleted_logs_checkpoints(tmp_path: Path) -> None:
    """Delete a log whose start offset and recovery point were checkpointed, create it again, append and
    crash: the new log must start at 0 with every record (the stale log-start-offset entry moved its start
    past its end: every acknowledged record was gone after the restart)."""
    m = LogManager([tmp_path], small_config())
    m.startup()
    lg = m.get_or_create_log(TP, uuid.uuid4(), small_config())
    for i in range(20):
        lg.append(make_batch(2, tag=i), leader_epoch=0)
    lg.high_watermark = 40
    assert lg.maybe_increment_log_start_offset(30)
    lg.flush()
    m.checkpoint_log_start_offsets()
    m.checkpoint_recovery_points()
    assert read_offset_checkpoint(tmp_path / "log-start-offset-checkpoint") == {TP: 30}
    m.delete_log(TP)
    # written again at once, without the deleted log, as Kafka's asyncDelete does
    assert read_offset_checkpoint(tmp_path / "log-start-offset-checkpoint") == {}
    assert read_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint") == {}
    again = m.get_or_create_log(TP, uuid.uuid4(), small_config())
    for i in range(5):
        again.append(make_batch(2, tag=100 + i), leader_epoch=0)
    _crash(m)
    m = LogManager([tmp_path], small_config())
    m.startup()
    lg2 = m.get_log(TP)
    assert lg2 is not None and (lg2.log_start_offset, lg2.log_end_offset) == (0, 10)
    assert [r.offset for r in all_records(lg2)] == list(range(10))
    m.shutdown()


def test_a_checkpoint_read_before_a_deletion_is_not_written_after_it(tmp_path: Path) -> None:
    """The periodic write reads the values on the loop and writes them in a thread; a deletion in between
    writes its own checkpoint at once. The older values must not land on top (they would bring the deleted
    log's entry back for the next topic of that name)."""
    m = LogManager([tmp_path], small_config())
    m.startup()
    lg = m.get_or_create_log(TP, uuid.uuid4(), small_config())
    lg.append(make_batch(4), leader_epoch=0)
    lg.high_watermark = 4
    assert lg.maybe_increment_log_start_offset(2)
    older = m._snapshot("log-start-offset-checkpoint")  # what the periodic write took before the deletion
    m.delete_log(TP)
    m._write_snapshot(older)  # its thread gets to write only now
    assert read_offset_checkpoint(tmp_path / "log-start-offset-checkpoint") == {}
    m.shutdown()


def test_startup_drops_checkpoint_entries_of_logs_that_are_gone(tmp_path: Path) -> None:
    m = LogManager([tmp_path], small_config())
    m.startup()
    m.get_or_create_log(TP, uuid.uuid4(), small_config()).append(make_batch(2), leader_epoch=0)
    m.shutdown()
    write_offset_checkpoint(tmp_path / "log-start-offset-checkpoint", {TP: 0, TopicPartition("gone", 3): 500})
    m = LogManager([tmp_path], small_config())
    m.startup()
    assert read_offset_checkpoint(tmp_path / "log-start-offset-checkpoint") == {TP: 0}
    m.shutdown()


def test_a_log_of_another_topic_id_is_set_aside_as_stray(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The metadata names the partition under a new topic id (the topic was deleted and created again while
    a directory of the old one survived): the old log is renamed ``-stray`` and kept, never loaded again, and
    a fresh log takes its place. A log with no stored id (no ``partition.metadata``) adopts the id instead."""
    old_id, new_id = uuid.uuid4(), uuid.uuid4()
    m = LogManager([tmp_path], small_config())
    m.startup()
    m.get_or_create_log(TP, old_id, small_config()).append(make_batch(3), leader_epoch=0)
    adopted_tp = TopicPartition("orders", 1)
    m.get_or_create_log(adopted_tp, None, small_config()).append(make_batch(2), leader_epoch=0)
    m.shutdown()
    (tmp_path / "orders-1" / "partition.metadata").unlink()

    m = LogManager([tmp_path], small_config())
    m.startup()
    fresh, adopted = m.get_or_create_logs([(TP, new_id, small_config()), (adopted_tp, new_id, small_config())])
    assert fresh.topic_id == new_id and fresh.log_end_offset == 0
    assert adopted.topic_id == new_id and adopted.log_end_offset == 2
    assert "orders-0 is stray" in caplog.text
    stray = [p for p in tmp_path.iterdir() if p.name.endswith("-stray")]
    assert len(stray) == 1 and stray[0].name.startswith("orders-0.")
    assert (stray[0] / "00000000000000000000.log").stat().st_size > 0  # kept, for an operator to look at
    m.shutdown()
    m = LogManager([tmp_path], small_config())
    m.startup()
    assert {lg.topic_partition for lg in m.all_logs()} == {TP, adopted_tp}
    assert m.get_log(TP) is not None and m.get_log(TP).topic_id == new_id  # type: ignore[union-attr]
    m.shutdown()


def test_background_flush_retention_and_delayed_delete(tmp_path: Path) -> None:
    cfg = small_config(segment_bytes=400, flush_messages=4, retention_ms=1000, file_delete_delay_ms=50)
    m = LogManager(
        [tmp_path], cfg, retention_check_interval_ms=50, flush_checkpoint_interval_ms=50, tick_ms=20
    )
    m.startup()
    lg = m.get_or_create_log(TP, None, cfg)

    async def scenario() -> None:
        task = asyncio.create_task(m.run_background())
        try:
            for i in range(20):
                lg.append(make_batch(2, tag=i, ts=BASE_TS), leader_epoch=0)
                await asyncio.sleep(0)
            for _ in range(100):
                await asyncio.sleep(0.02)
                if lg.recovery_point == lg.log_end_offset:
                    break
            assert lg.recovery_point == lg.log_end_offset == 40  # flush.messages
            lg.high_watermark = 40
            for _ in range(100):
                await asyncio.sleep(0.02)
                if lg.log_start_offset == 40 and not list(lg.dir.glob("*.deleted")):
                    break
            assert lg.log_start_offset == 40  # every record is older than retention.ms
            assert not list(lg.dir.glob("*.deleted"))  # removed after file.delete.delay.ms
            cp = read_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint")
            assert cp == {TP: 40}
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(scenario())
    m.shutdown()


def test_get_or_create_logs_spreads_and_reports_failures(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs, small_config())
    m.startup()
    orders_id = uuid.uuid4()
    first = m.get_or_create_log(TopicPartition("orders", 0), orders_id, small_config())
    wanted = [(TopicPartition("orders", p), orders_id, small_config()) for p in range(40)]
    logs = m.get_or_create_logs(wanted)
    assert [lg.topic_partition for lg in logs] == [tp for tp, _, _ in wanted]
    assert logs[0] is first  # an existing log is returned, not made again
    per_dir = [sum(1 for lg in logs if lg.dir.parent == d) for d in dirs]
    assert per_dir == [20, 20]
    assert all((lg.dir / "00000000000000000000.log").exists() for lg in logs)

    # a partition directory that cannot be created fails alone: the others are created and registered
    (dirs[0] / "broken-0").write_text("a file where the partition directory should go")
    (dirs[1] / "broken-1").write_text("a file where the partition directory should go")
    more = [(TopicPartition("broken", p), None, small_config()) for p in range(2)]
    more += [(TopicPartition("fine", p), None, small_config()) for p in range(4)]
    with pytest.raises(KafkaError) as e:
        m.get_or_create_logs(more)
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR and "broken-" in e.value.message
    assert all(m.get_log(TopicPartition("fine", p)) is not None for p in range(4))
    assert m.get_log(TopicPartition("broken", 0)) is None
    m.shutdown()


def test_a_log_dir_in_use_is_not_opened_a_second_time(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    first = LogManager(dirs, small_config())
    first.startup()
    first.get_or_create_log(TP, uuid.uuid4(), small_config()).append(make_batch(3), leader_epoch=0)
    second = LogManager([tmp_path / "c", dirs[1]], small_config())
    with pytest.raises(LogDirInUseError, match="another broker process is using the log dir"):
        second.startup()
    assert second.get_log(TP) is None and not second._dir_locks  # loaded nothing, holds nothing
    third = LogManager([tmp_path / "c"], small_config())
    third.startup()  # the lock on c was given back when the second one gave up
    third.shutdown()
    first.shutdown()
    second = LogManager(dirs, small_config())
    second.startup()  # free once the first one has shut down
    lg = second.get_log(TP)
    assert lg is not None and len(all_records(lg)) == 3
    second.shutdown()


def test_the_lock_holds_against_another_process(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX);"
            " print('locked', flush=True); time.sleep(60)",
            str(tmp_path / LOCK_FILE),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(LogDirInUseError):
            LogManager([tmp_path], small_config()).startup()
    finally:
        holder.kill()
        holder.wait()
    m = LogManager([tmp_path], small_config())
    m.startup()  # the kernel dropped the lock with the process
    m.shutdown()


def test_a_first_start_is_not_called_an_unclean_shutdown(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="rill.log.log_manager"):
        manager = LogManager([tmp_path / "new"], small_config())
        manager.startup()
        manager.shutdown()
    loaded = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Loaded 0 logs")]
    assert len(loaded) == 1 and loaded[0].endswith("(no logs yet)")


def test_new_log_start_offsets_are_carried_by_checkpoints_read_while_they_are_written(tmpfs: Path) -> None:
    """DeleteRecords writes its new log start offset before it moves it. A periodic checkpoint whose
    values were read meanwhile (the old offset) and written after it must carry the new offset, not put
    the old one back; and a new offset whose write failed (a full disk: refused, the log start stays)
    must not reach the file through such a checkpoint either."""
    ck = tmpfs / "log-start-offset-checkpoint"
    m = LogManager([tmpfs], small_config())
    m.startup()
    lg = m.get_or_create_log(TP, uuid.uuid4(), small_config())
    lg.append(make_batch(10), leader_epoch=0)
    lg.high_watermark = 10

    async def delete_records(offset: int) -> tuple[set[TopicPartition], object]:
        task = asyncio.create_task(m.write_log_start_offsets({TP: offset}))
        await asyncio.sleep(0)  # the write is under way in its thread
        during = m._snapshot(ck.name)  # the periodic write reads the values now...
        return await task, during

    failed, during = asyncio.run(delete_records(6))
    assert failed == set() and read_offset_checkpoint(ck) == {TP: 6}
    assert lg.maybe_increment_log_start_offset(6)  # as the handler does, before it awaits again
    m._write_snapshot(during)  # ...and writes them only now
    assert read_offset_checkpoint(ck) == {TP: 6}

    with open(tmpfs / "filler", "wb", buffering=0) as f, pytest.raises(OSError):
        while True:
            f.write(bytes(64 * 1024))
    failed, during = asyncio.run(delete_records(8))
    assert failed == {TP} and lg.log_start_offset == 6  # refused: the caller leaves the start where it is
    (tmpfs / "filler").unlink()
    m._write_snapshot(during)
    assert read_offset_checkpoint(ck) == {TP: 6}
    m.shutdown()
