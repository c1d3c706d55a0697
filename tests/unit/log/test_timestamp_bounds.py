"""CreateTime bounds on producer timestamps: message.timestamp.before.max.ms / after.max.ms (and the
deprecated difference setting standing in for either), checked on every record of a leader append."""

from __future__ import annotations

from pathlib import Path

import pytest
from logtest_util import BASE_TS, all_records, make_batch, open_log, small_config

from rill.errors import ErrorCode, KafkaError
from rill.log.log_config import LONG_MAX, LogConfig
from rill.records.builder import build_batch
from rill.records.compression import ZSTD
from rill.records.record import Record

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("append_input_kind")]

NOW = BASE_TS
HOUR = 3_600_000


def _rejected(log_dir: Path, config: LogConfig, batch: bytes) -> str:
    log = open_log(log_dir, config)
    with pytest.raises(KafkaError) as e:
        log.append(batch, leader_epoch=0, now_ms=NOW)
    assert e.value.code == ErrorCode.INVALID_TIMESTAMP
    assert log.log_end_offset == 0 and all_records(log) == []  # nothing of the request was written
    log.close()
    return e.value.message


@pytest.mark.parametrize("compression", [0, ZSTD], ids=["plain", "zstd"])
def test_records_outside_the_bounds_are_refused(tmp_path: Path, compression: int) -> None:
    config = small_config(message_timestamp_before_max_ms=HOUR, message_timestamp_after_max_ms=60_000)
    inside = make_batch(3, ts=NOW - HOUR, ts_step=30_000, compression=compression)
    log = open_log(tmp_path / "ok-0", config)
    assert log.append(inside, leader_epoch=0, now_ms=NOW).last_offset == 2
    log.close()
    too_old = make_batch(2, ts=NOW - HOUR - 1, compression=compression)
    assert f"outside [{NOW - HOUR}, {NOW + 60_000}]" in _rejected(tmp_path / "old-0", config, too_old)
    too_new = make_batch(2, ts=NOW + 60_001, compression=compression)
    assert f"record 0 of batch 0: CreateTime {NOW + 60_001}" in _rejected(tmp_path / "new-0", config, too_new)


def test_every_record_is_checked_not_only_the_batch_header(tmp_path: Path) -> None:
    # The first record and the batch's max timestamp are in range; the third record is not.
    config = small_config(message_timestamp_before_max_ms=HOUR)
    batch = make_batch(3, ts=NOW, ts_step=-HOUR)
    assert "record 2 of batch 0" in _rejected(tmp_path / "a-0", config, batch)


def test_a_bad_batch_refuses_the_whole_request(tmp_path: Path) -> None:
    config = small_config(message_timestamp_after_max_ms=0)
    both = make_batch(1, ts=NOW - 5) + make_batch(1, ts=NOW + 5)
    assert "record 0 of batch 1" in _rejected(tmp_path / "a-0", config, both)


def test_records_without_a_timestamp_pass(tmp_path: Path) -> None:
    config = small_config(message_timestamp_before_max_ms=0, message_timestamp_after_max_ms=0)
    log = open_log(tmp_path / "a-0", config)
    batch = build_batch([Record(0, -1, None, b"v", []), Record(0, NOW, None, b"w", [])])
    assert log.append(batch, leader_epoch=0, now_ms=NOW).last_offset == 1


def test_difference_stands_in_for_a_bound_left_at_its_default() -> None:
    assert LogConfig().create_time_bounds is None
    assert LogConfig(message_timestamp_difference_max_ms=10).create_time_bounds == (10, 10)
    assert LogConfig(message_timestamp_difference_max_ms=10, message_timestamp_after_max_ms=5).create_time_bounds == (
        10,
        5,
    )
    assert LogConfig(message_timestamp_before_max_ms=7).create_time_bounds == (7, LONG_MAX)
    # The single-batch path takes what fits both size limits, and nothing from a bounded log.
    assert LogConfig(max_message_bytes=100, segment_bytes=50).single_batch_max_bytes == 50
    assert LogConfig(message_timestamp_before_max_ms=7).single_batch_max_bytes == -1
    # LogAppendTime topics overwrite the timestamps: nothing to check.
    config = LogConfig(message_timestamp_type="LogAppendTime", message_timestamp_before_max_ms=0)
    assert config.create_time_bounds is None


def test_log_append_time_topics_take_any_producer_timestamp(tmp_path: Path) -> None:
    config = small_config(message_timestamp_type="LogAppendTime", message_timestamp_before_max_ms=0)
    log = open_log(tmp_path / "a-0", config)
    assert log.append(make_batch(2, ts=NOW - 10 * HOUR), leader_epoch=0, now_ms=NOW).log_append_time == NOW


def test_topic_config_names_reach_the_bounds() -> None:
    config = LogConfig.from_topic_configs(
        {"message.timestamp.before.max.ms": "1000", "message.timestamp.after.max.ms": "2000"}
    )
    assert config.create_time_bounds == (1000, 2000)
    with pytest.raises(KafkaError) as e:
        LogConfig.from_topic_configs({"message.timestamp.after.max.ms": "-1"})
    assert e.value.code == ErrorCode.INVALID_CONFIG
