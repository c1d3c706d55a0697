"""Small value types shared by every layer (no I/O, no protocol knowledge)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class FileRegion:
    """A byte range of an open file, sent to a socket with ``os.sendfile`` (zero copy).

    ``fd`` stays open for as long as the segment that owns it exists; segments are deleted
    only after ``file.delete.delay.ms``, so a region handed to the network layer stays valid
    while its response is written.
    """

    fd: int
    position: int
    length: int
