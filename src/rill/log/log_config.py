"""Per-log configuration, named after Kafka's topic configs and carrying Kafka's defaults."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rill.errors import ErrorCode, KafkaError
from rill.records.compression import DECOMPRESSED_LIMIT

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("delete", "compact")


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 60 * 60 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 60 * 60 * 1000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    max_message_bytes: int = 1024 * 1024 + 12
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX  # deprecated by Kafka; fills in for either above
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 24 * 60 * 60 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    # derived from message_timestamp_type (plain fields: the append path reads them per batch)
    log_append_time: bool = dataclasses.field(init=False, repr=False, compare=False)
    create_time_bounds: tuple[int, int] | None = dataclasses.field(init=False, repr=False, compare=False)
    """How far (ms) before and after the broker's clock a CreateTime may lie; None: no check."""
    single_batch_max_bytes: int = dataclasses.field(init=False, repr=False, compare=False)
    """The largest batch the single-batch append path takes (the smaller of ``max.message.bytes``
    and ``segment.bytes``); -1 when CreateTimes are bounded, whose record-by-record check only the
    general path makes."""
    compacted: bool = dataclasses.field(init=False, repr=False, compare=False)
    """``compact`` is among the cleanup policies: every record appended needs a key."""
    max_segment_ms: int = dataclasses.field(init=False, repr=False, compare=False)
    """When the active segment rolls by time: ``segment.ms``, or ``max.compaction.lag.ms`` when the log is
    compacted and that is shorter (Kafka's rule: records older than the lag must become cleanable)."""
    max_decompressed_bytes: int = dataclasses.field(init=False, repr=False, compare=False)
    """The most the broker decompresses of one producer batch (``compression.DECOMPRESSED_LIMIT``,
    or ``max.message.bytes`` when larger)."""

    def __post_init__(self) -> None:
        log_append_time = self.message_timestamp_type == "LogAppendTime"
        object.__setattr__(self, "log_append_time", log_append_time)
        # As Kafka does while the deprecated difference setting lives on: it stands in for a bound
        # left at its default.
        diff = self.message_timestamp_difference_max_ms
        before = self.message_timestamp_before_max_ms
        after = self.message_timestamp_after_max_ms
        before = diff if before == LONG_MAX else before
        after = diff if after == LONG_MAX else after
        checked = not log_append_time and (before < LONG_MAX or after < LONG_MAX)
        object.__setattr__(self, "create_time_bounds", (before, after) if checked else None)
        fast_max = -1 if checked else min(self.max_message_bytes, self.segment_bytes)
        object.__setattr__(self, "single_batch_max_bytes", fast_max)
        compacted = "compact" in self.cleanup_policy.split(",")
        object.__setattr__(self, "compacted", compacted)
        roll_ms = min(self.segment_ms, self.max_compaction_lag_ms) if compacted else self.segment_ms
        object.__setattr__(self, "max_segment_ms", roll_ms)
        object.__setattr__(self, "max_decompressed_bytes", max(DECOMPRESSED_LIMIT, self.max_message_bytes))

    def random_segment_jitter(self) -> int:
        """A new segment's roll jitter, as Kafka draws it for each segment: uniform in
        [0, min(``segment.jitter.ms``, ``segment.ms``)), so that partitions made together do not all
        roll together. The segment rolls by time after ``segment.ms`` less this."""
        bound = min(self.segment_jitter_ms, self.segment_ms)
        return random.randrange(bound) if bound > 0 else 0

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, str], defaults: LogConfig | None = None) -> LogConfig:
        """Overlay Kafka topic configs (``segment.bytes`` = ``"1048576"``, ...) on ``defaults``.

        Unknown names are ignored (they belong to other layers); a bad value raises
        ``KafkaError(INVALID_CONFIG)`` naming the config.
        """
        base = defaults if defaults is not None else cls()
        changes: dict[str, Any] = {}
        for name, raw in configs.items():
            spec = _TOPIC_CONFIGS.get(name)
            if spec is None:
                continue
            field, parse = spec
            try:
                changes[field] = parse(raw)
            except ValueError as e:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {raw!r} for {name}: {e}") from None
        return dataclasses.replace(base, **changes)

    def to_topic_configs(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, (field, _) in _TOPIC_CONFIGS.items():
            out[name] = str(getattr(self, field))
        return out


def _int_in(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        value = int(str(raw).strip())
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")
        return value

    return parse


def _choice(options: tuple[str, ...]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = str(raw).strip()
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return value

    return parse


def _ratio(raw: str) -> float:
    value = float(str(raw).strip())
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0 and 1")
    return value


def _cleanup_policy(raw: str) -> str:
    """A list of ``delete`` and ``compact``; the empty list (Kafka 4.2) keeps every record: no retention,
    no compaction."""
    parts = [p.strip() for p in str(raw).split(",") if p.strip()]
    if any(p not in CLEANUP_POLICIES for p in parts):
        raise ValueError("must be a list of delete, compact")
    return ",".join(parts)


# Kafka's topic config name -> (LogConfig field, parser with Kafka's validity range)
_TOPIC_CONFIGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "segment.bytes": ("segment_bytes", _int_in(14, INT_MAX)),
    "segment.ms": ("segment_ms", _int_in(1, LONG_MAX)),
    "segment.jitter.ms": ("segment_jitter_ms", _int_in(0, LONG_MAX)),
    "segment.index.bytes": ("segment_index_bytes", _int_in(4, INT_MAX)),
    "index.interval.bytes": ("index_interval_bytes", _int_in(0, INT_MAX)),
    "retention.ms": ("retention_ms", _int_in(-1, LONG_MAX)),
    "retention.bytes": ("retention_bytes", _int_in(-LONG_MAX - 1, LONG_MAX)),  # any negative: no size limit
    "flush.messages": ("flush_messages", _int_in(1, LONG_MAX)),
    "flush.ms": ("flush_ms", _int_in(0, LONG_MAX)),
    "file.delete.delay.ms": ("file_delete_delay_ms", _int_in(0, LONG_MAX)),
    "max.message.bytes": ("max_message_bytes", _int_in(0, INT_MAX)),
    "message.timestamp.type": ("message_timestamp_type", _choice(TIMESTAMP_TYPES)),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", _int_in(0, LONG_MAX)),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", _int_in(0, LONG_MAX)),
    "message.timestamp.difference.max.ms": ("message_timestamp_difference_max_ms", _int_in(0, LONG_MAX)),
    "cleanup.policy": ("cleanup_policy", _cleanup_policy),
    "delete.retention.ms": ("delete_retention_ms", _int_in(0, LONG_MAX)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _int_in(0, LONG_MAX)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _int_in(1, LONG_MAX)),
}
