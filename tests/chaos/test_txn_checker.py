"""The transactional checker: its verdicts on made-up reads, and bounded runs (the application SIGKILLed mid-
transaction again and again, the broker or a leader SIGKILLed too, a hanging transaction left to its timeout)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rill.testing import broker
from rill.testing.cluster import cluster
from rill.testing.txn_checker import BROKER_CONFIGS, CLUSTER_CONFIGS, GROUP, check, run
from rill.testing.txn_faults import (
    cluster_fault,
    colocated_transactional_id,
    offsets_failover_fault,
    single_broker_fault,
)


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
        report = run(
            b.bootstrap_servers,
            tmp_path,
            kill_broker=single_broker_fault(b),
            inputs=3000,
            app_kills=8,
            broker_kill_every=4,
            deadline_s=150,
            seed=23,
        )
    detail = f"{report}\n{(tmp_path / 'app.log').read_text(errors='replace')[-3000:]}"
    assert report.app_kills == 8 and report.broker_kills == 2, detail
    assert report.read == 3000, detail
    assert (report.lost, report.duplicates, report.aborted_reads, report.half_visible) == (0, 0, 0, 0), detail
    assert report.hanging_aborted, detail
    assert report.committed_txns > 0, detail
    assert report.aborted_in_log > 0, detail  # there was aborted data to hide


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_kills_of_application_and_leaders_on_a_cluster(tmp_path: Path) -> None:
    """Three brokers, replication factor 3 everywhere: every other application kill also SIGKILLs the leader of
    an output partition (started again once its partitions are led with full ISRs)."""
    with cluster(3, CLUSTER_CONFIGS) as c:
        fault = cluster_fault(c, "txn-out", 3, random.Random(5))
        report = run(
            c.bootstrap_servers,
            tmp_path,
            kill_broker=fault,
            replication_factor=3,
            inputs=2000,
            app_kills=6,
            broker_kill_every=2,
            deadline_s=200,
            seed=5,
        )
    detail = f"{report}\n{(tmp_path / 'app.log').read_text(errors='replace')[-3000:]}"
    assert report.broker_kills == 3, detail
    assert report.read == 2000, detail
    assert (report.lost, report.duplicates, report.aborted_reads, report.half_visible) == (0, 0, 0, 0), detail
    assert report.hanging_aborted, detail


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_kills_of_application_and_of_the_groups_offsets_leader_with_its_followers_paused(tmp_path: Path) -> None:
    """Three brokers: between application kills, while the application runs, the followers of its group's
    ``__consumer_offsets`` partition are SIGSTOPped, its leader SIGKILLed a second later and the followers let go
    on; the input offsets committed in the transactions must survive the failover with the output, or the run
    writes some of it twice."""
    with cluster(3, CLUSTER_CONFIGS) as c:
        fault = offsets_failover_fault(c, GROUP, [("txn-out", 3), ("txn-in", 3)])
        report = run(
            c.bootstrap_servers,
            tmp_path,
            kill_broker=fault,
            transactional_id=colocated_transactional_id(c, GROUP),
            replication_factor=3,
            inputs=2000,
            app_kills=4,
            broker_kill_every=2,
            deadline_s=300,
            seed=11,
            fault_while_running=True,
        )
    detail = f"{report}\n{(tmp_path / 'app.log').read_text(errors='replace')[-3000:]}"
    assert report.broker_kills == 3, detail
    assert report.read == 2000, detail
    assert (report.lost, report.duplicates, report.aborted_reads, report.half_visible) == (0, 0, 0, 0), detail
    assert report.hanging_aborted, detail
