"""The values Kafka 4.2's GroupConfig takes for share.auto.offset.reset and share.isolation.level, and the
ones it refuses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rill.coordinator.share.share_group_config import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    AutoOffsetReset,
    ShareGroupConfigError,
    auto_offset_reset_of,
    isolation_level_of,
    parse_auto_offset_reset,
    parse_isolation_level,
)


@pytest.mark.parametrize(("value", "want"), [
    ("latest", AutoOffsetReset("latest")), ("EARLIEST", AutoOffsetReset("earliest")),
    ("by_duration:PT1H", AutoOffsetReset("by_duration", 3_600_000)),
    ("by_duration:P1DT2H3M4.5S", AutoOffsetReset("by_duration", 93_784_500)),
    ("by_duration:PT0S", AutoOffsetReset("by_duration", 0)),
    ("by_duration:pt30m", AutoOffsetReset("by_duration", 1_800_000)),
])  # fmt: skip
def test_accepted(value: str, want: AutoOffsetReset) -> None:
    assert parse_auto_offset_reset(value) == want


@pytest.mark.parametrize("value", ["", "first", "none", "by_duration:", "by_duration:P", "by_duration:PT",
                                   "by_duration:1h", "by_duration:-PT1H", "by_duration:PT-5S", "by_duration:P1Y",
                                   "duration:PT1H"])  # fmt: skip
def test_refused(value: str) -> None:
    with pytest.raises(ShareGroupConfigError, match=r"share\.auto\.offset\.reset"):
        parse_auto_offset_reset(value)


@given(days=st.integers(0, 400), hours=st.integers(0, 48), minutes=st.integers(0, 120), millis=st.integers(0, 59999))
def test_durations_read_as_java_reads_them(days: int, hours: int, minutes: int, millis: int) -> None:
    text = f"P{days}DT{hours}H{minutes}M{millis // 1000}.{millis % 1000:03d}S"
    want = ((days * 24 + hours) * 60 + minutes) * 60_000 + millis
    assert parse_auto_offset_reset("by_duration:" + text) == AutoOffsetReset("by_duration", want)


def test_isolation_levels_and_stored_values_that_no_longer_parse() -> None:
    assert parse_isolation_level("read_committed") == READ_COMMITTED
    assert parse_isolation_level("READ_UNCOMMITTED") == READ_UNCOMMITTED
    with pytest.raises(ShareGroupConfigError, match=r"share\.isolation\.level"):
        parse_isolation_level("read_most")
    # a value in the metadata that cannot be read is the default, never a failure of the fetch reading it
    assert auto_offset_reset_of({"share.auto.offset.reset": "garbage"}) == AutoOffsetReset("latest")
    assert isolation_level_of({"share.isolation.level": "garbage"}) == READ_UNCOMMITTED
    assert auto_offset_reset_of({}) == AutoOffsetReset("latest") and isolation_level_of({}) == READ_UNCOMMITTED
