"""DeleteRecords moves the log start offset only once the new offset is durable (the caller wrote
``log-start-offset-checkpoint``); what follows the move in the log (the leader epoch checkpoint, the
segments wholly below the new start) is upkeep: when a write of it fails, the move stands, the failure is
logged, and the upkeep waits for later (the epoch checkpoint is cut back to the log start when the log is
opened again). An exception there left the answer unsent after the in-memory start had moved."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from logtest_util import BASE_TS, make_batch, open_log, small_config

from rill.log.checkpoints import LEADER_EPOCH_CHECKPOINT, read_epoch_checkpoint

pytestmark = pytest.mark.timeout(60)


def test_a_failed_epoch_checkpoint_write_does_not_undo_or_break_the_move(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=300))
    for i in range(12):
        log.append(make_batch(2, tag=i), leader_epoch=i // 4, now_ms=BASE_TS)
    log.high_watermark = log.log_end_offset
    blocker = tmp_path / "t-0" / (LEADER_EPOCH_CHECKPOINT + ".tmp")
    blocker.mkdir()  # the checkpoint's temp file cannot be created: its write fails with an OSError
    with caplog.at_level(logging.WARNING):
        assert log.maybe_increment_log_start_offset(10)
    assert log.log_start_offset == 10
    assert any("upkeep" in r.getMessage() and "t-0" in r.getMessage() for r in caplog.records)
    log.close()
    blocker.rmdir()
    reopened = open_log(tmp_path / "t-0", small_config(segment_bytes=300), log_start_offset=10)
    assert reopened.log_start_offset == 10
    assert read_epoch_checkpoint(tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT)[0][1] == 10  # cut back at open
    reopened.close()
