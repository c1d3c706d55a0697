"""ACLs in a replicated cluster: written through one broker into ZooKeeper as Kafka 2.x keeps them
(``/kafka-acl/<Type>/<name>``, ``/kafka-acl-extended/prefixed/<Type>/<name>``, change notices), and in effect on
every broker as soon as their watches fire."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from tests.cluster.test_security import LISTENERS, _endpoint
from tests.integration.security.test_acl_walk import sasl_wire

from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.testing.cluster import TestCluster, cluster

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:ANONYMOUS"}


def _describe_error(c: TestCluster, broker: int, topic: str) -> int:
    w = sasl_wire(_endpoint(c, broker, "SASL_PLAINTEXT"), "alice", "alice-secret")
    try:
        return int(w.call(ApiKey.METADATA, 12, {"topics": [{"name": topic}]})["topics"][0]["error_code"])
    finally:
        w.close()


def _everywhere(c: TestCluster, topic: str, code: int, within: float = 2.0) -> float:
    """Seconds until every broker answers alice's Metadata for ``topic`` with ``code`` (at most ``within``)."""
    started = time.monotonic()
    while True:
        codes = [_describe_error(c, b, topic) for b in c.brokers]
        if codes == [code] * len(codes):
            return time.monotonic() - started
        assert time.monotonic() - started < within, f"brokers answer {codes}, not {code}"
        time.sleep(0.02)


def test_acls_written_through_one_broker_apply_on_all() -> None:
    overrides = {**LISTENERS, **AUTHORIZER, "num.partitions": 1, "default.replication.factor": 3}
    with cluster(brokers=3, overrides=overrides) as c:
        admin0 = AdminClient({"bootstrap.servers": c.broker(0).bootstrap_servers})
        admin0.create_topics([NewTopic("orders", 1, 3)])["orders"].result(timeout=30)
        _everywhere(c, "orders", ErrorCode.TOPIC_AUTHORIZATION_FAILED, within=10)
        literal = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                             AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
        prefixed = AclBinding(ResourceType.GROUP, "team-", ResourcePatternType.PREFIXED, "User:alice", "*",
                              AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
        for future in admin0.create_acls([literal, prefixed]).values():
            future.result(timeout=15)
        stored = c._zk_get("/kafka-acl/Topic/orders")
        assert stored is not None and json.loads(stored) == {"version": 1, "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}  # fmt: skip
        assert c._zk_get("/kafka-acl-extended/prefixed/Group/team-") is not None
        assert _everywhere(c, "orders", ErrorCode.NONE) < 2.0
        # removed through another broker: refused again everywhere
        admin1 = AdminClient({"bootstrap.servers": c.broker(1).bootstrap_servers})
        topic_acls = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                                      AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
        assert len(admin1.delete_acls([topic_acls])[topic_acls].result(timeout=15)) == 1
        assert c._zk_get("/kafka-acl/Topic/orders") is None
        assert _everywhere(c, "orders", ErrorCode.TOPIC_AUTHORIZATION_FAILED) < 2.0
        admin2 = AdminClient({"bootstrap.servers": c.broker(2).bootstrap_servers})
        every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                 AclPermissionType.ANY)  # fmt: skip
        listed = admin2.describe_acls(every).result(timeout=15)
        assert [(b.name, b.resource_pattern_type) for b in listed] == [("team-", ResourcePatternType.PREFIXED)]
