"""The ``rill_cluster`` pytest fixture and its ``rill_cluster_config`` marker."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource, ResourceType
from tests.cluster._helpers import admin, create_topic

from rill.testing.cluster import TestCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


@pytest.mark.rill_cluster_config(brokers=2, min_insync_replicas=2)
def test_rill_cluster_fixture_takes_the_marker(rill_cluster: TestCluster) -> None:
    assert rill_cluster.brokers == [0, 1]
    md = admin(rill_cluster).list_topics(timeout=10)
    assert sorted(md.brokers) == [0, 1]
    create_topic(rill_cluster, "fx", partitions=2, replication_factor=2)
    producer = Producer({"bootstrap.servers": rill_cluster.bootstrap_servers, "acks": "all"})
    producer.produce("fx", b"x")
    assert producer.flush(20) == 0
    leader = rill_cluster.leader("fx", 0)
    assert leader in (0, 1) and sorted(rill_cluster.isr("fx", 0)) == [0, 1]
    client = admin(rill_cluster)
    resource = ConfigResource(ResourceType.BROKER, str(leader))
    # the marker's config reached the brokers
    assert client.describe_configs([resource])[resource].result(15)["min.insync.replicas"].value == "2"


def test_readme_cluster_example_runs_as_written() -> None:
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = text.split("### A replicated cluster in a test", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "cluster(brokers=3" in code
    exec(compile(code, "README.md", "exec"), {})
