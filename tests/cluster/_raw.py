"""Raw Kafka requests to one broker of a test cluster (the real wire, through ``rill.client``'s blocking
connection), for the tests that act as a follower or read what a leader answers."""

from __future__ import annotations

import json
import time
from typing import Any

from confluent_kafka.admin import NewTopic
from tests.cluster._helpers import admin

from rill.client.connection import BrokerConnection
from rill.protocol import ApiKey
from rill.records.builder import build_batch
from rill.records.record import Record
from rill.testing.cluster import TestCluster


def connect(c: TestCluster, broker: int) -> BrokerConnection:
    """A connection to the broker's client listener."""
    host, _, port = c.broker(broker).bootstrap_servers.rpartition(":")
    return BrokerConnection(host, int(port), client_id="raw-test", timeout_s=60.0)


def create_assigned(c: TestCluster, name: str, replicas: list[int], **configs: str) -> None:
    """A one-partition topic whose replicas are ``replicas`` in that order (the first leads)."""
    client = admin(c)
    futures = client.create_topics([NewTopic(name, 1, replica_assignment=[replicas], config=dict(configs))],
                                   request_timeout=30)  # fmt: skip
    for f in futures.values():
        f.result(40)
    with connect(c, replicas[0]) as conn:  # the leader knows it leads (ZooKeeper's watch reached it)
        c.wait_for(lambda: list_latest(conn, name)[0] == 0, 30, f"broker {replicas[0]} leading {name}")


def state(c: TestCluster, topic: str, partition: int = 0) -> dict[str, Any]:
    """The partition's state znode (leader, leader_epoch, isr)."""
    data = c._zk_get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    assert data is not None
    return dict(json.loads(data))


def wait_isr(c: TestCluster, topic: str, isr: set[int], timeout: float = 30.0) -> None:
    c.wait_for(lambda: set(c.isr(topic, 0)) == isr, timeout, f"ISR {sorted(isr)} of {topic}")


def fetch(conn: BrokerConnection, topic: str, *, offset: int, epoch: int, replica_id: int = -1,
          max_wait_ms: int = 0, partition: int = 0) -> dict[str, Any]:  # fmt: skip
    """One Fetch (v12, topic names) of one partition; returns the partition's response."""
    body = {
        "replica_id": replica_id, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": partition, "current_leader_epoch": epoch, "fetch_offset": offset, "log_start_offset": -1,
            "partition_max_bytes": 1 << 20, "last_fetched_epoch": -1}]}],
        "forgotten_topics_data": [], "rack_id": "",
    }  # fmt: skip
    _, response = conn.request(ApiKey.FETCH, body, version=12)
    return dict(response["responses"][0]["partitions"][0])


def list_latest(conn: BrokerConnection, topic: str, *, replica_id: int = -1, partition: int = 0) -> tuple[int, int]:
    """ListOffsets LATEST (v4, read_uncommitted): (error code, offset)."""
    body = {
        "replica_id": replica_id,
        "isolation_level": 0,
        "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}]}
        ],
    }
    _, response = conn.request(ApiKey.LIST_OFFSETS, body, version=4)
    p = response["topics"][0]["partitions"][0]
    return int(p["error_code"]), int(p["offset"])


def produce(conn: BrokerConnection, topic: str, n: int, *, acks: int = 1, timeout_ms: int = 30000,
            partition: int = 0) -> tuple[int, int]:  # fmt: skip
    """Produce ``n`` records in one batch: (error code, base offset)."""
    now = int(time.time() * 1000)
    batch = build_batch([Record(0, now, f"k{i}".encode(), f"v{i}".encode()) for i in range(n)])
    body = {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
    }
    _, response = conn.request(ApiKey.PRODUCE, body, version=8)
    p = response["responses"][0]["partition_responses"][0]
    return int(p["error_code"]), int(p["base_offset"])
