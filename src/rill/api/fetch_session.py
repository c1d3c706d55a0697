"""Incremental fetch sessions (KIP-227): the broker's cache of its fetchers' sessions, after Kafka's
FetchSessionCache.

A full fetch (session epoch 0) makes a session of the partitions it named, if the cache has a slot or can free
one; its id goes back in the response, and the fetcher's next fetch (epoch 1, then 2, ...) names only the
partitions whose fetch parameters changed, the ones it adds, and (``forgotten_topics_data``) the ones it drops.
The response of such an incremental fetch holds only the partitions that have something to say: records, a
high watermark, last stable offset or log start offset other than the one last sent, an error, or a preferred
read replica (``CachedPartition.must_respond``). A partition left out had nothing new.

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's 1000). When it is full, a
new session takes the slot of (Kafka's rules, in this order): the least recently used session, if unused for
more than ``MIN_EVICTION_MS`` (2 minutes, a constant in Kafka too); else the least valuable session it may
evict, if worth less than itself. Followers' sessions are privileged: one may evict any consumer's session, and
a privileged or consumer session at least ``MIN_EVICTION_MS`` old; a consumer's may evict only a session at least
that old; between those, the session with more partitions is worth more. A session is not tied to a connection
(a fetcher may move to another one and go on); a session no fetch uses ends by eviction.

What one client can make the broker hold is bounded: the slots, and each session's partitions, never more than
``max_partitions`` (the larger of 1000 and the partitions the broker hosts: a fetcher has no reason to name more).
A full fetch past it gets no session; an incremental fetch that would pass it closes its session and is answered
FETCH_SESSION_ID_NOT_FOUND, so the fetcher starts again with a full fetch.

No I/O and no clock: times are given by the caller.
"""

from __future__ import annotations

import random
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rill.common import TopicPartition

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # a full fetch that asks for a session
FINAL_EPOCH = -1  # a full fetch without a session (and the end of any session it names)
MIN_EVICTION_MS = 120_000
MAX_EPOCH = 0x7FFFFFFF

PartitionKey = tuple[object, int]
"""A session's name for a partition: (topic name, partition), or (topic id, partition) in a session of topic ids."""


def next_epoch(epoch: int) -> int:
    """The session epoch after ``epoch`` (Kafka's FetchMetadata.nextEpoch: after the largest, 1 again)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """A partition of a session: the fetch parameters last named for it, and what its last response said."""

    topic: str | None  # None while a session's topic id is not known to this broker
    topic_id: uuid.UUID
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1  # the fetcher's own log start (a follower's)
    high_watermark: int = -1  # as last sent; -1 after an error, so the partition is sent again once it clears
    last_stable_offset: int = -1
    leader_log_start_offset: int = -1
    tp: TopicPartition | None = None  # the partition by name, once a follower's fetch looked it up

    def update_request(self, other: CachedPartition) -> None:
        """Take the fetch parameters of ``other`` (the same partition named again)."""
        self.fetch_offset = other.fetch_offset
        self.max_bytes = other.max_bytes
        self.current_leader_epoch = other.current_leader_epoch
        self.log_start_offset = other.log_start_offset

    def must_respond(self, part: Mapping[str, Any], *, update: bool = True) -> bool:
        """Whether the response partition ``part`` goes into an incremental response (Kafka's rule, with the last
        stable offset besides); with ``update``, remember what it tells."""
        respond = bool(part["_size"])
        hw, lso, start = part["high_watermark"], part["last_stable_offset"], part["log_start_offset"]
        if hw != self.high_watermark or lso != self.last_stable_offset or start != self.leader_log_start_offset:
            respond = True
            if update:
                self.high_watermark, self.last_stable_offset, self.leader_log_start_offset = hw, lso, start
        if part["preferred_read_replica"] >= 0:
            respond = True
        if part["error_code"]:
            respond = True
            if update:
                self.high_watermark = -1
        return respond


class FetchSession:
    """One fetcher's session: its partitions in order (those that last returned records go to the end, so the
    others get their turn within the response's byte limit), its epoch, and the cache's view of it."""

    __slots__ = (
        "cached_size",
        "creation_ms",
        "epoch",
        "evictable_by_all",
        "evictable_by_privileged",
        "last_used_ms",
        "partitions",
        "privileged",
        "session_id",
        "uses_topic_ids",
    )  # fmt: skip

    def __init__(self, session_id: int, privileged: bool, uses_topic_ids: bool,
                 partitions: dict[PartitionKey, CachedPartition], now_ms: int) -> None:  # fmt: skip
        self.session_id = session_id
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        self.partitions = partitions
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.cached_size = -1  # the size the cache counted at the last touch (-1: not counted yet)
        self.evictable_by_privileged = False
        self.evictable_by_all = False

    def key(self) -> tuple[bool, int, int]:
        """The session's worth when the cache must free a slot (Kafka's EvictableKey): the least is evicted."""
        return (self.privileged, self.cached_size, self.session_id)

    def update(self, named: Iterable[tuple[PartitionKey, CachedPartition]], forgotten: Iterable[PartitionKey]) -> None:
        """An incremental fetch: the partitions it names are added or take its parameters; the forgotten go."""
        for key, cached in named:
            current = self.partitions.get(key)
            if current is None:
                self.partitions[key] = cached
            else:
                current.update_request(cached)
        for key in forgotten:
            self.partitions.pop(key, None)

    def rotate(self, key: PartitionKey) -> None:
        """``key`` returned records: it goes to the end of the session's order."""
        cached = self.partitions.pop(key, None)
        if cached is not None:
            self.partitions[key] = cached


class FetchSessionCache:
    """The broker's sessions, at most ``max_entries``; see the module docstring for the eviction rules."""

    def __init__(self, max_entries: int, eviction_ms: int = MIN_EVICTION_MS, rng: random.Random | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._rng = rng if rng is not None else random.Random()
        self._sessions: dict[int, FetchSession] = {}
        self._lru: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self.total_partitions = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def _new_session_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, MAX_EPOCH - 1)
            if session_id not in self._sessions:
                return session_id

    def maybe_create(self, now_ms: int, privileged: bool, uses_topic_ids: bool,
                     partitions: dict[PartitionKey, CachedPartition]) -> int:  # fmt: skip
        """A new session of ``partitions`` if there is a slot or one can be freed: its id, else 0."""
        if len(self._sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_session_id(), privileged, uses_topic_ids, partitions, now_ms)
        self._sessions[session.session_id] = session
        self.touch(session, now_ms)
        return session.session_id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if not self._lru:
            return False
        stale = next(iter(self._lru.values()))
        if now_ms - stale.last_used_ms > self.eviction_ms:
            self._evict(stale)
            return True
        candidates = [s for s in self._sessions.values()
                      if (s.evictable_by_privileged if privileged else s.evictable_by_all)]  # fmt: skip
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.key)
        if (privileged, size, 0) < victim.key():
            return False
        self._evict(victim)
        return True

    def _evict(self, session: FetchSession) -> None:
        self.remove(session.session_id)
        self.evictions += 1

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._lru.pop(session_id, None)
            self.total_partitions -= max(session.cached_size, 0)
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """The session was used now: it becomes the most recently used, and its size and evictability are taken
        again (as Kafka, at each use: a session becomes evictable by all once used after ``eviction_ms``)."""
        if self._sessions.get(session.session_id) is not session:
            return
        session.last_used_ms = now_ms
        self._lru.pop(session.session_id, None)
        self._lru[session.session_id] = session
        self.total_partitions += len(session.partitions) - max(session.cached_size, 0)
        session.cached_size = len(session.partitions)
        old = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old
        session.evictable_by_all = old
