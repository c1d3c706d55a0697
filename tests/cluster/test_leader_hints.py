"""KIP-951: a Produce sent to a broker that does not lead the partition, or a Fetch sent to one that holds no
replica of it, is answered NOT_LEADER_OR_FOLLOWER with the current leader and its endpoint, so that a client moves
at once. (A consumer's Fetch v11+ to an in-sync follower is served there: KIP-392, test_fetch_from_follower.)

Every per-partition request sent to a broker that holds no replica of a partition the cluster has is answered
NOT_LEADER_OR_FOLLOWER, as Kafka answers, so that the client refreshes its metadata; UNKNOWN_TOPIC_OR_PARTITION
is for a partition the cluster does not have."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.broker._wire import Wire

from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.records.builder import build_batch
from rill.records.record import Record
from rill.testing.cluster import TestCluster, cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def c() -> Iterator[TestCluster]:
    with cluster(3) as started:
        yield started


def test_not_leader_answers_name_the_leader(c: TestCluster) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    admin.create_topics([NewTopic("hints", 1, 3)])["hints"].result(30)
    leader = c.leader("hints", 0)
    other = next(b for b in c.brokers if b != leader)
    admin.create_topics([NewTopic("hints-one", 1, replica_assignment=[[leader]])])["hints-one"].result(30)
    w = Wire(c.broker(other).bootstrap_servers)
    try:
        batch = build_batch([Record(0, 0, None, b"v", [])])
        body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": "hints", "partition_data": [{"index": 0, "records": batch}]}]}  # fmt: skip
        resp = w.call(ApiKey.PRODUCE, 10, body)
        (p,) = resp["responses"][0]["partition_responses"]
        assert p["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert p["current_leader"]["leader_id"] == leader
        assert [e["node_id"] for e in resp["node_endpoints"]] == [leader]
        assert resp["node_endpoints"][0]["port"] == int(c.broker(leader).bootstrap_servers.rsplit(":", 1)[1])

        fetch = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
                 "session_id": 0, "session_epoch": -1, "topics": [{"topic": "hints-one", "partitions": [
                     {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                      "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""}  # fmt: skip
        c.wait_for(lambda: w.call(ApiKey.FETCH, 12, fetch)["responses"][0]["partitions"][0]["current_leader"]
                   ["leader_id"] >= 0, 30, "the broker's metadata naming the new topic's leader")  # fmt: skip
        resp = w.call(ApiKey.FETCH, 12, fetch)
        (fp,) = resp["responses"][0]["partitions"]
        assert fp["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert fp["current_leader"]["leader_id"] == leader
    finally:
        w.close()


def _partition_codes(resp: dict[str, Any], partitions: str = "partitions", code: str = "error_code") -> list[int]:
    return [p[code] for t in resp["topics"] for p in t[partitions]]


def test_a_broker_without_a_replica_answers_not_leader_to_every_partition_request(c: TestCluster) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    admin.create_topics([NewTopic("no-replica", 1, replica_assignment=[[0]])])["no-replica"].result(30)
    w = Wire(c.broker(1).bootstrap_servers)
    try:
        missing = {"name": "no-such-topic"}
        c.wait_for(lambda: w.call(ApiKey.METADATA, 12, {"topics": [{"name": "no-replica", "topic_id": None}],
                                                         "allow_auto_topic_creation": False,
                                                         "include_topic_authorized_operations": False})
                   ["topics"][0]["error_code"] == 0, 30, "broker 1's metadata naming the topic")  # fmt: skip
        for name, expected in (("no-replica", ErrorCode.NOT_LEADER_OR_FOLLOWER),
                               (missing["name"], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)):  # fmt: skip
            batch = build_batch([Record(0, 0, None, b"v", [])])
            produce = w.call(ApiKey.PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
                                                 "topic_data": [{"name": name, "partition_data": [
                                                     {"index": 0, "records": batch}]}]})  # fmt: skip
            assert [p["error_code"] for p in produce["responses"][0]["partition_responses"]] == [expected], name

            list_offsets = w.call(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": name, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})  # fmt: skip
            assert _partition_codes(list_offsets) == [expected], name

            delete = w.call(ApiKey.DELETE_RECORDS, 2, {"timeout_ms": 5000, "topics": [
                {"name": name, "partitions": [{"partition_index": 0, "offset": 0}]}]})  # fmt: skip
            assert _partition_codes(delete) == [expected], name

            epochs = w.call(
                ApiKey.OFFSET_FOR_LEADER_EPOCH,
                4,
                {
                    "replica_id": -1,
                    "topics": [
                        {"topic": name, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}
                    ],
                },
            )
            assert _partition_codes(epochs) == [expected], name

            producers = w.call(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": name, "partition_indexes": [0]}]})
            assert _partition_codes(producers) == [expected], name

            markers = w.call(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [
                {"producer_id": 1000, "producer_epoch": 0, "transaction_result": False, "coordinator_epoch": 0,
                 "topics": [{"name": name, "partition_indexes": [0]}]}]})  # fmt: skip
            assert [p["error_code"] for t in markers["markers"][0]["topics"] for p in t["partitions"]] == [expected]
    finally:
        w.close()
