"""What an append did (Kafka's LogAppendInfo)."""

from __future__ import annotations

from typing import NamedTuple


class LogAppendInfo(NamedTuple):
    """A named tuple: one is built per append."""

    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    record_count: int
    valid_bytes: int
    duplicate: bool
    max_timestamp: int
    offset_of_max_timestamp: int = -1
