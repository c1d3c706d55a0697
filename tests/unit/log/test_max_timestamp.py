"""ListOffsets MAX_TIMESTAMP (-3) names the first record holding the log's largest timestamp, as Kafka does:
the first segment whose max timestamp is the largest, in it the first batch reaching that timestamp, in that
batch the first record carrying it (every record of a LogAppendTime batch carries it: its first record)."""

from __future__ import annotations

from pathlib import Path

import pytest
from logtest_util import BASE_TS, make_batch, open_log, small_config

from rill.log.cleaner_offset_map import OffsetMap
from rill.log.log_cleaner_manager import CleanerConfig, LogCleaner
from rill.records.builder import build_batch
from rill.records.compression import GZIP, LZ4, SNAPPY, ZSTD
from rill.records.record import Record

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("append_input_kind")]


def _batch(*deltas: int, compression: int = 0, value_size: int = 10) -> bytes:
    return build_batch(
        [Record(0, BASE_TS + d, f"k{i}".encode(), b"v" * value_size) for i, d in enumerate(deltas)],
        compression=compression,
    )


@pytest.mark.parametrize("compression", [0, GZIP, SNAPPY, LZ4, ZSTD])
def test_the_record_with_the_largest_timestamp_inside_one_batch(tmp_path: Path, compression: int) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(_batch(100, 400, 200, compression=compression), leader_epoch=0, now_ms=BASE_TS)
    assert log.max_timestamp_and_offset() == (BASE_TS + 400, 1)
    log.close()
    log = open_log(tmp_path / "t-0", had_clean_shutdown=True)
    assert log.max_timestamp_and_offset() == (BASE_TS + 400, 1)
    log.close()
    log = open_log(tmp_path / "t-0", had_clean_shutdown=False)  # recovery rebuilds the indexes
    assert log.max_timestamp_and_offset() == (BASE_TS + 400, 1)
    log.close()


def test_a_tie_names_the_first_record_across_batches_and_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**6))
    log.append(_batch(100, 400, 400, 300), leader_epoch=0, now_ms=BASE_TS)
    log.append(_batch(400, 50), leader_epoch=0, now_ms=BASE_TS)
    assert log.max_timestamp_and_offset() == (BASE_TS + 400, 1)
    log.roll()
    log.append(_batch(400), leader_epoch=0, now_ms=BASE_TS)
    assert log.max_timestamp_and_offset() == (BASE_TS + 400, 1)
    log.append(_batch(10, 401, 401), leader_epoch=0, now_ms=BASE_TS)
    assert log.max_timestamp_and_offset() == (BASE_TS + 401, 8)
    log.close()


def test_log_append_time_names_the_first_record_of_the_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", small_config(message_timestamp_type="LogAppendTime"))
    log.append(_batch(100, 400, 200), leader_epoch=0, now_ms=BASE_TS + 1000)
    log.append(_batch(100, 400, 200), leader_epoch=0, now_ms=BASE_TS + 2000)
    assert log.max_timestamp_and_offset() == (BASE_TS + 2000, 3)
    log.close()


@pytest.mark.parametrize("clean", [True, False], ids=["clean-shutdown", "recovery"])
def test_an_earlier_batch_keeps_the_max_after_a_reopen(tmp_path: Path, clean: bool) -> None:
    """The segment's max timestamp and its offset are found again at load from the time index's last entry and
    the batches after the last offset index entry: with equal timestamps the earlier batch still wins."""
    config = small_config(segment_bytes=10**6, index_interval_bytes=100)
    log = open_log(tmp_path / "t-0", config)
    log.append(_batch(400, value_size=200), leader_epoch=0, now_ms=BASE_TS)  # offset 0, the first max
    log.append(_batch(100, value_size=20), leader_epoch=0, now_ms=BASE_TS)  # an index entry here
    log.append(_batch(400, value_size=20), leader_epoch=0, now_ms=BASE_TS)  # offset 2, the same max
    assert log.max_timestamp_and_offset() == (BASE_TS + 400, 0)
    log.close()
    log = open_log(tmp_path / "t-0", config, had_clean_shutdown=clean)
    assert log.max_timestamp_and_offset() == (BASE_TS + 400, 0)
    log.truncate_to(3)  # the tail is scanned again after a truncation
    assert log.max_timestamp_and_offset() == (BASE_TS + 400, 0)
    log.close()


def test_below_the_log_start_is_not_named(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**6))
    log.append(make_batch(3, ts=BASE_TS + 900), leader_epoch=0, now_ms=BASE_TS)
    log.roll()
    log.append(_batch(100, 400, 200), leader_epoch=0, now_ms=BASE_TS)
    log.high_watermark = log.log_end_offset
    log.maybe_increment_log_start_offset(3)
    assert log.max_timestamp_and_offset() == (BASE_TS + 400, 4)
    log.close()


def test_after_a_cleaning_the_max_of_the_records_kept(tmp_path: Path) -> None:
    """The cleaner rebuilds a batch from the records it keeps: its max timestamp and the record holding it
    are those of the kept records, as a lookup after the swap finds them (and again after a reopen)."""
    config = small_config(cleanup_policy="compact", segment_bytes=10**6, delete_retention_ms=1000)
    log = open_log(tmp_path / "t-0", config)
    records = [Record(0, BASE_TS + d, k.encode(), b"v") for k, d in (("a", 100), ("b", 400), ("c", 300), ("d", 200))]
    log.append(build_batch(records, compression=ZSTD), leader_epoch=0, now_ms=BASE_TS)
    log.append(build_batch([Record(0, BASE_TS + 50, b"b", b"newer")]), leader_epoch=0, now_ms=BASE_TS)
    log.roll()
    log.high_watermark = log.log_end_offset
    assert log.max_timestamp_and_offset() == (BASE_TS + 400, 1)
    assert LogCleaner(CleanerConfig()).clean_now(log, OffsetMap(100), BASE_TS) is not None
    assert log.max_timestamp_and_offset() == (BASE_TS + 300, 2)
    log.close()
    log = open_log(tmp_path / "t-0", config, had_clean_shutdown=True)
    assert log.max_timestamp_and_offset() == (BASE_TS + 300, 2)
    log.close()
