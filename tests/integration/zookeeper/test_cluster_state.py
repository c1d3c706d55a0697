"""What a cluster tells about itself when brokers die: Metadata and DescribeCluster as Kafka answers them
(real clients: confluent-kafka, kafka-python, and Metadata v0 on the wire), and the replication metrics
on each broker's ``/metrics`` endpoint."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from typing import Any

import pytest
from confluent_kafka import KafkaError as CKError
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka.admin import KafkaAdminClient
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.broker._wire import Wire

from rill.cluster.channel import NetworkClientConfig
from rill.cluster.network_client import NetworkClient
from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.testing.cluster import TestCluster, cluster

pytestmark = pytest.mark.timeout(240)

RACKS = {i: {"broker.rack": f"rack-{i}"} for i in range(3)}


def _admin(c: TestCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": c.bootstrap_servers, "log_level": 0})


def _create(admin: AdminClient, *topics: NewTopic) -> None:
    for f in admin.create_topics(list(topics), operation_timeout=30).values():
        f.result(60)


def _pick_victim(c: TestCluster, topic: str) -> int:
    """A broker that neither leads ``topic``-0 nor is the controller."""
    return next(b for b in c.brokers if b not in (c.leader(topic, 0), c.controller()))


def _kafka_python_partitions(c: TestCluster, topics: list[str]) -> dict[str, dict[str, Any]]:
    """Each topic's first partition as kafka-python describes it; a broker whose image does not hold a topic
    created a moment ago answers it without partitions, so this asks again (10 s at most)."""
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=10000)
    try:
        deadline = time.monotonic() + 10
        while True:
            described = admin.describe_topics(topics)
            if all(t["partitions"] for t in described) or time.monotonic() > deadline:
                return {t["name"]: t["partitions"][0] for t in described}
            time.sleep(0.1)
    finally:
        admin.close()


def _metadata_v0(c: TestCluster, broker: int, topic: str) -> dict[str, Any]:
    async def ask() -> dict[str, Any]:
        client = NetworkClient(NetworkClientConfig(client_id="metadata-v0"))
        b = c.broker(broker)
        client.set_node(broker, b.host, b.port)
        try:
            response = await client.request(broker, ApiKey.METADATA, {"topics": [{"name": topic}]}, version=0)
            assert response is not None
            return dict(response.body["topics"][0]["partitions"][0])
        finally:
            await client.close()

    return asyncio.run(ask())


def test_metadata_and_describe_cluster_show_dead_brokers_offline_replicas_and_leaderless_partitions() -> None:
    with cluster(3, broker_overrides=RACKS) as c:
        admin = _admin(c)
        _create(admin, NewTopic("replicated", 1, 3))
        victim = _pick_victim(c, "replicated")
        _create(admin, NewTopic("single", 1, replica_assignment=[[victim]]))
        c.wait_for(lambda: c.leader("single", 0) == victim and len(c.isr("replicated", 0)) == 3)

        described = admin.describe_cluster().result(30)
        assert sorted((n.id, n.rack) for n in described.nodes) == [(i, f"rack-{i}") for i in range(3)]
        assert described.controller.id == c.controller()
        parts = _kafka_python_partitions(c, ["replicated", "single"])
        assert parts["replicated"]["offline_replicas"] == [] and parts["replicated"]["error_code"] == 0

        c.kill(victim)
        c.wait_for(lambda: c.leader("single", 0) == -1 and victim not in c.isr("replicated", 0), 60,
                   "the controller acting on the dead broker")  # fmt: skip

        def settled() -> bool:
            md = admin.list_topics(timeout=10)
            return victim not in md.brokers and victim not in md.topics["replicated"].partitions[0].isrs

        c.wait_for(settled, 30, "every broker's metadata following ZooKeeper")
        md = admin.list_topics(timeout=10)
        assert sorted(md.brokers) == sorted(set(c.brokers) - {victim})
        assert md.controller_id == c.controller()
        rep = md.topics["replicated"].partitions[0]
        assert rep.error is None and rep.leader == c.leader("replicated", 0)
        assert sorted(rep.replicas) == [0, 1, 2] and sorted(rep.isrs) == sorted(set(c.brokers) - {victim})
        # The topic stays listed; its leaderless partition answers LEADER_NOT_AVAILABLE with leader -1.
        assert md.topics["single"].error is None
        single = md.topics["single"].partitions[0]
        assert single.leader == -1 and single.error is not None
        assert single.error.code() == CKError.LEADER_NOT_AVAILABLE
        assert single.replicas == [victim] and single.isrs == [victim]  # the ISR is kept: no unclean election

        # kafka-python may ask another broker, which learns of the death from ZooKeeper on its own a moment later.
        c.wait_for(lambda: _kafka_python_partitions(c, ["replicated"])["replicated"]["offline_replicas"] == [victim],
                   30, "kafka-python's broker showing the dead replica offline")  # fmt: skip
        parts = _kafka_python_partitions(c, ["replicated", "single"])
        assert parts["replicated"]["error_code"] == 0 and parts["replicated"]["offline_replicas"] == [victim]
        assert parts["single"]["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE
        assert parts["single"]["leader_id"] == -1 and parts["single"]["offline_replicas"] == [victim]
        assert parts["single"]["leader_epoch"] >= 1

        # Version 0 lists only live replicas, with REPLICA_NOT_AVAILABLE when some are left out.
        alive = next(b for b in c.brokers if b != victim)
        v0 = _metadata_v0(c, alive, "replicated")
        assert v0["error_code"] == ErrorCode.REPLICA_NOT_AVAILABLE and victim not in v0["replica_nodes"]

        described = admin.describe_cluster().result(30)
        assert sorted(n.id for n in described.nodes) == sorted(set(c.brokers) - {victim})
        assert described.controller.id == c.controller()

        c.start(victim)
        c.wait_for(lambda: c.leader("single", 0) == victim and len(c.isr("replicated", 0)) == 3, 60)

        def healed() -> bool:
            p = _kafka_python_partitions(c, ["replicated", "single"])
            return all(v["error_code"] == 0 and v["offline_replicas"] == [] for v in p.values())

        c.wait_for(healed, 30, "the metadata showing the broker back")
        assert admin.list_topics(timeout=10).topics["single"].partitions[0].leader == victim


def _scrape(c: TestCluster, broker: int) -> dict[str, float]:
    url = f"http://127.0.0.1:{c.metrics_port(broker)}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


URP = "kafka_server_replicamanager_underreplicatedpartitions"
UNDER_MIN_ISR = "kafka_server_replicamanager_underminisrpartitioncount"
AT_MIN_ISR = "kafka_server_replicamanager_atminisrpartitioncount"
OFFLINE = "kafka_controller_kafkacontroller_offlinepartitionscount"
ACTIVE = "kafka_controller_kafkacontroller_activecontrollercount"
ELECTIONS = "kafka_controller_controllerstats_leaderelectionrateandtimems_count"
ELECTION_MS = "kafka_controller_controllerstats_leaderelectionrateandtimems_sum"
EXPANDS = "kafka_server_replicamanager_isrexpands_total"
MAX_LAG = "kafka_server_replicafetchermanager_maxlag"


def test_replication_metrics_follow_a_dead_follower_a_dead_leader_and_the_controller() -> None:
    with cluster(3, metrics=True) as c:
        admin = _admin(c)
        _create(admin, NewTopic("watched", 1, 3, config={"min.insync.replicas": "3"}))
        c.wait_for(lambda: len(c.isr("watched", 0)) == 3)
        leader, controller = c.leader("watched", 0), c.controller()
        c.wait_for(lambda: sum(_scrape(c, b)[ACTIVE] for b in c.brokers) == 1, 10, "one active controller")
        assert _scrape(c, controller)[ACTIVE] == 1
        before = _scrape(c, leader)
        assert before[URP] == 0 and before[UNDER_MIN_ISR] == 0 and before[AT_MIN_ISR] == 1  # ISR 3, min 3
        assert before["kafka_server_replicamanager_leadercount"] >= 1
        assert MAX_LAG in _scrape(c, next(b for b in c.brokers if b != leader))

        # A follower dies: the leader counts the partition under-replicated (and under min.insync.replicas),
        # then, the follower back and caught up, no longer; the ISR expansion is counted.
        follower = next(b for b in c.brokers if b not in (leader, controller))
        c.kill(follower)
        c.wait_for(lambda: _scrape(c, leader)[URP] == 1, 30, "UnderReplicatedPartitions rising on the leader")
        assert _scrape(c, leader)[UNDER_MIN_ISR] == 1 and _scrape(c, leader)[AT_MIN_ISR] == 0
        c.start(follower)
        c.wait_for(lambda: _scrape(c, leader)[URP] == 0, 60, "UnderReplicatedPartitions falling again")
        after = _scrape(c, leader)
        assert after[UNDER_MIN_ISR] == 0 and after[EXPANDS] >= before[EXPANDS] + 1

        # An RF=1 partition whose broker dies is offline: counted by the controller alone.
        host = next(b for b in c.brokers if b != controller)
        _create(admin, NewTopic("lonely", 1, replica_assignment=[[host]]))
        assert _scrape(c, controller)[OFFLINE] == 0
        c.kill(host)
        c.wait_for(lambda: _scrape(c, controller)[OFFLINE] == 1, 30, "OfflinePartitionsCount on the controller")
        assert all(_scrape(c, b)[OFFLINE] == 0 for b in c.brokers if b not in (controller, host))
        elections, election_ms = _scrape(c, controller)[ELECTIONS], _scrape(c, controller)[ELECTION_MS]
        c.start(host)
        c.wait_for(lambda: _scrape(c, controller)[OFFLINE] == 0, 60, "the partition online again")
        after = _scrape(c, controller)
        assert after[ELECTIONS] == elections + 1  # its leader came back: one election
        assert 0 < after[ELECTION_MS] - election_ms < 10_000  # and the time it took, in milliseconds

        # The controller dies: another broker takes the role, and counts the election of the new leaders of
        # the partitions the dead one led.
        _create(
            admin, NewTopic("moved", 1, replica_assignment=[[controller, *(b for b in c.brokers if b != controller)]])
        )
        c.wait_for(lambda: c.leader("moved", 0) == controller and len(c.isr("moved", 0)) == 3)
        c.kill(controller)
        c.wait_for(lambda: c.controller() not in (-1, controller), 30, "a new controller")
        successor = c.controller()
        c.wait_for(lambda: c.leader("moved", 0) not in (-1, controller), 30, "a new leader of moved-0")
        c.wait_for(lambda: _scrape(c, successor)[ACTIVE] == 1, 10)
        assert _scrape(c, successor)[ELECTIONS] >= 1
        assert sum(_scrape(c, b)[ACTIVE] for b in c.brokers if b != controller) == 1


UNCLEAN = "kafka_controller_controllerstats_uncleanleaderelections_total"


def test_a_topics_unclean_leader_election_config_lets_an_out_of_sync_replica_lead_and_loses_its_records() -> None:
    """The broker default is false; the topic's own ``unclean.leader.election.enable``, set while the partition
    is offline, is what the controller must follow (as Kafka's does), and what the unclean election loses
    shows."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    with cluster(3, metrics=True) as c:
        admin = _admin(c)
        controller = c.controller()
        first, second = (b for b in c.brokers if b != controller)
        _create(admin, NewTopic("lossy", 1, replica_assignment=[[first, second]]))
        c.wait_for(lambda: c.leader("lossy", 0) == first and len(c.isr("lossy", 0)) == 2)

        c.kill(second)
        c.wait_for(lambda: c.isr("lossy", 0) == [first], 30, "the dead follower out of the ISR")
        # idempotent: a retry (the leader's answer lost to a busy machine) must not write the records twice
        producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all", "enable.idempotence": True,
                             "log_level": 0})  # fmt: skip
        for i in range(5):
            producer.produce("lossy", f"acked-{i}".encode(), partition=0)
        assert producer.flush(30) == 0

        def watermarks() -> tuple[int, int]:
            consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "w", "log_level": 0})
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition("lossy", 0), timeout=10)
                return int(low), int(high)
            finally:
                consumer.close()

        assert watermarks() == (0, 5)
        c.kill(first)
        c.wait_for(lambda: c.leader("lossy", 0) == -1, 30, "the partition offline")
        c.start(second)  # out of sync: with the default, it does not lead
        c.wait_for(lambda: second in admin.list_topics(timeout=10).brokers, 30, "the follower registered")
        time.sleep(2)
        assert c.leader("lossy", 0) == -1 and _scrape(c, controller)[UNCLEAN] == 0
        # The topic's config allows it: the controller acts on the change itself.
        resource = ConfigResource("topic", "lossy", set_config={"unclean.leader.election.enable": "true"})
        for f in admin.alter_configs([resource]).values():
            f.result(30)
        c.wait_for(lambda: c.leader("lossy", 0) == second, 30, "an unclean election")
        assert c.isr("lossy", 0) == [second]
        assert _scrape(c, controller)[UNCLEAN] == 1
        c.start(first)  # comes back as a follower and truncates to the new leader's log: the acked records go
        c.wait_for(lambda: len(c.isr("lossy", 0)) == 2, 60, "the old leader back in the ISR")
        c.wait_for(lambda: watermarks() == (0, 0), 30, "the new leader's log, without the acked records")


