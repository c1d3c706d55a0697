"""Kafka's BROKER_LOGGER config resource, over Python's logging: DescribeConfigs lists every logger of the
broker process with its level, and IncrementalAlterConfigs sets (SET) or clears (DELETE) one at run time.

Levels go by their log4j names, as Kafka's clients and tools send them; Python has no TRACE or OFF, so
TRACE is level 5 and OFF a level above CRITICAL. The root logger is named ``root`` and keeps a level.
"""

from __future__ import annotations

import logging

from rill.errors import ErrorCode, KafkaError

ROOT = "root"
LEVELS: dict[str, int] = {
    "TRACE": 5,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}


def level_name(level: int) -> str:
    """The log4j name of a Python level (the nearest at or above it)."""
    return next((name for name, value in LEVELS.items() if level <= value), "OFF")


def _logger(name: str) -> logging.Logger:
    if name == ROOT:
        return logging.getLogger()
    found = logging.Logger.manager.loggerDict.get(name)
    if not isinstance(found, logging.Logger):  # absent, or only a placeholder for its children
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Logger {name} does not exist!")
    return found


def current_levels() -> dict[str, str]:
    """Every logger of the process (``root`` first) with its effective level."""
    levels = {ROOT: level_name(logging.getLogger().getEffectiveLevel())}
    for name, logger in sorted(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            levels[name] = level_name(logger.getEffectiveLevel())
    return levels


def check_change(name: str, level: str | None) -> None:
    """Kafka's checks of one change: the logger exists; a level set is a log4j level; the root logger's
    level is never removed (``level`` None)."""
    _logger(name)
    if level is None:
        if name == ROOT:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Removing the log level of the {ROOT} logger is not allowed")
    elif level.upper() not in LEVELS:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"Cannot set the log level of {name} to {level} as it is not a supported log level."
            f" Valid log4j levels are {', '.join(LEVELS)}",
        )


def apply_change(name: str, level: str | None) -> None:
    """Set ``name``'s level, or (None) let it follow its parent's again."""
    _logger(name).setLevel(logging.NOTSET if level is None else LEVELS[level.upper()])
