"""KIP-951: a Produce sent to a broker that does not lead the partition, or a Fetch sent to one that holds no
replica of it, is answered NOT_LEADER_OR_FOLLOWER with the current leader and its endpoint, so that a client moves
at once. (A consumer's Fetch v11+ to an in-sync follower is served there: KIP-392, test_fetch_from_follower.)"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.broker._wire import Wire

from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.records.builder import build_batch
from rill.records.record import Record
from rill.testing.cluster import cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_not_leader_answers_name_the_leader() -> None:
    with cluster(3) as c:
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
