"""The offset index (``<base offset>.index``): sparse map from offset to byte position in the segment.

Each entry is 8 bytes, big-endian::

    offset  size  field
         0     4  relativeOffset  int32   a batch's last offset minus the segment's base offset
         4     4  position        int32   byte position of that batch in the ``.log`` file

Entries are sorted by both fields. One entry is added per ``index.interval.bytes`` of appended
batches, never for the batch at position 0, so no valid entry is all zero. A lookup finds the
last entry at or below a target and the reader scans forward from its position.
"""

from __future__ import annotations

import struct
from pathlib import Path

from rill.log.abstract_index import AbstractIndex


class OffsetIndex(AbstractIndex):
    ENTRY = struct.Struct(">ii")

    def __init__(self, path: Path, base_offset: int, max_index_size: int, writable: bool) -> None:
        super().__init__(path, base_offset, max_index_size, writable)

    def append(self, offset: int, position: int) -> bool:
        """Add an entry unless ``offset`` is not above the last one; returns whether the index
        is now full."""
        relative = offset - self.base_offset
        last = self._last if self._last is not None else self.last_values()
        if last is not None and relative <= last[0]:
            return False
        return self._write_entry(relative, position)

    @property
    def last_offset(self) -> int:
        last = self.last_values()
        return self.base_offset if last is None else self.base_offset + last[0]

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry with offset <= target, else ``(base, 0)``."""
        slot = self._largest_lower_bound(offset - self.base_offset, 0)
        if slot < 0:
            return self.base_offset, 0
        rel, pos = self.entry(slot)
        return self.base_offset + rel, pos

    def lookup_by_position(self, position: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry with position <= target, else ``(base, 0)``."""
        slot = self._largest_lower_bound(position, 1)
        if slot < 0:
            return self.base_offset, 0
        rel, pos = self.entry(slot)
        return self.base_offset + rel, pos

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        slot = self._largest_lower_bound(offset - self.base_offset - 1, 0)
        self._truncate_entries(slot + 1)

    def sanity_ok(self, log_size: int) -> bool:
        """Kafka's cheap check: the last entry lies beyond the base and inside the log file."""
        if self._entries == 0:
            return True
        rel, pos = self.entry(self._entries - 1)
        first_rel, first_pos = self.entry(0)
        return rel > 0 and first_rel <= rel and 0 < first_pos <= pos < log_size

    def all_entries(self) -> list[tuple[int, int]]:
        return [(self.base_offset + rel, pos) for rel, pos in (self.entry(n) for n in range(self._entries))]
