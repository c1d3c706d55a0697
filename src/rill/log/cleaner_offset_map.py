"""The log cleaner's map from record keys to the offset of their latest record (Kafka's SkimpyOffsetMap).

Keys are stored as their 16-byte MD5 digest, as Kafka's map stores them (keys shorter than that as
themselves); two keys with the same digest would count as one (with MD5 over record keys, not a practical
concern). The map holds at most ``slots`` entries: ``log.cleaner.dedupe.buffer.size`` split among the
cleaner threads, times ``log.cleaner.io.buffer.load.factor``, divided by what an entry costs here: about
128 bytes in a Python dict (digest object, offset object, slot; measured 123), against the 24 of Kafka's
flat buffer, so the map stays within the memory the setting gives it (and holds fewer keys than Kafka's
would). When a log's dirty section has more distinct keys than that, the cleaner cleans the part that fits
and the rest at its next run.
"""

from __future__ import annotations

import hashlib

DIGEST_SIZE = 16
ENTRY_SIZE = 128  # bytes of memory one entry of the dict takes


def slots_for(buffer_bytes: int, load_factor: float) -> int:
    """How many keys a map made of ``buffer_bytes`` takes at ``load_factor``."""
    return max(1, int(buffer_bytes // ENTRY_SIZE * load_factor))


def key_digest(key: bytes) -> bytes:
    """The map's key for a record key: the key itself when shorter than a digest (no hashing, and no
    collision: a digest is always 16 bytes), else its MD5 digest."""
    if len(key) < DIGEST_SIZE:
        return key
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """Key digest -> latest offset, bounded by ``slots`` distinct keys."""

    __slots__ = ("_map", "inserts", "latest_offset", "lookups", "slots")

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("an offset map needs at least one slot")
        self.slots = slots
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1  # the largest offset put in the map
        self.lookups = 0
        self.inserts = 0

    def __len__(self) -> int:
        return len(self._map)

    @property
    def full(self) -> bool:
        return len(self._map) >= self.slots

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots

    def would_fit(self, digests: list[bytes]) -> bool:
        """Would putting all of ``digests`` stay within the slots?"""
        new = sum(1 for d in set(digests) if d not in self._map)
        return len(self._map) + new <= self.slots

    def put(self, digest: bytes, offset: int) -> None:
        self.inserts += 1
        self._map[digest] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, digest: bytes) -> int:
        """The latest offset of the key, -1 when the map does not hold it."""
        self.lookups += 1
        return self._map.get(digest, -1)

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1