SHRINKS = "kafka_server_replicamanager_isrshrinks_total"


def test_a_stalled_follower_is_shrunk_out_of_the_isr_by_its_leader_and_expanded_back() -> None:
    """A follower paused longer than ``replica.lag.time.max.ms`` but within its session: the leader (not the
    controller) takes it out of the ISR and counts the shrink, then takes it back once it catches up."""
    with cluster(3, metrics=True, zookeeper_session_timeout_ms=20000, replica_lag_time_max_ms=2000) as c:
        admin = _admin(c)
        _create(admin, NewTopic("stalled", 1, 3))
        c.wait_for(lambda: len(c.isr("stalled", 0)) == 3)
        leader = c.leader("stalled", 0)
        follower = next(b for b in c.brokers if b != leader)
        before = _scrape(c, leader)
        c.pause(follower)
        try:
            c.wait_for(lambda: follower not in c.isr("stalled", 0), 15, "the leader shrinking the ISR")
            during = _scrape(c, leader)
            assert during[SHRINKS] == before[SHRINKS] + 1 and during[URP] == 1
        finally:
            c.resume(follower)
        c.wait_for(lambda: len(c.isr("stalled", 0)) == 3, 30, "the follower back in the ISR")
        c.wait_for(lambda: _scrape(c, leader)[URP] == 0, 10)
        assert _scrape(c, leader)[EXPANDS] == before[EXPANDS] + 1
        assert c.leader("stalled", 0) == leader  # its session held: no election


