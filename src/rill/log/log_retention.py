"""Which leading segments of a log retention may delete (Kafka's retention.ms, retention.bytes
and log start offset rules). Pure policy: ``Log`` removes what these functions pick.

A segment may go only when everything in it is below the high watermark and it is not the
empty active segment; deletion always takes a prefix of the segment list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rill.log.log_config import LogConfig
from rill.log.log_segment import LogSegment

SegmentPredicate = Callable[[LogSegment, LogSegment | None], bool]


def deletable_prefix(
    segments: Sequence[LogSegment], predicate: SegmentPredicate, high_watermark: int, log_end_offset: int
) -> int:
    """Number of leading segments ``predicate(segment, next segment or None)`` accepts, stopping
    at the first one that holds offsets at or above the high watermark."""
    n = 0
    for i, seg in enumerate(segments):
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        upper = nxt.base_offset if nxt is not None else log_end_offset
        if high_watermark < upper or (nxt is None and seg.size == 0):
            break
        if not predicate(seg, nxt):
            break
        n += 1
    return n


def below_start_offset(log_start_offset: int) -> SegmentPredicate:
    """Segments wholly below ``log_start_offset`` (the next segment starts at or below it)."""
    return lambda _seg, nxt: nxt is not None and nxt.base_offset <= log_start_offset


def retention_predicates(config: LogConfig, now_ms: int, total_bytes: int) -> list[SegmentPredicate]:
    """The time and size rules of ``config``, in Kafka's order (none when deletion is off)."""
    rules: list[SegmentPredicate] = []
    if not config.delete_enabled:
        return rules
    if config.retention_ms >= 0:
        retention_ms = config.retention_ms
        rules.append(lambda seg, _nxt: now_ms - seg.largest_timestamp() > retention_ms)
    if config.retention_bytes >= 0:
        excess = [total_bytes - config.retention_bytes]

        def over_bytes(seg: LogSegment, _nxt: LogSegment | None) -> bool:
            if excess[0] - seg.size >= 0:
                excess[0] -= seg.size
                return True
            return False

        rules.append(over_bytes)
    return rules
