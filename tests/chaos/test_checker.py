"""The checker's verdicts on made-up histories: each anomaly it exists to find is counted."""

from __future__ import annotations

from rill.testing.chaos import Ack, FaultWindow, History, check


def _history(*acks: tuple[str, int, int, float]) -> History:
    history = History()
    history.acks = [Ack(v, p, o, t) for v, p, o, t in acks]
    history.attempted = len(acks)
    return history


def test_a_clean_history_has_no_anomalies() -> None:
    history = _history(("p0.0-0", 0, 0, 1.0), ("p0.0-1", 1, 0, 1.5), ("p0.0-2", 0, 1, 2.0))
    read = {0: [(0, "p0.0-0"), (1, "p0.0-2")], 1: [(0, "p0.0-1")]}
    report = check(history, [read, read])
    assert (report["lost"], report["duplicates"], report["inconsistent"], report["reordered"]) == (0, 0, 0, 0)
    assert report["acknowledged"] == report["read"] == 3


def test_lost_duplicated_moved_and_reordered_values_are_counted() -> None:
    history = _history(
        ("p0.0-0", 0, 0, 1.0),
        ("p0.0-1", 0, 1, 1.1),  # lost
        ("p0.0-2", 0, 2, 1.2),  # read at another offset
        ("p1.0-0", 0, 3, 1.3),
        ("p1.0-1", 0, 4, 1.4),
    )
    read = {0: [(0, "p0.0-0"), (1, "p1.0-1"), (2, "p0.0-9"), (3, "p1.0-0"), (4, "p0.0-2"), (5, "p0.0-0")]}
    report = check(history, [read])
    assert report["lost"] == 1
    assert report["duplicates"] == 1  # p0.0-0 at offsets 0 and 5
    assert report["inconsistent"] == 3  # offsets 1, 2 and 4 hold other values than acknowledged
    assert report["reordered"] == 1  # p1.0-1 before p1.0-0


def test_two_reads_disagreeing_on_an_offset_are_inconsistent() -> None:
    history = _history(("p0.0-0", 0, 0, 1.0))
    history.observed[(0, 1)] = "p0.0-7"  # seen while the faults ran, gone (or replaced) since
    first = {0: [(0, "p0.0-0"), (1, "p0.0-1")]}
    second = {0: [(0, "p0.0-0"), (1, "p0.0-2")]}
    report = check(history, [first, second])
    assert report["inconsistent"] == 2
    assert report["lost"] == 0


def test_unavailability_is_the_longest_gap_between_acknowledgements_in_a_fault() -> None:
    history = _history(
        ("p0.0-0", 0, 0, 0.0), ("p0.0-1", 1, 0, 1.0), ("p0.0-2", 0, 1, 2.0), ("p0.0-3", 1, 1, 7.0),
        ("p0.0-4", 0, 2, 7.5), ("p0.0-5", 1, 2, 8.0),
    )  # fmt: skip
    history.faults = [FaultWindow("kill_leader", "broker 0", 2.5, 6.0)]
    read = {0: [(0, "p0.0-0"), (1, "p0.0-2"), (2, "p0.0-4")], 1: [(0, "p0.0-1"), (1, "p0.0-3"), (2, "p0.0-5")]}
    report = check(history, [read])
    assert report["max_unavailable_s"] == 5.0  # 2.0 -> 7.0
    assert report["faults"][0]["max_unavailable_s"] == 4.5  # from the fault's start, 2.5, to 7.0
    assert report["faults"][0]["partition_unavailable_s"] == 5.0  # partition 0: 2.5 -> 7.5
    assert report["partition_unavailable_s"] == 6.0  # partition 1: 1.0 -> 7.0


def test_an_acknowledgement_without_an_offset_is_only_checked_for_presence() -> None:
    history = _history(("p0.0-0", 0, 0, 1.0), ("p0.0-1", 0, -1, 1.1), ("p0.0-2", 0, -1, 1.2))
    read = {0: [(0, "p0.0-0"), (1, "p0.0-1")]}
    report = check(history, [read])
    assert report["acknowledged_without_offset"] == 2
    assert report["inconsistent"] == 0
    assert report["lost"] == 1  # p0.0-2
