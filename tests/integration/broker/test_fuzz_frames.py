"""Random and mutated frames never crash the broker: each gets an answer or a closed connection, and other
connections keep working."""

from __future__ import annotations

import socket
import struct
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.broker._wire import Wire

from rill.protocol import ApiKey, encode_request
from rill.records.builder import build_batch
from rill.records.record import Record

_BATCH = build_batch([Record(0, 1_700_000_000_000, b"k", b"v", [("h", b"x")])])
SEEDS = [
    encode_request(ApiKey.API_VERSIONS, 3, 1, "fuzz", {"client_software_name": "f", "client_software_version": "1"}),
    encode_request(ApiKey.METADATA, 12, 2, "fuzz", {"topics": [{"name": "fuzz", "topic_id": None}],
                                                     "allow_auto_topic_creation": True}),
    encode_request(ApiKey.PRODUCE, 9, 3, "fuzz", {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
                                                   "topic_data": [{"name": "fuzz", "partition_data": [
                                                       {"index": 0, "records": _BATCH}]}]}),
    encode_request(ApiKey.FETCH, 12, 4, "fuzz", {"max_wait_ms": 0, "min_bytes": 0, "topics": [
        {"topic": "fuzz", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}]}),
    encode_request(ApiKey.CREATE_TOPICS, 5, 5, "fuzz", {"topics": [{"name": "fz", "num_partitions": 1,
                                                                    "replication_factor": 1}]}),
    encode_request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 6, "fuzz", {"group_id": "sg", "member_id": "m",
                                                                 "member_epoch": 0, "rack_id": None,
                                                                 "subscribed_topic_names": ["fuzz"]}),
    encode_request(ApiKey.SHARE_FETCH, 1, 7, "fuzz", {"group_id": "sg", "member_id": "m", "share_session_epoch": 0,
                                                       "max_wait_ms": 0, "min_bytes": 1, "max_records": 10,
                                                       "batch_size": 10, "topics": [{"topic_id": uuid.uuid4(),
                                                       "partitions": [{"partition_index": 0,
                                                                       "acknowledgement_batches": []}]}],
                                                       "forgotten_topics_data": []}),
    encode_request(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, 9, "fuzz", {"dirs": [{"path": "/fuzz/logs", "topics": [
        {"name": "fuzz", "partitions": [0, 1]}]}]}),
    encode_request(ApiKey.DESCRIBE_LOG_DIRS, 4, 10, "fuzz", {"topics": [{"topic": "fuzz", "partitions": [0]}]}),
    encode_request(ApiKey.SHARE_ACKNOWLEDGE, 1, 8, "fuzz", {"group_id": "sg", "member_id": "m",
                                                             "share_session_epoch": 1, "topics": [
                                                                 {"topic_id": uuid.uuid4(), "partitions": [
                                                                     {"partition_index": 0,
                                                                      "acknowledgement_batches": [
                                                                          {"first_offset": 0, "last_offset": 2,
                                                                           "acknowledge_types": [1, 2, 3]}]}]}]}),
    encode_request(ApiKey.SHARE_FETCH, 2, 9, "fuzz", {"group_id": "sg", "member_id": "m", "share_session_epoch": 1,
                                                       "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 0,
                                                       "max_records": 0, "batch_size": 0, "share_acquire_mode": 1,
                                                       "is_renew_ack": True, "topics": [{"topic_id": uuid.uuid4(),
                                                       "partitions": [{"partition_index": 0,
                                                                       "acknowledgement_batches": [
                                                                           {"first_offset": 0, "last_offset": 1,
                                                                            "acknowledge_types": [4]}]}]}],
                                                       "forgotten_topics_data": []}),
    encode_request(ApiKey.SHARE_ACKNOWLEDGE, 2, 10, "fuzz", {"group_id": "sg", "member_id": "m",
                                                              "share_session_epoch": 1, "is_renew_ack": True,
                                                              "topics": [{"topic_id": uuid.uuid4(), "partitions": [
                                                                  {"partition_index": 0, "acknowledgement_batches": [
                                                                      {"first_offset": 0, "last_offset": 0,
                                                                       "acknowledge_types": [4]}]}]}]}),
    encode_request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 11, "fuzz", {"group_id": "sg", "topics": [
        {"topic_name": "fuzz", "partitions": [{"partition_index": 0, "start_offset": 0}]}]}),
    encode_request(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 12, "fuzz", {"group_id": "sg",
                                                                       "topics": [{"topic_name": "fuzz"}]}),
    encode_request(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, 13, "fuzz", {"client_instance_id": uuid.UUID(int=0)}),
    encode_request(ApiKey.PUSH_TELEMETRY, 0, 14, "fuzz", {"client_instance_id": uuid.uuid4(), "subscription_id": 7,
                                                          "terminating": False, "compression_type": 0,
                                                          "metrics": b"\x0a\x02\x12\x00"}),
    encode_request(ApiKey.LIST_CONFIG_RESOURCES, 1, 15, "fuzz", {"resource_types": [2, 16]}),
    encode_request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, 16, "fuzz", {"resources": [
        {"resource_type": 16, "resource_name": "fz", "configs": [
            {"name": "metrics", "config_operation": 0, "value": "*"},
            {"name": "match", "config_operation": 0, "value": "client_id=f.*"}]}], "validate_only": False}),
    encode_request(ApiKey.WRITE_SHARE_GROUP_STATE, 0, 17, "fuzz", {"group_id": "sg", "topics": [
        {"topic_id": uuid.uuid4(), "partitions": [{"partition": 0, "state_epoch": 0, "leader_epoch": 0,
                                                   "start_offset": 0, "state_batches": [
                                                       {"first_offset": 0, "last_offset": 3, "delivery_state": 2,
                                                        "delivery_count": 1}]}]}]}),
    encode_request(ApiKey.READ_SHARE_GROUP_STATE, 0, 18, "fuzz", {"group_id": "sg", "topics": [
        {"topic_id": uuid.uuid4(), "partitions": [{"partition": 0, "leader_epoch": 0}]}]}),
    encode_request(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, 19, "fuzz", {"group_id": "sg", "topics": [
        {"topic_id": uuid.uuid4(), "partitions": [{"partition": 0, "state_epoch": 1, "start_offset": 0}]}]}),
    encode_request(ApiKey.DELETE_SHARE_GROUP_STATE, 0, 20, "fuzz", {"group_id": "sg", "topics": [
        {"topic_id": uuid.uuid4(), "partitions": [{"partition": 0}]}]}),
    encode_request(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, 21, "fuzz", {"group_id": "sg", "topics": [
        {"topic_id": uuid.uuid4(), "partitions": [{"partition": 0, "leader_epoch": -1}]}]}),
    encode_request(ApiKey.FIND_COORDINATOR, 6, 22, "fuzz", {"key_type": 2,
                                                            "coordinator_keys": ["sg:ASNFZ4mrze8BI0VniavN7w:0"]}),
]


def _exchange(bootstrap: str, data: bytes) -> None:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        s.settimeout(5)
        try:
            while s.recv(65536):
                pass
        except (TimeoutError, ConnectionResetError):
            pass


def _alive(bootstrap: str) -> None:
    w = Wire(bootstrap)
    try:
        assert w.call(ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})["brokers"]
    finally:
        w.close()


mutation = st.tuples(st.sampled_from(SEEDS), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
                                                       min_size=1, max_size=8))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=mutation)
def test_mutated_real_requests(rill_broker, case: tuple[bytes, list[tuple[int, int]]]) -> None:
    seed, flips = case
    data = bytearray(seed)
    for pos, value in flips:
        if 4 <= pos < len(data):  # keep the size prefix so the frame is delivered whole
            data[pos] = value
    _exchange(rill_broker.bootstrap_servers, bytes(data))
    _alive(rill_broker.bootstrap_servers)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(min_size=0, max_size=300))
def test_random_frames(rill_broker, body: bytes) -> None:
    _exchange(rill_broker.bootstrap_servers, struct.pack(">i", len(body)) + body)
    _alive(rill_broker.bootstrap_servers)
