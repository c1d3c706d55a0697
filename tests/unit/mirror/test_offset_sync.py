"""Offset syncs: a group's source position translated to the target never skips a copied record, and is exact
when each record was copied once; the syncs read back after a restart translate as safely."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rill.mirror.offset_sync import PartitionSyncs, decode_sync, encode_sync


def test_sync_records_round_trip_and_foreign_records_are_ignored() -> None:
    key, value = encode_sync("orders.eu:1", 3, 120, 95)
    assert decode_sync(key, value) == ("orders.eu:1", 3, 120, 95)
    assert decode_sync(b"garbage", b"1 2") is None
    assert decode_sync(b"t:0", b"x") is None
    assert decode_sync(None, b"1 2") is None


def test_translation_across_a_source_gap_and_a_copy_repeated_after_a_restart() -> None:
    syncs = PartitionSyncs()
    new = [syncs.add(s, t) for s, t in [(0, 0), (1, 1), (2, 2), (10, 3), (11, 4)]]  # source offsets 3..9 gone
    assert new == [True, False, False, True, False]
    assert [syncs.translate(c) for c in (0, 2, 3, 9, 10, 11, 12, 50)] == [0, 2, 3, 3, 3, 4, 5, 5]
    # A restart copies again from source offset 10: those records land at target 5 and 6.
    assert syncs.add(10, 5) and not syncs.add(11, 6)
    assert [syncs.translate(c) for c in (2, 10, 11, 12)] == [2, 5, 6, 7]
    assert PartitionSyncs().translate(0) is None


@st.composite
def copies(draw: st.DrawFn) -> tuple[list[int], list[tuple[int, int]]]:
    """Source offsets (with gaps) and the (source, target) pairs of a copy that restarts from earlier positions."""
    gaps = draw(st.lists(st.integers(1, 4), min_size=1, max_size=40))
    source = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    pairs: list[tuple[int, int]] = []
    target, index = 0, 0
    while index < len(source):
        run = draw(st.integers(1, len(source) - index))
        for s in source[index : index + run]:
            pairs.append((s, target))
            target += 1
        index += run
        if index < len(source) and draw(st.booleans()):
            index = draw(st.integers(max(0, index - 5), index))  # restarted from an earlier committed position
    return source, pairs


@settings(max_examples=300, deadline=None)
@given(copies(), st.data())
def test_a_translated_position_never_skips_a_copied_record(case: tuple[list[int], list[tuple[int, int]]],
                                                          data: st.DataObject) -> None:  # fmt: skip
    source, pairs = case
    live, persisted = PartitionSyncs(), []
    for s, t in pairs:
        if live.add(s, t):
            persisted.append((s, t))
    reloaded = PartitionSyncs()
    for s, t in persisted:
        reloaded.load(s, t)
    repeated = len({s for s, _ in pairs}) != len(pairs)
    where = {s: t for s, t in pairs}  # the last copy of each source record
    for c in range(0, source[-1] + 3):
        for syncs in (live, reloaded):
            t = syncs.translate(c)
            assert t is not None
            # Every source record at or after c has a copy at or after t: a group resuming at t misses nothing.
            assert all(where[s] >= t for s in where if s >= c), (c, t)
        exact = next((where[s] for s in sorted(where) if s >= c), pairs[-1][1] + 1)
        if not repeated:
            assert live.translate(c) == exact, c
