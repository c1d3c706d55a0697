"""Every admin write is visible to the next request: the broker that answers a write has it in its own image of the
cluster first. Each test sends the write and the read that should show it on one connection to one broker, with
nothing in between (as kafkajs's suite does: ListPartitionReassignments right after AlterPartitionReassignments)."""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterator
from typing import Any

import pytest
from tests.integration.broker._wire import Wire

from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.records.builder import build_batch
from rill.records.record import Record
from rill.testing.cluster import TestCluster, cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TOPIC, BROKER_RESOURCE, USER = 2, 4, 1


@pytest.fixture(scope="module")
def c() -> Iterator[TestCluster]:
    # an authorizer, so that ACLs are stored; the tests' plaintext connections are the super user
    with cluster(3, {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                     "super.users": "User:ANONYMOUS"}) as started:  # fmt: skip
        yield started


@pytest.fixture
def w(c: TestCluster) -> Iterator[Wire]:
    wire = Wire(c.broker(1).bootstrap_servers, timeout=60)
    yield wire
    wire.close()


def _metadata(w: Wire, name: str) -> dict[str, Any]:
    resp = w.call(ApiKey.METADATA, 12, {"topics": [{"name": name, "topic_id": None}],
                                        "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False})  # fmt: skip
    (topic,) = resp["topics"]
    return dict(topic)


def _create(w: Wire, name: str, assignment: list[list[int]] | None = None, partitions: int = 1) -> None:
    topic = {"name": name, "num_partitions": -1 if assignment else partitions, "replication_factor": -1 if assignment
             else 1, "assignments": [{"partition_index": i, "broker_ids": r} for i, r in enumerate(assignment or [])],
             "configs": []}  # fmt: skip
    resp = w.call(ApiKey.CREATE_TOPICS, 5, {"topics": [topic], "timeout_ms": 30000, "validate_only": False})
    assert resp["topics"][0]["error_code"] == 0, resp


def test_create_topic_then_metadata_names_its_leaders(w: Wire) -> None:
    _create(w, "vis-create", partitions=3)
    md = _metadata(w, "vis-create")
    assert md["error_code"] == 0 and len(md["partitions"]) == 3
    assert all(p["leader_id"] >= 0 for p in md["partitions"])


def test_create_partitions_then_delete_topic(w: Wire) -> None:
    _create(w, "vis-grow")
    resp = w.call(ApiKey.CREATE_PARTITIONS, 2, {"topics": [{"name": "vis-grow", "count": 4, "assignments": None}],
                                                "timeout_ms": 30000, "validate_only": False})  # fmt: skip
    assert resp["results"][0]["error_code"] == 0, resp
    md = _metadata(w, "vis-grow")
    assert len(md["partitions"]) == 4 and all(p["leader_id"] >= 0 for p in md["partitions"])
    resp = w.call(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["vis-grow"], "timeout_ms": 30000})
    assert resp["responses"][0]["error_code"] == 0, resp
    assert _metadata(w, "vis-grow")["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _described(w: Wire, resource_type: int, name: str, key: str) -> str | None:
    resp = w.call(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [{"resource_type": resource_type, "resource_name": name,
                                                              "configuration_keys": [key]}],
                                               "include_synonyms": False, "include_documentation": False})  # fmt: skip
    (result,) = resp["results"]
    assert result["error_code"] == 0, result
    values = [c["value"] for c in result["configs"] if c["name"] == key]
    return values[0] if values else None


@pytest.mark.parametrize(("resource_type", "name", "key", "value"), [
    (TOPIC, "vis-configs", "retention.ms", "7200000"),
    (BROKER_RESOURCE, "1", "log.cleaner.threads", "2"),
    (BROKER_RESOURCE, "", "log.retention.bytes", "123456789"),
], ids=["topic", "broker", "cluster-default"])  # fmt: skip
def test_alter_configs_then_describe_shows_them(w: Wire, resource_type: int, name: str, key: str, value: str) -> None:
    if resource_type == TOPIC:
        _create(w, name)
    for op, expected in ((0, value), (1, None)):  # SET, then DELETE
        resp = w.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": resource_type, "resource_name": name, "configs": [
                {"name": key, "config_operation": op, "value": value if op == 0 else None}]}],
            "validate_only": False})  # fmt: skip
        assert resp["responses"][0]["error_code"] == 0, resp
        shown = _described(w, resource_type, name, key)
        if expected is not None:
            assert shown == expected
        else:
            assert shown != value


