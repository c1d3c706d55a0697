"""Admin operations against a 3-broker Rill cluster, through confluent-kafka's AdminClient, with leaders,
replicas and ISR checked against ZooKeeper."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicCollection
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from tests.cluster._helpers import admin, create_topic
from tests.integration.broker._wire import Wire
from tests.integration.telemetry._telemetry import CLIENT_METRICS, alter, get_subscriptions, list_resources

from rill.testing.cluster import TestCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

_ = ConsumerGroupTopicPartitions


def _wait_isr(c: TestCluster, topic: str, partitions: int, size: int = 3) -> None:
    c.wait_for(lambda: all(len(c.isr(topic, p)) == size for p in range(partitions)), 30, f"full ISR of {topic}")


def test_metadata_and_describe_cluster_list_every_broker_and_the_controller(rill3: TestCluster) -> None:
    client = admin(rill3)
    md = client.list_topics(timeout=10)
    assert sorted(md.brokers) == [0, 1, 2]
    assert md.controller_id == rill3.controller()
    described = client.describe_cluster(request_timeout=10).result(15)
    assert sorted(n.id for n in described.nodes) == [0, 1, 2]
    assert described.controller is not None and described.controller.id == rill3.controller()
    ports = {n.id: n.port for n in described.nodes}
    assert ports == {i: rill3.broker(i).port for i in range(3)}


def test_create_topic_with_replication_factor_places_three_replicas(rill3: TestCluster) -> None:
    create_topic(rill3, "ad-rf3", partitions=6, replication_factor=3)
    _wait_isr(rill3, "ad-rf3", 6)
    # (the broker that answers Metadata learns the ISR from ZooKeeper a moment after it is written there)
    rill3.wait_for(lambda: all(len(p.isrs) == 3 for p in admin(rill3).list_topics("ad-rf3", timeout=10)
                               .topics["ad-rf3"].partitions.values()), 30, "full ISRs in the metadata")  # fmt: skip
    md = admin(rill3).list_topics("ad-rf3", timeout=10).topics["ad-rf3"]
    assert sorted(md.partitions) == list(range(6))
    leaders = []
    for p in md.partitions.values():
        assert sorted(p.replicas) == [0, 1, 2]
        assert sorted(p.isrs) == [0, 1, 2]
        assert p.leader == rill3.leader("ad-rf3", p.id) == p.replicas[0]
        leaders.append(p.leader)
    assert sorted(set(leaders)) == [0, 1, 2]  # leadership is spread over the brokers
    client = admin(rill3)
    described = client.describe_topics(TopicCollection(["ad-rf3"])).get("ad-rf3")
    assert described is not None
    info = described.result(15)
    assert [sorted(r.id for r in p.replicas) for p in info.partitions] == [[0, 1, 2]] * 6


def test_create_topic_with_explicit_assignments(rill3: TestCluster) -> None:
    client = admin(rill3)
    new = NewTopic("ad-assigned", 3, replica_assignment=[[2, 0], [1, 2], [0, 1]])
    client.create_topics([new], request_timeout=30)["ad-assigned"].result(40)
    _wait_isr(rill3, "ad-assigned", 3, size=2)
    md = client.list_topics("ad-assigned", timeout=10).topics["ad-assigned"]
    assert [md.partitions[p].replicas for p in range(3)] == [[2, 0], [1, 2], [0, 1]]
    assert [md.partitions[p].leader for p in range(3)] == [2, 1, 0]
    assert [rill3.leader("ad-assigned", p) for p in range(3)] == [2, 1, 0]


@pytest.mark.parametrize("validate_only", [False, True])
@pytest.mark.parametrize(("assignment", "why"), [
    ([[0, 7]], "unknown broker"),
    ([[0, 1], [1, 2, 0]], "partitions with different replica counts"),
    ([[1, 1]], "a broker twice"),
])  # fmt: skip
def test_create_topic_refuses_bad_assignments(rill3: TestCluster, assignment: list[list[int]], why: str,
                                              validate_only: bool) -> None:  # fmt: skip
    client = admin(rill3)
    new = NewTopic("ad-bad", len(assignment), replica_assignment=assignment)
    future = client.create_topics([new], request_timeout=30, validate_only=validate_only)["ad-bad"]
    with pytest.raises(Exception, match="INVALID_REPLICA_ASSIGNMENT"):
        future.result(40)
    assert "ad-bad" not in client.list_topics(timeout=10).topics
    assert rill3._zk_get("/brokers/topics/ad-bad") is None


def test_create_topic_refuses_a_replication_factor_above_the_brokers(rill3: TestCluster) -> None:
    client = admin(rill3)
    with pytest.raises(Exception, match="INVALID_REPLICATION_FACTOR"):
        client.create_topics([NewTopic("ad-rf4", 1, 4)], request_timeout=30)["ad-rf4"].result(40)
    assert "ad-rf4" not in client.list_topics(timeout=10).topics


def test_create_partitions_and_delete_topic(rill3: TestCluster) -> None:
    client = admin(rill3)
    create_topic(rill3, "ad-grow", partitions=2)
    client.create_partitions([NewPartitions("ad-grow", 5)], request_timeout=30)["ad-grow"].result(40)
    _wait_isr(rill3, "ad-grow", 5)
    md = client.list_topics("ad-grow", timeout=10).topics["ad-grow"]
    assert sorted(md.partitions) == list(range(5))
    assert all(len(p.replicas) == 3 and p.leader >= 0 for p in md.partitions.values())
    client.create_partitions([NewPartitions("ad-grow", 6, [[1, 0, 2]])], request_timeout=30)["ad-grow"].result(40)
    rill3.wait_for(lambda: rill3.leader("ad-grow", 5) == 1, 20, "partition 5's leader")
    client.delete_topics(["ad-grow"], request_timeout=30)["ad-grow"].result(40)
    deadline = time.monotonic() + 20
    while "ad-grow" in client.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "ad-grow" not in client.list_topics(timeout=10).topics
    assert rill3.leader("ad-grow", 0) == -1
    # every broker forgot it (each learns the deletion from ZooKeeper on its own, a moment apart), and the name can
    # be used again
    for i in range(3):
        rill3.wait_for(lambda i=i: "ad-grow" not in admin_of(rill3, i).list_topics(timeout=10).topics, 20,
                       f"broker {i} forgetting the topic")  # fmt: skip
    create_topic(rill3, "ad-grow", partitions=1)
    _wait_isr(rill3, "ad-grow", 1)


def admin_of(c: TestCluster, broker_id: int):  # type: ignore[no-untyped-def]
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": c.broker(broker_id).bootstrap_servers})


def test_describe_and_alter_topic_configs_on_every_broker(rill3: TestCluster) -> None:
    client = admin(rill3)
    create_topic(rill3, "ad-configs", partitions=1, **{"retention.ms": "3600000"})
    resource = ConfigResource(ResourceType.TOPIC, "ad-configs")
    entries = client.describe_configs([resource])[resource].result(15)
    assert entries["retention.ms"].value == "3600000"
    assert entries["min.insync.replicas"].value == "2"
    change = ConfigResource(ResourceType.TOPIC, "ad-configs", incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("min.insync.replicas", "3", incremental_operation=AlterConfigOpType.SET),
    ])  # fmt: skip
    client.incremental_alter_configs([change])[change].result(15)
    for i in range(3):  # each broker's view follows ZooKeeper
        one = admin_of(rill3, i)
        deadline = time.monotonic() + 10
        while True:
            seen = one.describe_configs([resource])[resource].result(15)
            if seen["retention.ms"].value == "7200000" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert seen["retention.ms"].value == "7200000"
        assert seen["min.insync.replicas"].value == "3"


def test_a_client_metrics_subscription_set_through_one_broker_is_offered_by_every_broker(rill3: TestCluster) -> None:
    """KIP-714: the subscription is kept in ZooKeeper (``/config/client-metrics``) and followed by every broker."""
    wires = [Wire(f"127.0.0.1:{rill3.broker(i).port}") for i in range(3)]
    try:
        assert alter(wires[0], "cluster-wide", {"metrics": "org.apache.kafka.", "interval.ms": "2000"}) == (0, "")
        for w in wires:
            rill3.wait_for(lambda w=w: get_subscriptions(w)["requested_metrics"] == ["org.apache.kafka."], 30,
                           "the subscription offered by every broker")  # fmt: skip
            assert list_resources(w, 0) == (0, [("cluster-wide", CLIENT_METRICS)])
        assert alter(wires[2], "cluster-wide", {"metrics": None, "interval.ms": None}) == (0, "")
        for w in wires:
            rill3.wait_for(lambda w=w: list_resources(w, 0) == (0, []), 30, "the subscription gone everywhere")
    finally:
        for w in wires:
            w.close()
