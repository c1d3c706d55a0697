"""The per-group configs of share groups (GROUP config resources, Kafka's ``GroupConfig``) that decide where a
share partition starts and what it may deliver:

- ``share.auto.offset.reset``: where a share partition the group has no state for starts: ``latest`` (the
  default: the high watermark), ``earliest`` (the log start), or ``by_duration:<ISO-8601 duration>`` (the first
  record at or after now minus the duration; the log end when there is none). The duration is what Java's
  ``Duration.parse`` takes (``PnDTnHnMn.nS``), never negative.
- ``share.isolation.level``: ``read_uncommitted`` (the default: every record up to the high watermark) or
  ``read_committed`` (only up to the last stable offset, and never a record of an aborted transaction).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

AUTO_OFFSET_RESET = "share.auto.offset.reset"
ISOLATION_LEVEL = "share.isolation.level"
AUTO_OFFSET_RESET_DEFAULT = "latest"
ISOLATION_LEVEL_DEFAULT = "read_uncommitted"
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
_ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}
_BY_DURATION = "by_duration:"

# Java's Duration.parse: an optional sign, P, days, then T with hours, minutes and (fractional) seconds
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)


class ShareGroupConfigError(ValueError):
    """A value Kafka's validators refuse."""


@dataclass(frozen=True, slots=True)
class AutoOffsetReset:
    """``kind`` is ``earliest``, ``latest`` or ``by_duration`` (with ``duration_ms``)."""

    kind: str
    duration_ms: int = 0


def parse_duration_ms(text: str) -> int:
    """Milliseconds of an ISO-8601 duration as Java's ``Duration.parse`` reads it; ValueError otherwise."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or m.group(3) == "T" or not any(m.group(i) for i in (2, 4, 5, 6)):
        raise ValueError(f"{text!r} is not an ISO-8601 duration (PnDTnHnMn.nS)")
    sign, days, _, hours, minutes, seconds, fraction = m.groups()
    ms = (int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60) * 1000
    second_ms = int(seconds or 0) * 1000
    if fraction:
        part = int(fraction.ljust(9, "0")[:3])
        second_ms += -part if (seconds or "").startswith("-") else part
    total = ms + second_ms
    return -total if sign == "-" else total


def parse_auto_offset_reset(value: str) -> AutoOffsetReset:
    text = value.strip().lower()
    if text in ("earliest", "latest"):
        return AutoOffsetReset(text)
    if text.startswith(_BY_DURATION):
        try:
            duration = parse_duration_ms(value.strip()[len(_BY_DURATION) :])
        except ValueError as e:
            raise ShareGroupConfigError(f"Invalid value {value} for configuration {AUTO_OFFSET_RESET}: {e}") from None
        if duration < 0:
            raise ShareGroupConfigError(
                f"Invalid value {value} for configuration {AUTO_OFFSET_RESET}: the duration must not be negative"
            )
        return AutoOffsetReset("by_duration", duration)
    raise ShareGroupConfigError(
        f"Invalid value {value} for configuration {AUTO_OFFSET_RESET}: "
        "must be earliest, latest or by_duration:<ISO-8601 duration>"
    )


def parse_isolation_level(value: str) -> int:
    level = _ISOLATION_LEVELS.get(value.strip().lower())
    if level is None:
        raise ShareGroupConfigError(
            f"Invalid value {value} for configuration {ISOLATION_LEVEL}: must be read_committed or read_uncommitted"
        )
    return level


def validate(name: str, value: str) -> None:
    """Raise ShareGroupConfigError for a value of one of these configs Kafka refuses."""
    if name == AUTO_OFFSET_RESET:
        parse_auto_offset_reset(value)
    elif name == ISOLATION_LEVEL:
        parse_isolation_level(value)


def auto_offset_reset_of(configs: Mapping[str, str]) -> AutoOffsetReset:
    """The group's strategy; a stored value that no longer parses counts as the default (never a failure)."""
    try:
        return parse_auto_offset_reset(configs.get(AUTO_OFFSET_RESET, AUTO_OFFSET_RESET_DEFAULT))
    except ShareGroupConfigError:
        return AutoOffsetReset(AUTO_OFFSET_RESET_DEFAULT)


def isolation_level_of(configs: Mapping[str, str]) -> int:
    try:
        return parse_isolation_level(configs.get(ISOLATION_LEVEL, ISOLATION_LEVEL_DEFAULT))
    except ShareGroupConfigError:
        return READ_UNCOMMITTED
