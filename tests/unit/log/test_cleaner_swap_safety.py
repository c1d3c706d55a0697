"""A cleaning's output is installed after a crash only if the crash came during its swap: the cleaned segments
are written as ``.cleaned`` files and named ``.swap`` by the swap itself (on the loop, where a truncation or a
topic's deletion cannot interleave), as Kafka does. A cleaning that finished while the log was truncated, or
whose directory was given to a topic created again under the same name, leaves files a restart deletes. (A
crash during the swap: ``test_log_cleaner.test_a_swap_left_by_a_crash_is_completed_and_cleaned_files_deleted``.)"""

from __future__ import annotations

import os
from pathlib import Path

from logtest_util import all_records
from test_log_cleaner import NOW, compact_config, fill

from rill.log.cleaner_offset_map import OffsetMap
from rill.log.log import Log
from rill.log.log_cleaner import clean, plan_cleaning


def _content(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in all_records(log)]


def test_a_cleaning_finished_before_a_truncation_is_not_installed_by_a_restart(tmp_path: Path) -> None:
    config = compact_config()
    log = Log(tmp_path / "t-0", config)
    fill(log, 60)
    plan = plan_cleaning(log, 0, NOW)
    assert plan is not None
    result = clean(plan, OffsetMap(100))  # done, not swapped in yet
    assert result is not None
    # as a follower rejoining: the log is truncated into the cleaned range and takes the new leader's records
    log.truncate_to(result.map_end // 2, now_ms=NOW)
    fill(log, 40)
    expected = _content(log)
    for seg in result.cleaned:
        seg.close()
    log.close(clean=False)  # the crash, before the swap was tried
    log = Log(tmp_path / "t-0", config, recovery_point=0)
    try:
        assert _content(log) == expected
        assert not any(n.endswith((".swap", ".cleaned", ".swap-end")) for n in os.listdir(log.dir))
    finally:
        log.close()


def test_a_cleaning_of_a_deleted_topic_is_not_installed_into_the_topic_created_again(tmp_path: Path) -> None:
    config = compact_config()
    old = Log(tmp_path / "t-0", config)
    fill(old, 60)
    plan = plan_cleaning(old, 0, NOW)
    assert plan is not None
    # the topic is deleted (its directory set aside) and created again under the same name while the cleaning runs
    old.rename_dir(tmp_path / "t-0.0123456789abcdef-delete")
    new = Log(tmp_path / "t-0", config)
    fill(new, 12)
    expected = _content(new)
    result = clean(plan, OffsetMap(100))  # the old log's cleaning writes where it was planned
    assert result is not None
    for seg in result.cleaned:
        seg.close()
    old.close(clean=False)
    new.close(clean=False)  # the crash
    new = Log(tmp_path / "t-0", config, recovery_point=0)
    try:
        assert _content(new) == expected
    finally:
        new.close()
