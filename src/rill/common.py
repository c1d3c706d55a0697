"""Small value types shared by every layer (no I/O, no protocol knowledge)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


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


def repeated(keys: Iterable[K]) -> set[K]:
    """The keys that occur more than once (a request naming a topic, resource or config twice)."""
    seen: set[K] = set()
    twice: set[K] = set()
    for key in keys:
        (twice if key in seen else seen).add(key)
    return twice
