"""Offset syncs: where a source partition's records landed in the target, for translating group offsets.

A mirror copies each source partition into the same partition of the target topic, in order, so a record at
source offset ``s`` lands at target offset ``s + d``. The distance ``d`` is constant while nothing intervenes,
and changes when the source has a gap (records removed by compaction, transaction markers, a log start moved by
retention) or when a restarted mirror copies a range again (at-least-once). A sync ``(s, t)`` is written each
time the distance changes, so for any source position between two syncs the target position is exact:

    translate(c) = min(t1 + (c - s1), t2)

where ``(s1, t1)`` is the last sync at or below ``c`` and ``(s2, t2)`` the next one (the clamp keeps a position
that falls in a source gap from skipping the record after the gap). A position past what has been copied maps
to the end of what has been copied, and one below the first sync to the first record copied (the records
before it were never copied by this mirror: nothing copied is skipped).

Syncs are kept in a topic of the target cluster, ``mirror.<name>.offset-syncs`` (one partition, infinite
retention), so a restarted mirror, or another process of the same mirror that takes the partition over, can
translate positions copied before it. Record layout: key ``<target topic>:<partition>`` (UTF-8; a reader files it
under the source topic, the name without the mirror's prefix), value
``<source offset> <target offset>`` (ASCII decimal).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field

SYNCS_TOPIC_FORMAT = "mirror.{name}.offset-syncs"
_DECIMAL = re.compile(r"[0-9]{1,19}")
_MAX_PARTITION = 2**31 - 1
_MAX_OFFSET = 2**63 - 1


def syncs_topic(name: str) -> str:
    return SYNCS_TOPIC_FORMAT.format(name=name)


def encode_sync(topic: str, partition: int, source: int, target: int) -> tuple[bytes, bytes]:
    return f"{topic}:{partition}".encode(), f"{source} {target}".encode()


def decode_sync(key: bytes | None, value: bytes | None) -> tuple[str, int, int, int] | None:
    """(topic, partition, source offset, target offset), or None for a record that is not a sync: the topic is
    a normal one any client with WRITE on it may produce to, so its records may be anything (a negative offset,
    which would reach a group's committed offsets as a logical one, included)."""
    if key is None or value is None:
        return None
    try:
        topic, colon, partition = key.decode().rpartition(":")
        source, target = value.decode("ascii").split(" ")
    except ValueError:  # UnicodeDecodeError included
        return None
    if not (colon and topic and all(_DECIMAL.fullmatch(n) for n in (partition, source, target))):
        return None
    numbers = int(partition), int(source), int(target)
    if numbers[0] > _MAX_PARTITION or max(numbers[1:]) > _MAX_OFFSET:
        return None
    return topic, *numbers


@dataclass(slots=True)
class PartitionSyncs:
    """The syncs of one partition, in source-offset order, and how far this process has copied it."""

    sources: list[int] = field(default_factory=list)
    targets: list[int] = field(default_factory=list)
    last_source: int = -1  # the last source offset copied (and acknowledged by the target), -1 if none
    last_target: int = -1

    def add(self, source: int, target: int) -> bool:
        """Record that the source record at ``source`` is at ``target``; True when this is a new sync (the
        distance changed, or it is the first), which the caller then persists."""
        new = not self.sources or target - source != self.last_target - self.last_source or source <= self.last_source
        if new:
            if self.sources and source <= self.sources[-1]:
                # The source was copied again from an earlier position (a restart): the newer syncs win.
                cut = bisect_right(self.sources, source - 1)
                del self.sources[cut:], self.targets[cut:]
            self.sources.append(source)
            self.targets.append(target)
        if source > self.last_source or new:
            self.last_source, self.last_target = source, target
        return new

    def load(self, source: int, target: int) -> None:
        """A sync read back from the syncs topic (in the order it was written). The last one read is the
        furthest copy known: one written by a copy repeated from an earlier position (a restart) supersedes
        the syncs above it, and positions past it are not extrapolated from syncs the repeated copy has not
        reached (a source gap it has not copied yet would shift them)."""
        if self.sources and source <= self.sources[-1]:
            cut = bisect_right(self.sources, source - 1)
            del self.sources[cut:], self.targets[cut:]
        self.sources.append(source)
        self.targets.append(target)
        self.last_source, self.last_target = source, target

    def translate(self, position: int) -> int | None:
        """The target position for a consumer positioned at source offset ``position`` (the next record it
        would read), or None when nothing of the partition has been copied."""
        if not self.sources:
            return None
        i = bisect_right(self.sources, position) - 1
        if i < 0:
            return self.targets[0]
        if position > self.last_source:
            return self.last_target + 1
        translated = self.targets[i] + (position - self.sources[i])
        if i + 1 < len(self.targets):
            translated = min(translated, self.targets[i + 1])
        return translated
