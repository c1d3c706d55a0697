"""The schema registry on a replicated cluster: its topic is replicated and it survives a broker's death."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from rill.testing.cluster import TestCluster
from rill.testing.registry import registry

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def schema(i: int) -> Schema:
    return Schema(json.dumps({"type": "record", "name": f"C{i}", "fields": [{"name": "a", "type": "int"}]}), "AVRO")


def test_registry_topic_is_replicated_and_survives_its_leaders_death(rill3: TestCluster) -> None:
    with registry(rill3.bootstrap_servers) as r:
        sr = SchemaRegistryClient({"url": r.url})
        first = sr.register_schema("cluster-value", schema(1))
        topic = AdminClient({"bootstrap.servers": rill3.bootstrap_servers}).list_topics("_schemas", timeout=10)
        assert len(topic.topics["_schemas"].partitions) == 1
        assert sorted(topic.topics["_schemas"].partitions[0].replicas) == [0, 1, 2]
        rill3.wait_for(lambda: sorted(rill3.isr("_schemas", 0)) == [0, 1, 2], what="a full ISR")

        victim = rill3.leader("_schemas", 0)
        rill3.kill(victim)
        try:
            second = SchemaRegistryClient({"url": r.url}).register_schema("cluster-value-2", schema(2))
            assert second == first + 1
        finally:
            rill3.start(victim)
    # A new registry reads both back from the replicas.
    with registry(rill3.bootstrap_servers) as r2:
        sr2 = SchemaRegistryClient({"url": r2.url})
        assert [sr2.get_latest_version(s).schema_id for s in ("cluster-value", "cluster-value-2")] == [first, second]
