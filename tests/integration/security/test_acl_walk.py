"""Every API the broker advertises, sent by a principal no ACL allows anything: each answers Kafka's authorization
error (or leaves out what the caller may not see), and nothing changes, neither the cluster's state as clients see
it nor the files in the log directory.

The walk covers the registry: an API added without a case here fails the test, so a handler cannot be added
without its check being proven."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.broker._wire import Wire
from tests.integration.broker.test_admin_refusals import _differences, _state
from tests.integration.security.conftest import PLAIN_JAAS

import rill.testing
from rill.api.registry import load_handlers
from rill.errors import ErrorCode
from rill.protocol import ApiKey

pytestmark = pytest.mark.timeout(120)

TAF, GAF = ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED
CAF = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
EXEMPT = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
"""Answered before (or as part of) authentication, to anyone."""

AUTHORIZER = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:ANONYMOUS;User:admin",  # the PLAINTEXT listener is the operators' own
}


def sasl_wire(address: str, user: str, password: str) -> Wire:
    """A bare connection authenticated with SASL PLAIN."""
    w = Wire(address)
    assert w.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
    got = w.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{user}\0{password}".encode()})
    assert got["error_code"] == 0, got
    return w


@pytest.fixture
def acl_broker() -> Iterator[rill.testing.TestBroker]:
    configs = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "sasl.jaas.config": PLAIN_JAAS,
        "auto.create.topics.enable": "true",
        **AUTHORIZER,
    }
    with rill.testing.broker(configs) as b:
        yield b


def _first(body: dict[str, Any], *path: str | int) -> Any:
    out: Any = body
    for step in path:
        out = out[step]
    return out


P0 = [{"partition_index": 0}]
Check = Callable[[dict[str, Any]], bool]


def _cases(t: str = "secret", g: str = "g", tx: str = "tx") -> dict[int, list[tuple[int, dict[str, Any], Check]]]:
    """API key -> (version, request, what a refused answer looks like), about topic ``t``, group ``g`` and
    transactional id ``tx``."""
    part = {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}
    return {
        ApiKey.PRODUCE: [(9, {"acks": -1, "timeout_ms": 1000, "topic_data": [
            {"name": t, "partition_data": [{"index": 0, "records": bytes(100)}]}]},
            lambda r: _first(r, "responses", 0, "partition_responses", 0, "error_code") == TAF)],
        ApiKey.FETCH: [
            (12, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "topics": [{"topic": t, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}]}]},
             lambda r: _first(r, "responses", 0, "partitions", 0, "error_code") == TAF),
            (12, {"replica_id": 1, "max_wait_ms": 0, "min_bytes": 0, "topics": [{"topic": t, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}]}]},
             lambda r: _first(r, "responses", 0, "partitions", 0, "error_code") == TAF),
        ],
        ApiKey.LIST_OFFSETS: [(7, {"replica_id": -1, "topics": [{"name": t, "partitions": [
            {"partition_index": 0, "timestamp": -1}]}]},
            lambda r: _first(r, "topics", 0, "partitions", 0, "error_code") == TAF)],
        ApiKey.METADATA: [
            (12, {"topics": [{"name": t}], "allow_auto_topic_creation": True},
             lambda r: _first(r, "topics", 0, "error_code") == TAF),
            (12, {"topics": [{"name": "auto-made"}], "allow_auto_topic_creation": True},
             lambda r: _first(r, "topics", 0, "error_code") == TAF),
            (12, {"topics": None}, lambda r: r["topics"] == []),
        ],
        ApiKey.OFFSET_COMMIT: [(8, {"group_id": g, "generation_id_or_member_epoch": -1, "member_id": "",
                                    "topics": [{"name": t, "partitions": [part]}]},
                                lambda r: _first(r, "topics", 0, "partitions", 0, "error_code") == GAF)],
        ApiKey.OFFSET_FETCH: [(7, {"group_id": g, "topics": None}, lambda r: r["error_code"] == GAF)],
        ApiKey.OFFSET_DELETE: [(0, {"group_id": g, "topics": [{"name": t, "partitions": P0}]},
                                lambda r: r["error_code"] == GAF)],
        ApiKey.FIND_COORDINATOR: [
            (3, {"key": g, "key_type": 0}, lambda r: r["error_code"] == GAF),
            (3, {"key": tx, "key_type": 1}, lambda r: r["error_code"] == TXN),
            (6, {"key_type": 2, "coordinator_keys": [f"{g}:ASNFZ4mrze8BI0VniavN7w:0"]},
             lambda r: _first(r, "coordinators", 0, "error_code") == CAF),
        ],
        ApiKey.JOIN_GROUP: [(5, {"group_id": g, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                                 "member_id": "", "protocol_type": "consumer",
                                 "protocols": [{"name": "range", "metadata": b""}]},
                             lambda r: r["error_code"] == GAF)],
        ApiKey.SYNC_GROUP: [(3, {"group_id": g, "generation_id": 1, "member_id": "m", "assignments": []},
                             lambda r: r["error_code"] == GAF)],
        ApiKey.HEARTBEAT: [(3, {"group_id": g, "generation_id": 1, "member_id": "m"},
                            lambda r: r["error_code"] == GAF)],
        ApiKey.LEAVE_GROUP: [(3, {"group_id": g, "members": [{"member_id": "m"}]},
                              lambda r: r["error_code"] == GAF)],
        ApiKey.LIST_GROUPS: [(4, {"states_filter": []}, lambda r: r["error_code"] == 0 and r["groups"] == [])],
        ApiKey.DESCRIBE_GROUPS: [(5, {"groups": [g]}, lambda r: _first(r, "groups", 0, "error_code") == GAF)],
        ApiKey.CONSUMER_GROUP_HEARTBEAT: [(0, {"group_id": g, "member_id": "", "member_epoch": 0,
                                               "rebalance_timeout_ms": 10000, "subscribed_topic_names": [t],
                                               "topic_partitions": []},
                                           lambda r: r["error_code"] == GAF)],
        ApiKey.CONSUMER_GROUP_DESCRIBE: [(0, {"group_ids": [g]},
                                          lambda r: _first(r, "groups", 0, "error_code") == GAF)],
        ApiKey.DELETE_GROUPS: [(2, {"groups_names": [g]}, lambda r: _first(r, "results", 0, "error_code") == GAF)],
        ApiKey.CREATE_TOPICS: [(5, {"topics": [{"name": "new-one", "num_partitions": 1, "replication_factor": 1,
                                                "assignments": [], "configs": []}], "timeout_ms": 5000},
                                lambda r: _first(r, "topics", 0, "error_code") == TAF)],
        ApiKey.DELETE_TOPICS: [(5, {"topic_names": [t], "timeout_ms": 5000},
                                lambda r: _first(r, "responses", 0, "error_code") == TAF)],
        ApiKey.CREATE_PARTITIONS: [(2, {"topics": [{"name": t, "count": 5, "assignments": None}],
                                        "timeout_ms": 5000},
                                    lambda r: _first(r, "results", 0, "error_code") == TAF)],
        ApiKey.DESCRIBE_CONFIGS: [
            (4, {"resources": [{"resource_type": 2, "resource_name": t, "configuration_keys": None}]},
             lambda r: _first(r, "results", 0, "error_code") == TAF),
            (4, {"resources": [{"resource_type": 4, "resource_name": "0", "configuration_keys": None}]},
             lambda r: _first(r, "results", 0, "error_code") == CAF),
            (4, {"resources": [{"resource_type": 16, "resource_name": "subs", "configuration_keys": None}]},
             lambda r: _first(r, "results", 0, "error_code") == CAF),
        ],
        ApiKey.ALTER_CONFIGS: [
            (1, {"resources": [{"resource_type": 2, "resource_name": t,
                                "configs": [{"name": "retention.ms", "value": "1000"}]}]},
             lambda r: _first(r, "responses", 0, "error_code") == TAF),
            (1, {"resources": [{"resource_type": 4, "resource_name": "0",
                                "configs": [{"name": "log.cleaner.threads", "value": "2"}]}]},
             lambda r: _first(r, "responses", 0, "error_code") == CAF),
            (1, {"resources": [{"resource_type": 16, "resource_name": "subs",
                                "configs": [{"name": "metrics", "value": "*"}]}]},
             lambda r: _first(r, "responses", 0, "error_code") == CAF),
        ],
        ApiKey.INCREMENTAL_ALTER_CONFIGS: [(1, {"resources": [{"resource_type": 2, "resource_name": t, "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "1000"}]}]},
            lambda r: _first(r, "responses", 0, "error_code") == TAF),
            (1, {"resources": [{"resource_type": 16, "resource_name": "subs", "configs": [
                {"name": "metrics", "config_operation": 0, "value": "*"}]}]},
             lambda r: _first(r, "responses", 0, "error_code") == CAF)],
        # Client metrics subscriptions are listed to DESCRIBE_CONFIGS on the cluster; telemetry needs no ACL in
        # Kafka: a subscription is asked for and a push answered on its own terms (here, an unknown subscription).
        ApiKey.LIST_CONFIG_RESOURCES: [(0, {}, lambda r: (r["error_code"], r["config_resources"]) == (CAF, [])),
                                       (1, {"resource_types": []},
                                        lambda r: (r["error_code"], r["config_resources"]) == (CAF, []))],
        ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: [(0, {"client_instance_id": uuid.UUID(int=0)},
                                              lambda r: r["error_code"] == 0 and r["requested_metrics"] == [])],
        ApiKey.PUSH_TELEMETRY: [(0, {"client_instance_id": uuid.uuid4(), "subscription_id": 1, "terminating": False,
                                     "compression_type": 0, "metrics": b""},
                                 lambda r: r["error_code"] == ErrorCode.UNKNOWN_SUBSCRIPTION_ID)],
        ApiKey.DELETE_RECORDS: [(2, {"topics": [{"name": t, "partitions": [{"partition_index": 0, "offset": 5}]}],
                                     "timeout_ms": 5000},
                                 lambda r: _first(r, "topics", 0, "partitions", 0, "error_code") == TAF)],
        ApiKey.OFFSET_FOR_LEADER_EPOCH: [(3, {"replica_id": -1, "topics": [{"topic": t, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
            lambda r: _first(r, "topics", 0, "partitions", 0, "error_code") == TAF)],
        ApiKey.INIT_PRODUCER_ID: [
            (4, {"transactional_id": tx, "transaction_timeout_ms": 60000}, lambda r: r["error_code"] == TXN),
            (4, {"transactional_id": None, "transaction_timeout_ms": 60000}, lambda r: r["error_code"] == CAF),
        ],
        ApiKey.ADD_PARTITIONS_TO_TXN: [
            (3, {"v3_and_below_transactional_id": tx, "v3_and_below_producer_id": 1,
                 "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [{"name": t, "partitions": [0]}]},
             lambda r: _first(r, "results_by_topic_v3_and_below", 0, "results_by_partition", 0,
                              "partition_error_code") == TXN),
            (4, {"transactions": [{"transactional_id": tx, "producer_id": 1, "producer_epoch": 0,
                                   "verify_only": True, "topics": [{"name": t, "partitions": [0]}]}]},
             lambda r: r["error_code"] == CAF),
        ],
        ApiKey.ADD_OFFSETS_TO_TXN: [(3, {"transactional_id": tx, "producer_id": 1, "producer_epoch": 0,
                                         "group_id": g}, lambda r: r["error_code"] == TXN)],
        ApiKey.END_TXN: [(3, {"transactional_id": tx, "producer_id": 1, "producer_epoch": 0, "committed": True},
                          lambda r: r["error_code"] == TXN)],
        ApiKey.TXN_OFFSET_COMMIT: [(3, {"transactional_id": tx, "group_id": g, "producer_id": 1,
                                        "producer_epoch": 0, "topics": [{"name": t, "partitions": [part]}]},
                                    lambda r: _first(r, "topics", 0, "partitions", 0, "error_code") == TXN)],
        ApiKey.DESCRIBE_TRANSACTIONS: [(0, {"transactional_ids": [tx]},
                                        lambda r: _first(r, "transaction_states", 0, "error_code") == TXN)],
        ApiKey.LIST_TRANSACTIONS: [(0, {}, lambda r: r["transaction_states"] == [])],
        ApiKey.WRITE_TXN_MARKERS: [(1, {"markers": [{"producer_id": 1, "producer_epoch": 0,
                                                     "transaction_result": True, "coordinator_epoch": 0,
                                                     "topics": [{"name": t, "partition_indexes": [0]}]}]},
                                    lambda r: _first(r, "markers", 0, "topics", 0, "partitions", 0,
                                                     "error_code") == CAF)],
        ApiKey.DESCRIBE_PRODUCERS: [(0, {"topics": [{"name": t, "partition_indexes": [0]}]},
                                     lambda r: _first(r, "topics", 0, "partitions", 0, "error_code") == TAF)],
        ApiKey.ELECT_LEADERS: [(1, {"election_type": 0, "topic_partitions": [{"topic": t, "partitions": [0]}],
                                    "timeout_ms": 5000},
                                lambda r: r["error_code"] == CAF and _first(
                                    r, "replica_election_results", 0, "partition_result", 0, "error_code") == CAF)],
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: [(0, {"timeout_ms": 5000, "topics": [
            {"name": t, "partitions": [{"partition_index": 0, "replicas": [0]}]}]},
            lambda r: r["error_code"] == CAF)],
        ApiKey.LIST_PARTITION_REASSIGNMENTS: [(0, {"timeout_ms": 5000, "topics": None},
                                               lambda r: r["error_code"] == CAF)],
        ApiKey.DESCRIBE_LOG_DIRS: [(3, {"topics": None}, lambda r: r["error_code"] == CAF and r["results"] == [])],
        ApiKey.ALTER_REPLICA_LOG_DIRS: [(2, {"dirs": [{"path": "/x", "topics": [{"name": t, "partitions": [0]}]}]},
                                         lambda r: [(x["topic_name"], x["partitions"]) for x in r["results"]]
                                         == [(t, [{"partition_index": 0, "error_code": CAF}])])],
        ApiKey.DESCRIBE_TOPIC_PARTITIONS: [
            (0, {"topics": [{"name": t}], "response_partition_limit": 10, "cursor": None},
             lambda r: [(x["error_code"], x["partitions"]) for x in r["topics"]] == [(TAF, [])]),
            (0, {"topics": [], "response_partition_limit": 10, "cursor": None}, lambda r: r["topics"] == []),
        ],
        ApiKey.SHARE_GROUP_HEARTBEAT: [(1, {"group_id": g, "member_id": "m", "member_epoch": 0, "rack_id": None,
                                            "subscribed_topic_names": [t]}, lambda r: r["error_code"] == GAF)],
        ApiKey.SHARE_GROUP_DESCRIBE: [(1, {"group_ids": [g], "include_authorized_operations": True},
                                       lambda r: _first(r, "groups", 0, "error_code") == GAF)],
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: [(0, {"groups": [{"group_id": g, "topics": None}]},
                                               lambda r: _first(r, "groups", 0, "error_code") == GAF)],
        ApiKey.SHARE_FETCH: [(version, {"group_id": g, "member_id": "m", "share_session_epoch": 0,
                                        "max_wait_ms": 0, "min_bytes": 1, "max_records": 10, "batch_size": 10,
                                        "share_acquire_mode": 1, "is_renew_ack": False, "topics": [
                                            {"topic_id": uuid.uuid4(), "partitions": [
                                                {"partition_index": 0, "acknowledgement_batches": []}]}],
                                        "forgotten_topics_data": []},
                              lambda r: r["error_code"] == GAF and r["responses"] == []) for version in (1, 2)],
        ApiKey.SHARE_ACKNOWLEDGE: [(version, {"group_id": g, "member_id": "m", "share_session_epoch": 1,
                                              "is_renew_ack": False, "topics": [
            {"topic_id": uuid.uuid4(), "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]}]}]},
            lambda r: r["error_code"] == GAF and r["responses"] == []) for version in (1, 2)],
        ApiKey.ALTER_SHARE_GROUP_OFFSETS: [(0, {"group_id": g, "topics": [{"topic_name": t, "partitions": [
            {"partition_index": 0, "start_offset": 0}]}]},
            lambda r: r["error_code"] == GAF and _first(r, "responses", 0, "partitions", 0, "error_code") == GAF)],
        ApiKey.DELETE_SHARE_GROUP_OFFSETS: [(0, {"group_id": g, "topics": [{"topic_name": t}]},
                                             lambda r: r["error_code"] == GAF and r["responses"] == [])],
        **{api: [(0, {"group_id": g, "topics": [{"topic_id": uuid.uuid4(), "partitions": [part]}]},
                  lambda r: _first(r, "results", 0, "partitions", 0, "error_code") == CAF)]
           for api, part in [
               (ApiKey.INITIALIZE_SHARE_GROUP_STATE, {"partition": 0, "state_epoch": 1, "start_offset": 0}),
               (ApiKey.READ_SHARE_GROUP_STATE, {"partition": 0, "leader_epoch": 0}),
               (ApiKey.WRITE_SHARE_GROUP_STATE, {"partition": 0, "state_epoch": 0, "leader_epoch": 0,
                                                 "start_offset": 0, "state_batches": []}),
               (ApiKey.DELETE_SHARE_GROUP_STATE, {"partition": 0}),
               (ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, {"partition": 0, "leader_epoch": 0}),
           ]},
        ApiKey.DESCRIBE_CLUSTER: [(0, {"include_cluster_authorized_operations": True},
                                   lambda r: r["cluster_authorized_operations"] == 0)],
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: [(0, {"users": None}, lambda r: r["error_code"] == CAF)],
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: [(0, {"deletions": [], "upsertions": [
            {"name": "mallory", "mechanism": 1, "iterations": 4096, "salt": b"salt", "salted_password": b"s" * 32}]},
            lambda r: _first(r, "results", 0, "error_code") == CAF)],
        ApiKey.DESCRIBE_CLIENT_QUOTAS: [(1, {"components": [], "strict": False},
                                         lambda r: r["error_code"] == CAF and not r["entries"])],
        ApiKey.ALTER_CLIENT_QUOTAS: [(1, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "alice"}],
                                                       "ops": [{"key": "producer_byte_rate", "value": 1e9,
                                                                "remove": False}]}], "validate_only": False},
                                      lambda r: _first(r, "entries", 0, "error_code") == CAF)],
        ApiKey.DESCRIBE_ACLS: [(1, {"resource_type_filter": 1, "resource_name_filter": None,
                                    "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                    "operation": 1, "permission_type": 1}, lambda r: r["error_code"] == CAF)],
        ApiKey.CREATE_ACLS: [(1, {"creations": [{"resource_type": 2, "resource_name": t, "resource_pattern_type": 3,
                                                 "principal": "User:alice", "host": "*", "operation": 2,
                                                 "permission_type": 3}]},
                              lambda r: _first(r, "results", 0, "error_code") == CAF)],
        ApiKey.DELETE_ACLS: [(1, {"filters": [{"resource_type_filter": 1, "resource_name_filter": None,
                                               "pattern_type_filter": 1, "principal_filter": None,
                                               "host_filter": None, "operation": 1, "permission_type": 1}]},
                              lambda r: _first(r, "filter_results", 0, "error_code") == CAF)],
    }  # fmt: skip


def test_every_api_refuses_a_principal_without_acls(acl_broker: rill.testing.TestBroker) -> None:
    admin_conf = {"bootstrap.servers": acl_broker.bootstrap_servers}
    admin = AdminClient(admin_conf)
    admin.create_topics([NewTopic("secret", 1, 1)])["secret"].result(timeout=15)
    producer = Producer(admin_conf)
    for i in range(10):
        producer.produce("secret", f"v{i}".encode(), partition=0)
    assert producer.flush(15) == 0
    consumer = Consumer({**admin_conf, "group.id": "g", "enable.auto.commit": False})
    consumer.assign([TopicPartition("secret", 0, 3)])
    consumer.commit(offsets=[TopicPartition("secret", 0, 3)], asynchronous=False)
    consumer.close()
    # an ACL for someone else, so that "no ACL found" is not what decides
    created = Wire(acl_broker.bootstrap_servers).call(ApiKey.CREATE_ACLS, 1, {"creations": [
        {"resource_type": 2, "resource_name": "*", "resource_pattern_type": 3, "principal": "User:admin",
         "host": "*", "operation": 2, "permission_type": 3}]})  # fmt: skip
    assert created["results"][0]["error_code"] == 0

    plain = Wire(acl_broker.bootstrap_servers)
    log_dir = Path(acl_broker.overrides["log.dirs"])
    before = _state(plain, log_dir)
    cases = _cases()
    advertised = {int(k) for k in load_handlers()} - {int(k) for k in EXEMPT}
    assert advertised - set(cases) == set(), "an advertised API has no authorization case"
    alice = sasl_wire(acl_broker.listener_address("SASL_PLAINTEXT"), "alice", "alice-secret")
    failures = []
    for api_key, variants in sorted(cases.items()):
        for version, body, refused in variants:
            got = alice.call(api_key, version, body)
            if not refused(got):
                failures.append(f"{ApiKey(api_key).name} v{version}: {got}")
    assert failures == []
    assert _differences(_state(plain, log_dir), before) == []
    quotas = plain.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [], "strict": False})
    assert (quotas["error_code"], quotas["entries"]) == (0, [])
    names = {t["name"] for t in plain.call(ApiKey.METADATA, 12, {"topics": None})["topics"]}
    assert names == {"secret", "__consumer_offsets"}  # neither created nor auto-created anything


def test_share_group_offsets_need_read_on_each_topic(acl_broker: rill.testing.TestBroker) -> None:
    """AlterShareGroupOffsets needs READ on the group and on each topic, DeleteShareGroupOffsets DELETE on the group
    and READ on each topic (Kafka's KafkaApis): a topic the caller may not read is refused and keeps its state."""
    admin = AdminClient({"bootstrap.servers": acl_broker.bootstrap_servers})
    admin.create_topics([NewTopic("secret", 1, 1)])["secret"].result(timeout=15)
    plain = Wire(acl_broker.bootstrap_servers)
    alter = {"group_id": "sg", "topics": [{"topic_name": "secret", "partitions": [
        {"partition_index": 0, "start_offset": 0}]}]}  # fmt: skip
    deadline = time.monotonic() + 30
    while (seeded := plain.call(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, alter))["error_code"] in (
        ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    ) and time.monotonic() < deadline:  # __consumer_offsets is made by the first request that needs it
        time.sleep(0.1)
    assert seeded["responses"][0]["partitions"][0]["error_code"] == 0
    for operation in (3, 6):  # READ and DELETE on the group, nothing on the topic
        created = plain.call(ApiKey.CREATE_ACLS, 1, {"creations": [
            {"resource_type": 3, "resource_name": "sg", "resource_pattern_type": 3, "principal": "User:alice",
             "host": "*", "operation": operation, "permission_type": 3}]})  # fmt: skip
        assert created["results"][0]["error_code"] == 0
    describe = {"groups": [{"group_id": "sg", "topics": None}]}
    before = plain.call(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, describe)
    alice = sasl_wire(acl_broker.listener_address("SASL_PLAINTEXT"), "alice", "alice-secret")
    try:
        r = alice.call(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, {**alter, "topics": [
            {"topic_name": "secret", "partitions": [{"partition_index": 0, "start_offset": 0}]}]})  # fmt: skip
        assert (r["error_code"], _first(r, "responses", 0, "partitions", 0, "error_code")) == (0, TAF)
        r = alice.call(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": "sg", "topics": [{"topic_name": "secret"}]})
        assert (r["error_code"], _first(r, "responses", 0, "error_code")) == (0, TAF)
        assert plain.call(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, describe) == before
    finally:
        alice.close()
        plain.close()
