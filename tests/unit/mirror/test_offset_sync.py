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


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=30), st.data())
def test_translation_after_kills_never_passes_what_the_target_holds(gaps: list[int], data: st.DataObject) -> None:
    """Processes of a mirror copy one partition in turn: each loads the syncs made durable so far, copies from
    the committed position, sometimes commits (its syncs durable first), and is killed with only some of its
    newest syncs durable. Whatever a process knows at any moment, a translated position has every source
    record at or after it copied at or after it, or still to be copied (at the end of the target)."""
    source = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    copies: dict[int, int] = {}  # source offset -> target offset of its latest copy
    durable: list[tuple[int, int]] = []
    committed, target_end = 0, 0  # index into source; the target's log end offset

    def check(syncs: PartitionSyncs, next_copy: int) -> None:
        """``next_copy``: the index of the next source record the live process copies (it, and every later
        one, will be copied again at the end of the target)."""
        ahead = set(source[next_copy:])
        for c in range(0, source[-1] + 3):
            t = syncs.translate(c)
            if t is None:
                continue
            assert t <= target_end, (c, t)
            missed = [s for s, where in copies.items() if s >= c and where < t and s not in ahead]
            assert not missed, (c, t, missed, durable)

    for _ in range(data.draw(st.integers(1, 5))):
        syncs = PartitionSyncs()
        for s, t in durable:
            syncs.load(s, t)
        check(syncs, committed)
        pending: list[tuple[int, int]] = []
        run = data.draw(st.integers(0, len(source) - committed))
        for i in range(committed, committed + run):
            copies[source[i]] = target_end
            if syncs.add(source[i], target_end):
                pending.append((source[i], target_end))
            target_end += 1
            if data.draw(st.booleans()):  # a commit: the syncs are made durable, then the position
                durable += pending
                pending = []
                committed = i + 1
            check(syncs, i + 1)
        durable += pending[: data.draw(st.integers(0, len(pending)))]  # killed: the newest syncs may be lost
