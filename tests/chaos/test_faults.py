"""Fault injection against a three-broker cluster (replication factor 3, min.insync.replicas=2): whatever the
faults, no acknowledged write is lost and no offset ever holds two values. Each run prints its report."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rill.testing.chaos import run
from rill.testing.cluster import cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _assert_safe(report: dict[str, Any]) -> None:
    print(json.dumps(report, indent=1, default=str))
    assert report["acknowledged"] > 0
    assert report["lost"] == 0, report["examples"]
    assert report["inconsistent"] == 0, report["examples"]
    assert report["duplicates"] == 0, report["examples"]
    assert report["reordered"] == 0, report["examples"]
    assert all(f["healed"] for f in report["faults"]), report["faults"]


def test_broker_crashes_and_pauses_lose_no_acknowledged_write() -> None:
    schedule = ["kill_leader", "kill_controller", "kill_two", "pause_leader", "restart_leader_fast",
                "kill_successive_leaders", "pause_leader_and_follower"]  # fmt: skip
    with cluster(3) as c:
        report = run(c, schedule, down_s=5.0, quiet_s=2.0, seed=7)
    _assert_safe(report)


def test_zookeeper_failures_and_a_zombie_controller_lose_no_acknowledged_write() -> None:
    schedule = ["kill_zookeeper_node", "kill_zookeeper", "pause_controller", "stop_leader"]
    with cluster(3, zookeeper_nodes=3) as c:
        report = run(c, schedule, down_s=5.0, quiet_s=2.0, seed=11)
    _assert_safe(report)
