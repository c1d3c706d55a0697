"""Controller and replication messages against bytes laid out by hand from the protocol's field tables.

The round-trip tests prove encode and decode agree with each other; these prove they agree with the wire.
"""

from __future__ import annotations

import struct
import uuid

from rill.api.registry import load_handlers, supported_versions
from rill.protocol import ApiKey, decode_request, decode_request_header, decode_response, encode_request

TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _classic_string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def _compact_string(s: str) -> bytes:
    return bytes([len(s) + 1]) + s.encode()


def test_controlled_shutdown_v0_request_has_header_v0_without_client_id() -> None:
    frame = encode_request(ApiKey.CONTROLLED_SHUTDOWN, 0, 5, "ignored", {"broker_id": 3})
    assert frame == _frame(struct.pack(">hhi", 7, 0, 5) + struct.pack(">i", 3))
    header, pos = decode_request_header(frame[4:])
    assert (header.header_version, header.client_id, pos) == (0, None, 8)
    assert decode_request(ApiKey.CONTROLLED_SHUTDOWN, 0, frame[4:], pos) == {"broker_id": 3, "broker_epoch": -1}


def test_controlled_shutdown_v1_and_v3_requests_carry_the_client_id() -> None:
    v1 = encode_request(ApiKey.CONTROLLED_SHUTDOWN, 1, 5, "b1", {"broker_id": 3})
    assert v1 == _frame(struct.pack(">hhi", 7, 1, 5) + _classic_string("b1") + struct.pack(">i", 3))
    v3 = encode_request(ApiKey.CONTROLLED_SHUTDOWN, 3, 5, "b1", {"broker_id": 3, "broker_epoch": 42})
    assert v3 == _frame(
        struct.pack(">hhi", 7, 3, 5) + _classic_string("b1") + b"\x00" + struct.pack(">iq", 3, 42) + b"\x00"
    )
    assert decode_request_header(v3[4:])[0].client_id == "b1"


def test_alter_partition_v3_request_bytes() -> None:
    body = {
        "broker_id": 2,
        "broker_epoch": 7,
        "topics": [{
            "topic_id": TOPIC_ID,
            "partitions": [{
                "partition_index": 1,
                "leader_epoch": 4,
                "new_isr_with_epochs": [{"broker_id": 2, "broker_epoch": 7}, {"broker_id": 3, "broker_epoch": -1}],
                "partition_epoch": 9,
            }],
        }],
    }
    want = (
        struct.pack(">hhi", 56, 3, 11) + _classic_string("b2") + b"\x00"  # header v2
        + struct.pack(">iq", 2, 7)
        + b"\x02" + TOPIC_ID.bytes  # one topic (compact array: n + 1)
        + b"\x02" + struct.pack(">ii", 1, 4)  # one partition
        + b"\x03" + struct.pack(">iq", 2, 7) + b"\x00" + struct.pack(">iq", 3, -1) + b"\x00"
        + b"\x00" + struct.pack(">i", 9) + b"\x00"  # leader recovery state, partition epoch, tags
        + b"\x00"  # topic tags
        + b"\x00"  # body tags
    )
    frame = encode_request(ApiKey.ALTER_PARTITION, 3, 11, "b2", body)
    assert frame == _frame(want)
    _, pos = decode_request_header(frame[4:])
    got = decode_request(ApiKey.ALTER_PARTITION, 3, frame[4:], pos)
    assert got["topics"][0]["topic_id"] == TOPIC_ID
    assert got["topics"][0]["partitions"][0]["new_isr_with_epochs"][1] == {"broker_id": 3, "broker_epoch": -1}