def test_reassignment_then_list_shows_it(c: TestCluster, w: Wire) -> None:
    """The new replica's broker is paused, so the reassignment stays under way while the list is asked."""
    _create(w, "vis-move", assignment=[[0]])
    c.pause(2)
    try:
        resp = w.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 30000, "topics": [
            {"name": "vis-move", "partitions": [{"partition_index": 0, "replicas": [0, 2]}]}]})  # fmt: skip
        assert resp["error_code"] == 0 and resp["responses"][0]["partitions"][0]["error_code"] == 0, resp
        listed = w.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 30000, "topics": None})
        ongoing = {(t["name"], p["partition_index"]): p for t in listed["topics"] for p in t["partitions"]}
        assert ("vis-move", 0) in ongoing, listed
        assert ongoing[("vis-move", 0)]["adding_replicas"] == [2]
        # cancelled: the list shows it gone at once
        resp = w.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 30000, "topics": [
            {"name": "vis-move", "partitions": [{"partition_index": 0, "replicas": None}]}]})  # fmt: skip
        assert resp["responses"][0]["partitions"][0]["error_code"] == 0, resp
        listed = w.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 30000, "topics": None})
        assert not [t for t in listed["topics"] if t["name"] == "vis-move"], listed
    finally:
        c.resume(2)


def test_elect_leaders_then_metadata_names_the_preferred_leader(c: TestCluster, w: Wire) -> None:
    _create(w, "vis-elect", assignment=[[2, 0]])
    c.wait_for(lambda: sorted(c.isr("vis-elect", 0)) == [0, 2], 30, "both replicas in sync")
    c.stop(2)
    c.wait_for(lambda: c.leader("vis-elect", 0) == 0, 30, "leadership on broker 0")
    c.start(2)
    c.wait_for(lambda: sorted(c.isr("vis-elect", 0)) == [0, 2], 30, "broker 2 back in sync")
    resp = w.call(ApiKey.ELECT_LEADERS, 2, {"election_type": 0, "topic_partitions": [
        {"topic": "vis-elect", "partitions": [0]}], "timeout_ms": 30000})  # fmt: skip
    assert resp["replica_election_results"][0]["partition_result"][0]["error_code"] == 0, resp
    assert _metadata(w, "vis-elect")["partitions"][0]["leader_id"] == 2


def test_client_quotas_then_describe_shows_them(w: Wire) -> None:
    entity = [{"entity_type": "user", "entity_name": "vis-user"}]
    resp = w.call(ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": [{"entity": entity, "ops": [
        {"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}], "validate_only": False})  # fmt: skip
    assert resp["entries"][0]["error_code"] == 0, resp
    described = w.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [
        {"entity_type": "user", "match_type": 0, "match": "vis-user"}], "strict": False})  # fmt: skip
    values = [(v["key"], v["value"]) for e in described["entries"] for v in e["values"]]
    assert values == [("producer_byte_rate", 1024.0)], described


def test_scram_credentials_then_describe_shows_them(w: Wire) -> None:
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", b"secret", salt, 4096)
    assert hmac.compare_digest(salted, salted)
    resp = w.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [], "upsertions": [
        {"name": "vis-scram", "mechanism": 2, "iterations": 4096, "salt": salt, "salted_password": salted}]})
    assert resp["results"][0]["error_code"] == 0, resp
    described = w.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [{"name": "vis-scram"}]})
    (result,) = described["results"]
    assert result["error_code"] == 0 and [i["mechanism"] for i in result["credential_infos"]] == [2], described


