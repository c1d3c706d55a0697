"""The transactional checker: its verdicts on made-up reads, and a bounded run (application SIGKILLed mid-
transaction eight times, the broker SIGKILLed twice, a hanging transaction left to its timeout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rill.testing import broker
from rill.testing.txn_checker import BROKER_CONFIGS, check, run


def test_a_clean_read_has_no_anomalies() -> None:
    read = {0: [(0, "0|a:1|2"), (1, "2|a:1|2")], 1: [(0, "1|a:2|1")]}
    report = check(3, [read, read])
    assert (report.lost, report.duplicates, report.aborted_reads, report.half_visible) == (0, 0, 0, 0)
    assert report.ok and report.read == 3


def test_each_anomaly_is_counted() -> None:
    final = {
        0: [(0, "0|a:1|2"), (1, "1|a:1|2"), (2, "1|b:1|1")],  # 1 twice
        1: [(0, "3|c:1|2"), (1, "4|d:5|1|abort"), (2, "hanging-0|hanging|3")],  # c:1 half visible; two aborted
    }
    report = check(5, [final])
    assert report.duplicates == 1
    assert report.lost == 2  # 2, and 4 whose only output was aborted
    assert report.aborted_reads == 2
    assert report.half_visible == 1
    assert not report.ok


def test_a_watcher_read_can_stop_in_the_middle_of_a_transaction() -> None:
    final = {0: [(0, "0|a:1|2"), (1, "1|a:1|2")]}
    partial = {0: [(0, "0|a:1|2")]}
    assert check(2, [final, partial]).ok
    aborted = {0: [(0, "0|x:5|1|abort")]}
    assert check(2, [final, aborted]).aborted_reads == 1


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_kills_of_application_and_broker(tmp_path: Path) -> None:
    with broker(BROKER_CONFIGS, subprocess=True) as b:
        report = run(b, tmp_path, inputs=3000, app_kills=8, broker_kill_every=4, deadline_s=150, seed=23)
    detail = f"{report}\n{(tmp_path / 'app.log').read_text(errors='replace')[-3000:]}"
    assert report.app_kills == 8 and report.broker_kills == 2, detail
    assert report.read == 3000, detail
    assert (report.lost, report.duplicates, report.aborted_reads, report.half_visible) == (0, 0, 0, 0), detail
    assert report.hanging_aborted, detail
    assert report.committed_txns > 0, detail
    assert report.aborted_in_log > 0, detail  # there was aborted data to hide