def _send_create_topic(c: TestCluster, broker: int, topic: str, replicas: list[int]) -> None:
    """Send CreateTopics to ``broker`` without waiting for its answer (it comes once leaders are elected)."""

    async def send() -> None:
        client = NetworkClient(NetworkClientConfig(client_id="create"))
        b = c.broker(broker)
        client.set_node(broker, b.host, b.port)
        body = {"topics": [{"name": topic, "num_partitions": -1, "replication_factor": -1, "configs": [],
                            "assignments": [{"partition_index": 0, "broker_ids": replicas}]}],
                "timeout_ms": 30000, "validate_only": False}  # fmt: skip
        try:
            await client.request(broker, ApiKey.CREATE_TOPICS, body, timeout_ms=1000)
        except Exception:
            pass  # timed out waiting for the answer: the topic is written
        finally:
            await client.close()

    asyncio.run(send())


def test_a_partition_created_while_its_only_replica_shuts_down_gets_a_leader_when_the_replica_returns() -> None:
    """The controller sees a new partition none of whose replicas is live (its broker is in a controlled
    shutdown): the partition must wait for a replica, not be stored leaderless with an empty ISR, which
    no broker could ever leave."""
    import json
    import threading

    from kazoo.client import KazooClient

    with cluster(3, zookeeper_session_timeout_ms=10000, controlled_shutdown_retry_backoff_ms=4000) as c:
        admin = _admin(c)
        controller = c.controller()
        leaving, other = (b for b in c.brokers if b != controller)
        _create(admin, NewTopic("held", 1, replica_assignment=[[leaving, controller, other]]))
        c.wait_for(lambda: c.leader("held", 0) == leaving and len(c.isr("held", 0)) == 3)
        # the leaving broker's own image must show it leading: a broker that has not yet learned of a partition
        # it leads has nothing to move, and its shutdown would not wait for the controller
        wire = Wire(c.broker(leaving).bootstrap_servers)
        try:

            def leader_in_its_image() -> int:
                md = wire.call(ApiKey.METADATA, 5, {"topics": [{"name": "held"}]})
                return int(md["topics"][0]["partitions"][0]["leader_id"]) if md["topics"][0]["partitions"] else -1

            c.wait_for(lambda: leader_in_its_image() == leaving, 10, "the leaving broker's image of its leadership")
        finally:
            wire.close()
        zk = KazooClient(hosts=c.zookeeper.connect_string + c.chroot, timeout=10.0)
        zk.start(10)
        try:
            c.pause(controller)  # the shutdown of `leaving` waits for the controller to move its leadership
            stopping = threading.Thread(target=c.stop, args=(leaving,))
            try:
                stopping.start()
                c.wait_for(lambda: json.loads(zk.get(f"/brokers/ids/{leaving}")[0]).get("shutting_down"), 5,
                           "the controlled shutdown marked")  # fmt: skip
                _send_create_topic(c, other, "late", [leaving])  # to a broker: clients would ask the controller
                c.wait_for(lambda: zk.exists("/brokers/topics/late") is not None, 5, "the topic written")
            finally:
                c.resume(controller)
                stopping.join(60)
        finally:
            zk.stop()
            zk.close()
        assert not c.broker(leaving).running and c.leader("held", 0) in (controller, other)
        c.start(leaving)
        c.wait_for(lambda: c.leader("late", 0) == leaving, 30, "the returning replica leading the new partition")
        assert c.isr("late", 0) == [leaving]