def test_acls_then_describe_shows_them(w: Wire) -> None:
    binding = {"resource_type_filter": TOPIC, "resource_name_filter": "vis-acl", "pattern_type_filter": 3,
               "principal_filter": "User:vis", "host_filter": "*", "operation": 3, "permission_type": 3}  # fmt: skip

    def described() -> list[Any]:
        resp = w.call(ApiKey.DESCRIBE_ACLS, 2, binding)
        assert resp["error_code"] == 0, resp
        return [(r["resource_name"], a["principal"]) for r in resp["resources"] for a in r["acls"]]

    resp = w.call(ApiKey.CREATE_ACLS, 2, {"creations": [
        {"resource_type": TOPIC, "resource_name": "vis-acl", "resource_pattern_type": 3, "principal": "User:vis",
         "host": "*", "operation": 3, "permission_type": 3}]})  # fmt: skip
    assert resp["results"][0]["error_code"] == 0, resp
    assert described() == [("vis-acl", "User:vis")]
    resp = w.call(ApiKey.DELETE_ACLS, 2, {"filters": [binding]})
    assert resp["filter_results"][0]["error_code"] == 0, resp
    assert described() == []


def test_delete_records_then_list_offsets_shows_the_new_start(c: TestCluster, w: Wire) -> None:
    _create(w, "vis-records", assignment=[[1]])
    batch = build_batch([Record(0, 0, None, b"v", []) for _ in range(5)])
    resp = w.call(ApiKey.PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 30000, "topic_data": [
        {"name": "vis-records", "partition_data": [{"index": 0, "records": batch}]}]})  # fmt: skip
    assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0, resp
    resp = w.call(ApiKey.DELETE_RECORDS, 2, {"timeout_ms": 30000, "topics": [
        {"name": "vis-records", "partitions": [{"partition_index": 0, "offset": 3}]}]})  # fmt: skip
    assert resp["topics"][0]["partitions"][0]["error_code"] == 0, resp
    earliest = w.call(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "vis-records", "partitions": [{"partition_index": 0, "timestamp": -2}]}]})  # fmt: skip
    assert earliest["topics"][0]["partitions"][0]["offset"] == 3


def test_offset_delete_then_offset_fetch_shows_none(c: TestCluster) -> None:
    group = "vis-group"
    with_coordinator = Wire(c.broker(0).bootstrap_servers, timeout=60)
    found = with_coordinator.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
    with_coordinator.close()
    (coordinator,) = found["coordinators"]
    assert coordinator["error_code"] == 0, found
    w = Wire(f"{coordinator['host']}:{coordinator['port']}", timeout=60)
    try:
        _create(w, "vis-offsets")
        resp = w.call(ApiKey.OFFSET_COMMIT, 8, {"group_id": group, "generation_id_or_member_epoch": -1,
                                                "member_id": "", "topics": [{"name": "vis-offsets", "partitions": [
                                                    {"partition_index": 0, "committed_offset": 7,
                                                     "committed_metadata": None}]}]})  # fmt: skip
        assert resp["topics"][0]["partitions"][0]["error_code"] == 0, resp

        def fetched() -> int:
            resp = w.call(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": [
                {"name": "vis-offsets", "partition_indexes": [0]}]}]})  # fmt: skip
            return int(resp["groups"][0]["topics"][0]["partitions"][0]["committed_offset"])

        assert fetched() == 7
        resp = w.call(ApiKey.OFFSET_DELETE, 0, {"group_id": group, "topics": [
            {"name": "vis-offsets", "partitions": [{"partition_index": 0}]}]})  # fmt: skip
        assert resp["error_code"] == 0 and resp["topics"][0]["partitions"][0]["error_code"] == 0, resp
        assert fetched() == -1
    finally:
        w.close()
