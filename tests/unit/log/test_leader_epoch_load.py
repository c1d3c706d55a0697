"""``leader-epoch-checkpoint`` as the broker finds it at start: entries are taken as Kafka's cache assigns them in
turn, so an entry below zero, or one that does not follow those before it (epochs and start offsets both
increase), is dropped; a file that does not parse is ignored. Whatever the file holds, the cache answers."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from rill.log.checkpoints import write_epoch_checkpoint
from rill.log.leader_epoch_cache import LeaderEpochFileCache


def _loaded(entries: list[tuple[int, int]] | bytes) -> LeaderEpochFileCache:
    d = Path(tempfile.mkdtemp())
    path = d / "leader-epoch-checkpoint"
    if isinstance(entries, bytes):
        path.write_bytes(entries)
    else:
        write_epoch_checkpoint(path, entries, sync=False)
    return LeaderEpochFileCache(path)


def test_entries_that_do_not_increase_are_dropped() -> None:
    assert _loaded([(0, 0), (2, 10), (5, 30)]).entries == [(0, 0), (2, 10), (5, 30)]
    assert _loaded([(0, 0), (5, 100), (3, 50)]).entries == [(0, 0), (3, 50)]  # the later entry wins
    assert _loaded([(1, 0), (1, 5)]).entries == [(1, 0)]  # the same epoch again starts no later
    assert _loaded([(-1, 0), (2, -5), (3, 7)]).entries == [(3, 7)]
    assert _loaded(b"0\n2\n1 x\n").entries == [] and _loaded(b"\xff").entries == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 2**31 - 1), st.integers(-3, 2**63 - 1)), max_size=8), st.integers(0, 99))
def test_whatever_the_file_holds_the_cache_is_ordered_and_answers(entries: list[tuple[int, int]], asked: int) -> None:
    cache = _loaded(entries)
    kept = cache.entries
    assert all(e >= 0 and o >= 0 for e, o in kept)
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(kept))
    cache.end_offset_for(asked, 1000)
    cache.epoch_for_offset(asked)
    cache.truncate_from_end(500)
    cache.truncate_from_start(3)
