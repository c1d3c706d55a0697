"""The log cleaner's map from record keys to the offset of their latest record (Kafka's SkimpyOffsetMap).

Keys are stored as their 16-byte MD5 digest, as Kafka's map stores them (keys shorter than that as
themselves); two keys with the same digest would count as one (with MD5 over record keys, not a practical
concern). The map holds at most ``slots`` entries: ``log.cleaner.dedupe.buffer.size`` split among the
cleaner threads, times ``log.cleaner.io.buffer.load.factor``, divided by 128 bytes an entry, what one costs
in the pure-Python table (a dict: digest object, offset object, slot; measured 123). The compiled table
(``rill.records.key_scan``: 24-byte slots, at most half full, grown as keys come) takes 48 to 96 bytes an
entry, so either stays within the memory the setting gives it (and holds fewer keys than Kafka's 24-byte
entries would). When a log's dirty section has more distinct keys than that, the cleaner cleans the part
that fits and the rest at its next run.
"""

from __future__ import annotations

from rill.records import key_scan

DIGEST_SIZE = key_scan.DIGEST_SIZE
ENTRY_SIZE = 128  # bytes of memory one entry of the dict takes


def slots_for(buffer_bytes: int, load_factor: float) -> int:
    """How many keys a map made of ``buffer_bytes`` takes at ``load_factor``."""
    return max(1, int(buffer_bytes // ENTRY_SIZE * load_factor))


def key_digest(key: bytes) -> bytes:
    """The map's key for a record key: the key itself when shorter than a digest (no hashing, and no
    collision: a digest is always 16 bytes), else its MD5 digest (``rill.records.key_scan``, which also
    fills a map's ``entries`` from a batch's records)."""
    return key_scan.key_digest(key)


class OffsetMap:
    """Key digest -> latest offset, bounded by ``slots`` distinct keys (its ``table``: a
    ``rill.records.key_scan.KeyTable``, which ``key_scan.map_keys`` fills and ``key_scan.kept_records``
    reads a batch at a time)."""

    __slots__ = ("slots", "table")

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("an offset map needs at least one slot")
        self.slots = slots
        self.table = key_scan.KeyTable(slots)

    def __len__(self) -> int:
        return len(self.table)

    @property
    def full(self) -> bool:
        return len(self.table) >= self.slots

    @property
    def utilization(self) -> float:
        return len(self.table) / self.slots

    def put(self, digest: bytes, offset: int) -> None:
        self.table.put(digest, offset)

    def get(self, digest: bytes) -> int:
        """The latest offset of the key, -1 when the map does not hold it."""
        return self.table.get(digest)

    def clear(self) -> None:
        self.table.clear()
