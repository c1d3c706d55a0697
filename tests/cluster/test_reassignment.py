"""Partition reassignment (AlterPartitionReassignments / ListPartitionReassignments, KIP-455): a partition
moves to other brokers while producers write to it; its records are all on the new replicas afterwards, and
the brokers it left drop it."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.broker._wire import Wire

from rill.protocol import ApiKey
from rill.testing.cluster import cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_a_partition_moves_to_other_brokers_and_keeps_its_records() -> None:
    with cluster(4, auto_leader_rebalance_enable="false") as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([NewTopic("moving", 1, replica_assignment=[[0, 1]])])["moving"].result(30)
        producer = Producer({"bootstrap.servers": c.bootstrap_servers, "enable.idempotence": True})
        for i in range(500):
            producer.produce("moving", value=b"before-%d" % i)
        assert producer.flush(30) == 0
        w = Wire(c.broker(2).bootstrap_servers)
        try:
            body = {"timeout_ms": 30000, "topics": [{"name": "moving", "partitions": [
                {"partition_index": 0, "replicas": [2, 3]}]}]}  # fmt: skip
            resp = w.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body)
            assert resp["responses"][0]["partitions"][0]["error_code"] == 0, resp
            for i in range(500):
                producer.produce("moving", value=b"during-%d" % i)
            assert producer.flush(30) == 0
            c.wait_for(lambda: c.leader("moving", 0) in (2, 3) and sorted(c.isr("moving", 0)) == [2, 3], 60,
                       "the partition on brokers 2 and 3")  # fmt: skip

            def listed() -> list[object]:
                body = {"timeout_ms": 5000, "topics": None}
                return list(w.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, body)["topics"])

            c.wait_for(lambda: not listed(), 10, "the reassignment listed as done")
            body["topics"][0]["partitions"][0]["replicas"] = None  # nothing left to cancel
            resp = w.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body)
            assert resp["responses"][0]["partitions"][0]["error_code"] == 85  # NO_REASSIGNMENT_IN_PROGRESS
        finally:
            w.close()
        for i in range(100):
            producer.produce("moving", value=b"after-%d" % i)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "m", "enable.auto.commit": False})
        consumer.assign([TopicPartition("moving", 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 1100 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        consumer.close()
        expected = [b"before-%d" % i for i in range(500)] + [b"during-%d" % i for i in range(500)]
        assert got == expected + [b"after-%d" % i for i in range(100)]
        for old in (0, 1):  # the brokers the partition left drop its log
            logs = c.data_dir / f"broker-{old}" / "logs"
            c.wait_for(lambda logs=logs: not (logs / "moving-0").exists(), 20, f"moving-0 gone from broker {old}")
