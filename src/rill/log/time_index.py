"""The time index (``<base offset>.timeindex``): sparse map from timestamp to offset in the segment.

Each entry is 12 bytes, big-endian::

    offset  size  field
         0     8  timestamp       int64   largest timestamp seen in the segment up to this point
         8     4  relativeOffset  int32   last offset of the batch that carried it, minus the base offset

Both fields increase strictly. An entry is added beside each offset index entry when the
segment's max timestamp grew, and once more when the segment rolls, so the last entry of an
inactive segment holds its largest timestamp (what ``retention.ms`` compares against). Only the
first entry can be all zero: timestamp 0 at the segment's base offset (``FIRST_MAY_BE_ZERO``).
"""

from __future__ import annotations

import struct
from pathlib import Path

from rill.log.abstract_index import AbstractIndex


class TimeIndex(AbstractIndex):
    ENTRY = struct.Struct(">qi")
    FIRST_MAY_BE_ZERO = True

    def __init__(self, path: Path, base_offset: int, max_index_size: int, writable: bool) -> None:
        super().__init__(path, base_offset, max_index_size, writable)

    def last_entry(self) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the last entry."""
        last = self.last_values()
        if last is None:
            return None
        return last[0], self.base_offset + last[1]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Add an entry if ``timestamp`` is above the last one; returns whether the index is now full."""
        last = self._last if self._last is not None else self.last_values()
        if last is not None and (timestamp <= last[0] or offset - self.base_offset < last[1]):
            return False
        if skip_full_check and self.is_full:
            self.resize((self._entries + 1) * self.entry_size)
        return self._write_entry(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry with timestamp <= target, else ``(-1, base)``."""
        slot = self._largest_lower_bound(timestamp, 0)
        if slot < 0:
            return -1, self.base_offset
        ts, rel = self.entry(slot)
        return ts, self.base_offset + rel

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        keep = self._largest_lower_bound(offset - self.base_offset - 1, 1) + 1
        self._truncate_entries(keep)

    def sanity_ok(self, next_offset: int) -> bool:
        """Kafka's cheap check: the last entry points inside the segment (an empty one has none)."""
        last = self.last_entry()
        return last is None or self.base_offset <= last[1] < next_offset

    def all_entries(self) -> list[tuple[int, int]]:
        return [(ts, self.base_offset + rel) for ts, rel in (self.entry(n) for n in range(self._entries))]
