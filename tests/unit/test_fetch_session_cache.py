"""The fetch session cache's slots and Kafka's eviction rules, on a given clock."""

from __future__ import annotations

import random
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from rill.api.fetch_session import (
    MIN_EVICTION_MS,
    CachedPartition,
    FetchSessionCache,
    PartitionKey,
    next_epoch,
)

T0 = 1_000_000


def _parts(n: int) -> dict[PartitionKey, CachedPartition]:
    return {("t", i): CachedPartition("t", uuid.UUID(int=0), i, 0, 1024) for i in range(n)}


def _cache(slots: int) -> FetchSessionCache:
    return FetchSessionCache(slots, rng=random.Random(1))


def test_epochs_wrap_to_one_and_final_stays_final() -> None:
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(0x7FFFFFFF) == 1
    assert next_epoch(-1) == -1


def test_a_young_session_is_kept_from_consumers_but_not_from_followers() -> None:
    cache = _cache(1)
    consumer = cache.maybe_create(T0, False, False, _parts(5))
    assert consumer
    assert cache.maybe_create(T0 + 1, False, False, _parts(50)) == 0  # young: not evictable by a consumer
    follower = cache.maybe_create(T0 + 2, True, False, _parts(1))
    assert follower and cache.get(consumer) is None and cache.evictions == 1
    assert cache.maybe_create(T0 + 3, True, False, _parts(50)) == 0  # a young follower session: kept from all


def test_a_session_unused_for_the_eviction_time_goes_first() -> None:
    cache = _cache(2)
    a = cache.maybe_create(T0, True, False, _parts(100))
    b = cache.maybe_create(T0 + 10, True, False, _parts(100))
    cache.touch(cache.get(b), T0 + MIN_EVICTION_MS)  # type: ignore[arg-type]
    new = cache.maybe_create(T0 + MIN_EVICTION_MS + 1, False, False, _parts(1))  # a is stale: even a consumer's
    assert new and cache.get(a) is None and cache.get(b) is not None


def test_between_old_sessions_the_larger_wins() -> None:
    cache = _cache(2)
    small = cache.maybe_create(T0, False, False, _parts(2))
    large = cache.maybe_create(T0, False, False, _parts(20))
    later = T0 + MIN_EVICTION_MS + 1
    for sid in (small, large):  # used again after the eviction time: old, and evictable by all
        cache.touch(cache.get(sid), later)  # type: ignore[arg-type]
    assert cache.maybe_create(later, False, False, _parts(1)) == 0  # smaller than both
    assert cache.maybe_create(later, False, False, _parts(2)) == 0  # as large as the smallest: no
    third = cache.maybe_create(later, False, False, _parts(3))
    assert third and cache.get(small) is None and cache.get(large) is not None


def test_counts_follow_updates_and_removals() -> None:
    cache = _cache(10)
    sid = cache.maybe_create(T0, False, False, _parts(3))
    session = cache.get(sid)
    assert session is not None and cache.total_partitions == 3
    session.update([(("u", 0), CachedPartition("u", uuid.UUID(int=0), 0, 0, 1))], [("t", 0), ("t", 1)])
    cache.touch(session, T0 + 1)
    assert cache.total_partitions == 2 and list(session.partitions) == [("t", 2), ("u", 0)]
    session.rotate(("t", 2))
    assert list(session.partitions) == [("u", 0), ("t", 2)]
    cache.remove(sid)
    assert cache.total_partitions == 0 and len(cache) == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 30), st.integers(0, 3 * MIN_EVICTION_MS)), max_size=40))
def test_the_cache_never_holds_more_than_its_slots(requests: list[tuple[bool, int, int]]) -> None:
    """Whatever fetchers ask, the cache keeps at most its slots, a privileged session younger than the eviction
    time is never evicted by a consumer's, and its partition count is the sum of its sessions'."""
    cache = _cache(3)
    now = T0
    for privileged, size, wait in requests:
        now += wait
        before = {sid: cache.get(sid) for sid in list(cache._sessions)}
        sid = cache.maybe_create(now, privileged, False, _parts(size))
        assert len(cache) <= 3
        for old_id, old in before.items():
            if cache.get(old_id) is None and not privileged:
                assert old is not None
                assert not old.privileged or now - old.last_used_ms > MIN_EVICTION_MS or old.evictable_by_all
        if sid:
            assert cache.get(sid) is not None
        assert cache.total_partitions == sum(len(s.partitions) for s in cache._sessions.values())