def test_a_partition_being_moved_is_under_replicated_only_below_its_target_replication_factor() -> None:
    """While a reassignment moves a partition from [leader, old] to [leader, new], its replicas are the three
    of them; Kafka counts it under-replicated against the target's two (the leaving replica does not count)."""
    with cluster(3, metrics=True, zookeeper_session_timeout_ms=10000, auto_leader_rebalance_enable="false") as c:
        admin = _admin(c)
        controller = c.controller()
        new = next(b for b in c.brokers if b != controller)
        old = next(b for b in c.brokers if b not in (controller, new))
        _create(admin, NewTopic("moving", 1, replica_assignment=[[controller, old]]))
        c.wait_for(lambda: len(c.isr("moving", 0)) == 2)
        assert _scrape(c, controller)[URP] == 0
        wire = Wire(c.broker(controller).bootstrap_servers)
        c.pause(new)  # the new replica cannot catch up: the move stays under way
        try:
            body = {"timeout_ms": 30000, "topics": [{"name": "moving", "partitions": [
                {"partition_index": 0, "replicas": [controller, new]}]}]}  # fmt: skip
            resp = wire.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body)
            assert resp["responses"][0]["partitions"][0]["error_code"] == 0, resp
            listed = {"timeout_ms": 5000, "topics": None}
            c.wait_for(lambda: wire.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, listed)["topics"], 10)

            def replicas() -> list[int]:
                md = wire.call(ApiKey.METADATA, 5, {"topics": [{"name": "moving"}]})
                return list(md["topics"][0]["partitions"][0]["replica_nodes"])

            c.wait_for(lambda: len(replicas()) == 3, 10, "the leader's image with the three replicas")
            assert sorted(c.isr("moving", 0)) == sorted([controller, old])
            assert _scrape(c, controller)[URP] == 0  # ISR 2 of a target of 2
        finally:
            c.resume(new)
            wire.close()
        c.wait_for(lambda: sorted(c.isr("moving", 0)) == sorted([controller, new]), 60, "the move done")
        assert _scrape(c, controller)[URP] == 0
