"""``rill topics`` against a 3-broker cluster: create with a replication factor, describe leaders, replicas and
ISR, and the ``--under-replicated-partitions`` / ``--unavailable-partitions`` filters while a broker is down."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import NewPartitions, NewTopic
from tests.cluster._helpers import admin

from rill.testing.cluster import TestCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def topics(c: TestCluster, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "rill.cli.topics", *args, "--bootstrap-server", c.bootstrap_servers,
                           "--timeout", "20"], capture_output=True, text=True, timeout=60)  # fmt: skip
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def describe(c: TestCluster, *args: str) -> Any:
    return json.loads(topics(c, "describe", *args, "--json").stdout)


def test_create_with_replication_factor_and_describe(rill3: TestCluster) -> None:
    out = topics(rill3, "create", "cli-rf3", "--partitions", "3", "--replication-factor", "3")
    assert out.stdout.strip() == "Created topic cli-rf3."
    rill3.wait_for(lambda: all(len(rill3.isr("cli-rf3", p)) == 3 for p in range(3)), 20, "the full ISR")
    d = describe(rill3, "cli-rf3")
    assert d["replication_factor"] == 3 and d["partition_count"] == 3
    for p in d["partitions"]:
        assert sorted(p["replicas"]) == [0, 1, 2] and sorted(p["isr"]) == [0, 1, 2]
        assert p["leader"] == rill3.leader("cli-rf3", p["partition"])
    text = topics(rill3, "describe", "cli-rf3").stdout
    assert "ReplicationFactor: 3" in text and "ISR" in text
    refused = topics(rill3, "create", "cli-rf4", "--replication-factor", "4", check=False)
    assert refused.returncode == 1 and "INVALID_REPLICATION_FACTOR" in refused.stderr
    assert topics(rill3, "describe", "--under-replicated-partitions").stdout == ""
    assert topics(rill3, "describe", "--unavailable-partitions").stdout == ""


def test_filters_while_a_broker_is_down(rill3: TestCluster) -> None:
    client = admin(rill3)
    client.create_topics([NewTopic("cli-solo", 1, replica_assignment=[[2]])], request_timeout=30)["cli-solo"].result(40)
    rill3.wait_for(lambda: rill3.leader("cli-solo", 0) == 2, 20, "cli-solo's leader")
    rill3.wait_for(lambda: all(len(rill3.isr("cli-rf3", p)) == 3 for p in range(3)), 20, "the full ISR")
    rill3.kill(2)
    try:
        rill3.wait_for(lambda: all(2 not in rill3.isr("cli-rf3", p) for p in range(3)), 20, "broker 2 out of the ISR")
        under = describe(rill3, "--under-replicated-partitions", "--exclude-internal")
        assert {(r["topic"], r["partition"]) for r in under} == {("cli-rf3", 0), ("cli-rf3", 1), ("cli-rf3", 2)}
        assert all(sorted(r["isr"]) == [0, 1] for r in under)
        unavailable = describe(rill3, "--unavailable-partitions", "--exclude-internal")
        assert [(r["topic"], r["partition"], r["leader"]) for r in unavailable] == [("cli-solo", 0, None)]
        # new partitions need three live brokers: refused, and the topic keeps its three
        grow = client.create_partitions([NewPartitions("cli-rf3", 5)], request_timeout=20)["cli-rf3"]
        with pytest.raises(KafkaException, match="INVALID_REPLICATION_FACTOR"):
            grow.result(30)
        assert len(client.list_topics("cli-rf3", timeout=10).topics["cli-rf3"].partitions) == 3
        one = describe(rill3, "cli-rf3", "--under-replicated-partitions")
        assert len(one) == 3
        text = topics(rill3, "describe", "--unavailable-partitions").stdout
        assert "cli-solo" in text and "none" in text
        table = topics(rill3, "describe", "cli-solo").stdout
        assert "none" in table.splitlines()[-1]
    finally:
        rill3.start(2)
    rill3.wait_for(lambda: all(len(rill3.isr("cli-rf3", p)) == 3 for p in range(3)), 30, "the full ISR again")
    rill3.wait_for(lambda: describe(rill3, "--unavailable-partitions") == [], 20, "cli-solo back")
    assert describe(rill3, "--under-replicated-partitions", "--exclude-internal") == []
