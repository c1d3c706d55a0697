"""What a caller may learn under ACLs, as in Kafka: a refusal reads the same whether the topic, group or
transactional id exists; DescribeTransactions names only the topics the caller may describe and ListTransactions
only the transactional ids; CreateTopics gives a new topic's configs only to a caller who may describe them
(KIP-525); hosts of ACLs written in Java's IPv6 form match."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.broker._wire import Wire
from tests.integration.security.test_acl_walk import _cases, sasl_wire

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey

pytestmark = pytest.mark.timeout(120)

JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret" user_carol="carol-secret" '
    'user_dave="dave-secret";'
)
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5  # resource types
ALL, READ, CREATE, DESCRIBE, DESCRIBE_CONFIGS = 2, 3, 5, 8, 10  # operations
DENY, ALLOW = 2, 3
LITERAL, PREFIXED = 3, 4


def _configs(listeners: str = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0") -> dict[str, str]:
    return {
        "listeners": listeners,
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin",
    }


@pytest.fixture
def acl_broker() -> Iterator[rill.testing.TestBroker]:
    with rill.testing.broker(_configs()) as b:
        yield b


def acl(bootstrap: str, rtype: int, name: str, principal: str, operation: int, permission: int = ALLOW,
        pattern: int = LITERAL, host: str = "*") -> None:  # fmt: skip
    """One ACL, created by a super user (the PLAINTEXT listener's ANONYMOUS)."""
    w = Wire(bootstrap)
    try:
        got = w.call(ApiKey.CREATE_ACLS, 1, {"creations": [
            {"resource_type": rtype, "resource_name": name, "resource_pattern_type": pattern, "principal": principal,
             "host": host, "operation": operation, "permission_type": permission}]})  # fmt: skip
    finally:
        w.close()
    assert got["results"][0]["error_code"] == 0, got


def _open_transaction(bootstrap: str, txn_id: str, topics: list[str]) -> Producer:
    """A transactional producer (a super user) with an open transaction over ``topics``; the caller keeps it."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(15)
    producer.begin_transaction()
    for topic in topics:
        producer.produce(topic, b"x", partition=0)
    assert producer.flush(15) == 0
    return producer


def _normalized(body: dict[str, Any], names: dict[str, str]) -> str:
    text = json.dumps(body, sort_keys=True, default=lambda o: bytes(o).hex() if isinstance(o, memoryview) else repr(o))
    # what is random whatever exists: ids the request made up (and the answer names back), the client instance
    # id a telemetry subscription hands out and the subscription id made from it
    text = re.sub(r"UUID\('[0-9a-f-]+'\)", "<uuid>", text)
    text = re.sub(r'"subscription_id": -?[0-9]+', '"subscription_id": <id>', text)
    for name, placeholder in sorted(names.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(json.dumps(name)[1:-1], placeholder)
    return text


def test_a_refusal_reads_the_same_whether_the_resource_exists(acl_broker: rill.testing.TestBroker) -> None:
    bootstrap = acl_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("secret", 3, 1)])["secret"].result(timeout=15)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "grpx", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("secret", 0, 0)], asynchronous=False)
    consumer.close()
    txn = _open_transaction(bootstrap, "txnx", ["secret"])
    acl(bootstrap, TOPIC, "*", "User:admin", ALL)  # ACLs exist: "no ACL found" does not decide
    alice = sasl_wire(acl_broker.listener_address("SASL_PLAINTEXT"), "alice", "alice-secret")

    def ask(t: str, g: str, tx: str) -> dict[str, list[str]]:
        cases = _cases(t, g, tx)
        # more partitions than one request may add (an existing topic's count would decide), and fewer than now
        cases[ApiKey.CREATE_PARTITIONS] += [
            (2, {"topics": [{"name": t, "count": count, "assignments": None}], "timeout_ms": 5000}, lambda r: True)
            for count in (20_000, 2)
        ]
        names = {t: "<topic>", g: "<group>", tx: "<txn>"}
        return {ApiKey(k).name: [_normalized(alice.call(k, v, body), names) for v, body, _ in variants]
                for k, variants in cases.items()}  # fmt: skip

    existing, missing = ask("secret", "grpx", "txnx"), ask("nothere", "grpy", "txny")
    differ = {api: (existing[api], missing[api]) for api in existing if existing[api] != missing[api]}
    txn.abort_transaction(15)
    assert differ == {}, json.dumps(differ, indent=1)


def test_transactions_are_described_and_listed_only_as_far_as_the_caller_may(
    acl_broker: rill.testing.TestBroker,
) -> None:
    bootstrap = acl_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in ("hidden", "shown")]).values():
        f.result(timeout=15)
    one = _open_transaction(bootstrap, "tx-a", ["hidden", "shown"])
    two = _open_transaction(bootstrap, "tx-b", ["shown"])
    acl(bootstrap, TXN, "tx-a", "User:alice", DESCRIBE)
    acl(bootstrap, TOPIC, "shown", "User:alice", DESCRIBE)
    acl(bootstrap, CLUSTER, "kafka-cluster", "User:alice", DESCRIBE)  # e.g. for DescribeLogDirs: no more
    alice = sasl_wire(acl_broker.listener_address("SASL_PLAINTEXT"), "alice", "alice-secret")

    (described,) = alice.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx-a"]})["transaction_states"]
    listed = alice.call(ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": [], "producer_id_filters": []})
    one.abort_transaction(15)
    two.abort_transaction(15)
    assert described["error_code"] == 0 and described["transaction_state"] == "Ongoing"
    seen = [t["topic"] for t in described["topics"]], [s["transactional_id"] for s in listed["transaction_states"]]
    assert seen == (["shown"], ["tx-a"])


def test_created_topics_show_their_configs_only_to_who_may_describe_them(
    acl_broker: rill.testing.TestBroker,
) -> None:
    bootstrap = acl_broker.bootstrap_servers
    acl(bootstrap, TOPIC, "made-", "User:alice", CREATE, pattern=PREFIXED)
    acl(bootstrap, TOPIC, "made-visible", "User:alice", DESCRIBE_CONFIGS)
    alice = sasl_wire(acl_broker.listener_address("SASL_PLAINTEXT"), "alice", "alice-secret")
    topics = [
        {
            "name": n,
            "num_partitions": 2,
            "replication_factor": 1,
            "assignments": [],
            "configs": [{"name": "retention.ms", "value": "60000"}],
        }
        for n in ("made-blind", "made-visible")
    ]
    got = {t["name"]: t for t in alice.call(ApiKey.CREATE_TOPICS, 7, {"topics": topics, "timeout_ms": 5000})["topics"]}
    blind, visible = got["made-blind"], got["made-visible"]
    assert blind["error_code"] == 0 and blind["topic_id"] != visible["topic_id"]
    assert blind["topic_config_error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert (blind["num_partitions"], blind["replication_factor"], blind["configs"]) == (-1, -1, [])
    assert visible["error_code"] == 0 and visible["topic_config_error_code"] == 0
    assert (visible["num_partitions"], visible["replication_factor"]) == (2, 1)
    assert {c["name"]: c["value"] for c in visible["configs"]}["retention.ms"] == "60000"


def test_hosts_of_acls_written_in_javas_ipv6_form_match() -> None:
    """Kafka's tools write the host as Java spells the client's address: ``0:0:0:0:0:0:0:1`` for ``::1``."""
    configs = _configs("PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://[::1]:0")
    with rill.testing.broker(configs) as b:
        bootstrap = b.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("v6", 1, 1)])["v6"].result(timeout=15)
        acl(bootstrap, TOPIC, "v6", "User:alice", DESCRIBE, host="0:0:0:0:0:0:0:1")
        acl(bootstrap, TOPIC, "v6", "User:bob", DESCRIBE)
        acl(bootstrap, TOPIC, "v6", "User:bob", DESCRIBE, DENY, host="0:0:0:0:0:0:0:1")
        address = b.listener_address("SASL_PLAINTEXT")
        assert address.startswith("::1:")
        metadata = {"topics": [{"name": "v6"}], "allow_auto_topic_creation": False}
        alice = sasl_wire(address, "alice", "alice-secret").call(ApiKey.METADATA, 9, metadata)
        bob = sasl_wire(address, "bob", "bob-secret").call(ApiKey.METADATA, 9, metadata)
        assert alice["topics"][0]["error_code"] == 0  # allowed from her host
        assert bob["topics"][0]["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # denied from his