def test_update_metadata_v8_type_is_a_tagged_field() -> None:
    base = {"controller_id": 1, "controller_epoch": 2, "broker_epoch": 3, "topic_states": [], "live_brokers": []}
    untagged = encode_request(ApiKey.UPDATE_METADATA, 8, 1, None, base)
    tail = struct.pack(">i?iq", 1, False, 2, 3) + b"\x01\x01"  # fields, then two empty compact arrays
    assert untagged.endswith(tail + b"\x00")  # Type at its default 0 is not written
    tagged = encode_request(ApiKey.UPDATE_METADATA, 8, 1, None, {**base, "type": 2})
    assert tagged.endswith(tail + b"\x01\x00\x01\x02")  # one tag: tag 0, size 1, value 2
    _, pos = decode_request_header(tagged[4:])
    assert decode_request(ApiKey.UPDATE_METADATA, 8, tagged[4:], pos)["type"] == 2


def test_leader_and_isr_v0_and_v1_carry_partition_states_ungrouped() -> None:
    state = {"topic_name": "t", "partition_index": 0, "controller_epoch": 1, "leader": 2, "leader_epoch": 3,
             "isr": [2], "partition_epoch": 4, "replicas": [2, 5], "is_new": True}
    body = {"controller_id": 1, "controller_epoch": 1, "ungrouped_partition_states": [state],
            "live_leaders": [{"broker_id": 2, "host_name": "h", "port": 9092}]}
    v0 = encode_request(ApiKey.LEADER_AND_ISR, 0, 1, "c", body)
    state_v0 = (_classic_string("t") + struct.pack(">iiii", 0, 1, 2, 3) + struct.pack(">ii", 1, 2)
                + struct.pack(">i", 4) + struct.pack(">iii", 2, 2, 5))
    leaders = struct.pack(">ii", 1, 2) + _classic_string("h") + struct.pack(">i", 9092)
    assert v0.endswith(struct.pack(">ii", 1, 1) + struct.pack(">i", 1) + state_v0 + leaders)
    v1 = encode_request(ApiKey.LEADER_AND_ISR, 1, 1, "c", body)
    # IsNew (v1+) closes each partition state
    assert v1.endswith(struct.pack(">ii", 1, 1) + struct.pack(">i", 1) + state_v0 + b"\x01" + leaders)
    _, pos = decode_request_header(v1[4:])
    assert decode_request(ApiKey.LEADER_AND_ISR, 1, v1[4:], pos)["ungrouped_partition_states"][0]["is_new"] is True


def test_list_partition_reassignments_response_v0_bytes() -> None:
    payload = (
        struct.pack(">i", 8) + b"\x00"  # correlation id, response header v1 tags
        + struct.pack(">ih", 0, 0) + b"\x00"  # throttle, error code, null message (compact: 0)
        + b"\x02" + _compact_string("t")
        + b"\x02" + struct.pack(">i", 0) + b"\x03" + struct.pack(">ii", 1, 2) + b"\x02" + struct.pack(">i", 2)
        + b"\x01" + b"\x00"  # no removing replicas; partition tags
        + b"\x00" + b"\x00"  # topic tags, body tags
    )
    corr, body = decode_response(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, payload)
    assert corr == 8 and body["error_message"] is None
    assert body["topics"] == [{"name": "t", "partitions": [
        {"partition_index": 0, "replicas": [1, 2], "adding_replicas": [2], "removing_replicas": []}]}]


def test_the_broker_does_not_advertise_apis_it_has_no_handler_for() -> None:
    """The controller-to-broker APIs are declared for the codec only (brokers coordinate through ZooKeeper);
    the admin APIs among them that have handlers are advertised."""
    advertised = {e["api_key"] for e in supported_versions(load_handlers())}
    controller_only = {ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.CONTROLLED_SHUTDOWN,
                       ApiKey.ALTER_PARTITION}  # fmt: skip
    assert not advertised & controller_only
    admin = {ApiKey.ELECT_LEADERS, ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS,
             ApiKey.ALTER_REPLICA_LOG_DIRS, ApiKey.DESCRIBE_LOG_DIRS}  # fmt: skip
    assert admin <= advertised
    assert ApiKey.FETCH in advertised
