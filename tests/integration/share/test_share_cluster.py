"""Share groups on a three-broker cluster: the group's coordinator keeps the membership (the other brokers answer
NOT_COORDINATOR, so both consumers join the same group), each partition's leader its share partition; two
ShareConsumers get every record of three partitions led by different brokers once. The group's coordinator resets
the start offsets of every partition, at each one's share coordinator."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.share._share import produce, share_consumer, warm_up

import rill.testing.cluster
from rill.client.client import KafkaClient
from rill.errors import ErrorCode
from rill.protocol import ApiKey

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def test_share_consumers_on_a_cluster() -> None:
    with rill.testing.cluster.cluster(brokers=3) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([NewTopic("t", 3, 3)])["t"].result(30)
        leaders = {c.leader("t", p) for p in range(3)}
        assert len(leaders) > 1  # the partitions' share partitions live on more than one broker
        with KafkaClient(c.bootstrap_servers, timeout_s=30) as client:
            conn = client.coordinator("sg")
            for node, address in client.refresh_metadata([]).brokers.items():
                if (address.host, address.port) == (conn.host, conn.port):
                    continue
                other = client.connection(node)
                joined = other.request(ApiKey.SHARE_GROUP_HEARTBEAT, {
                    "group_id": "sg", "member_id": "m", "member_epoch": 0, "subscribed_topic_names": ["t"]},
                    version=1)[1]  # fmt: skip
                assert joined["error_code"] == ErrorCode.NOT_COORDINATOR, joined
                described = other.request(ApiKey.SHARE_GROUP_DESCRIBE, {"group_ids": ["sg"]}, version=1)[1]
                assert described["groups"][0]["error_code"] == ErrorCode.NOT_COORDINATOR, described
        consumers = [share_consumer(c.bootstrap_servers, "sg", ["t"]) for _ in range(2)]
        try:
            warm_up(c.bootstrap_servers, consumers[0], "t", 3, timeout=60)
            n = 90
            produce(c.bootstrap_servers, "t", [(i % 3, b"r%d" % i) for i in range(n)])
            got: list[bytes] = []
            deadline = time.monotonic() + 60
            while len(got) < n and time.monotonic() < deadline:
                for consumer in consumers:
                    got += [m.value() for m in consumer.poll(0.2) if m.error() is None and m.value() != b"warm"]
            assert sorted(got) == sorted(b"r%d" % i for i in range(n))
        finally:
            for consumer in consumers:
                consumer.close()
        with KafkaClient(c.bootstrap_servers, timeout_s=30) as client:
            conn = client.coordinator("sg")
            brokers = client.refresh_metadata([]).brokers.items()
            coordinator = next(b for b, a in brokers if (a.host, a.port) == (conn.host, conn.port))
            request = {"group_id": "sg", "topics": [{"topic_name": "t", "partitions": [
                {"partition_index": p, "start_offset": 0} for p in range(3)]}]}  # fmt: skip
            deadline = time.monotonic() + 30
            while (r := conn.request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, request, version=0)[1])["error_code"] \
                    == ErrorCode.NON_EMPTY_GROUP and time.monotonic() < deadline:  # fmt: skip
                time.sleep(0.2)  # the consumers' leaves reach the coordinator as they close
            codes = {p["partition_index"]: p["error_code"] for p in r["responses"][0]["partitions"]}
            # every partition, wherever it is led: the state goes to each one's share coordinator
            assert codes == {0: 0, 1: 0, 2: 0}, (codes, coordinator)
            described = conn.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
                                     {"groups": [{"group_id": "sg", "topics": None}]}, version=0)[1]  # fmt: skip
            starts = {p["partition_index"]: p["start_offset"] for t in described["groups"][0]["topics"]
                      for p in t["partitions"]}  # fmt: skip
            assert starts == {0: 0, 1: 0, 2: 0}, described
