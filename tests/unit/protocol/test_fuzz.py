"""Random and mutated frames decode cleanly or raise ProtocolDecodeError, never anything else."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rill.protocol import (
    MESSAGES,
    ApiKey,
    ProtocolDecodeError,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
)

SAMPLES = [
    (ApiKey.PRODUCE, 9, {"acks": -1, "timeout_ms": 30000, "topic_data": [
        {"name": "orders", "partition_data": [{"index": 0, "records": b"\x00" * 70}]}]}),
    (ApiKey.FETCH, 12, {"max_wait_ms": 500, "min_bytes": 1, "topics": [
        {"topic": "orders",
         "partitions": [{"partition": 0, "fetch_offset": 10, "partition_max_bytes": 1 << 20}]}]}),
    (ApiKey.METADATA, 12, {"topics": [{"name": "a"}, {"name": None}], "allow_auto_topic_creation": True}),
    (ApiKey.API_VERSIONS, 3, {"client_software_name": "x", "client_software_version": "1"}),
    (ApiKey.JOIN_GROUP, 5, {"group_id": "g", "member_id": "", "protocol_type": "consumer",
                            "protocols": [{"name": "range", "metadata": b"\x00\x01"}]}),
    (ApiKey.OFFSET_COMMIT, 8, {"group_id": "g", "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 5}]}]}),
]


def _decode(frame: bytes) -> None:
    try:
        header, pos = decode_request_header(memoryview(frame))
    except ProtocolDecodeError:
        return
    with contextlib.suppress(ProtocolDecodeError):
        decode_request(header.api_key, header.api_version, memoryview(frame), pos)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_random_frames(frame: bytes) -> None:
    _decode(frame)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_frames(data: st.DataObject) -> None:
    api_key, version, body = data.draw(st.sampled_from(SAMPLES))
    frame = bytearray(encode_request(api_key, version, 1, "c", body)[4:])
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.integers(0, 2))
        i = data.draw(st.integers(0, len(frame) - 1))
        if op == 0:
            frame[i] = data.draw(st.integers(0, 255))
        elif op == 1:
            del frame[i:]
            if not frame:
                frame.append(0)
        else:
            frame[i:i] = data.draw(st.binary(min_size=1, max_size=4))
    _decode(bytes(frame))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(MESSAGES)), st.binary(max_size=64), st.integers(0, 20))
def test_random_bodies_for_every_api(api_key: int, body: bytes, version: int) -> None:
    frame = bytes(4) + body
    with contextlib.suppress(ProtocolDecodeError):
        decode_response(api_key, version, frame)


def test_header_fields_survive_a_garbage_body() -> None:
    frame = encode_request(ApiKey.PRODUCE, 9, 4242, "c", {})[4:]
    header, pos = decode_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (0, 9, 4242)
    with pytest.raises(ProtocolDecodeError):
        decode_request(header.api_key, header.api_version, frame[: pos + 3], pos)


def test_unknown_api_and_version() -> None:
    frame = (999).to_bytes(2, "big") + (0).to_bytes(2, "big") + (7).to_bytes(4, "big") + b"\xff\xff"
    header, pos = decode_request_header(frame)
    assert header.api_key == 999 and header.correlation_id == 7
    with pytest.raises(ProtocolDecodeError):
        decode_request(999, 0, frame, pos)
    with pytest.raises(ProtocolDecodeError):
        decode_request(ApiKey.API_VERSIONS, 99, frame, pos)


def test_truncated_header() -> None:
    with pytest.raises(ProtocolDecodeError):
        decode_request_header(b"\x00\x12\x00")
    with pytest.raises(ProtocolDecodeError) as e:
        decode_request_header(b"\x00\x03\x00\x01\x00\x00\x00\x09\x00\x40ab")
    assert e.value.correlation_id == 9 and e.value.api_key == 3
