"""Round trips of every message and version, with bodies generated from the declarations themselves."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rill.common import FileRegion
from rill.protocol import (
    DATA,
    MESSAGES,
    ApiKey,
    ProtocolEncodeError,
    decode_data,
    decode_request,
    decode_request_body,
    decode_request_header,
    decode_response,
    decode_versioned,
    encode_data,
    encode_request,
    encode_response,
    encode_versioned,
)
from rill.protocol.schema import Field, Message

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


def _scalar(f: Field, t: str, v: int) -> st.SearchStrategy[Any]:
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return st.integers(lo, hi)
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "uuid":
        return st.uuids()
    if t == "string":
        return st.text(max_size=8)
    return st.binary(max_size=16)


def _field(f: Field, v: int) -> st.SearchStrategy[Any]:
    if f.is_array:
        elem = _struct(f.fields, v) if f.is_struct else _scalar(f, f.element_type, v)
        s: st.SearchStrategy[Any] = st.lists(elem, max_size=3)
    elif f.is_struct:
        s = _struct(f.fields, v)
    else:
        s = _scalar(f, f.type, v)
    if f.is_nullable(v):
        s = st.none() | s
    return s


def _struct(fields: tuple[Field, ...], v: int) -> st.SearchStrategy[dict[str, Any]]:
    required = {f.key: _field(f, v) for f in fields if v in f.versions and not f.is_tagged(v)}
    optional = {f.key: _field(f, v) for f in fields if v in f.versions and f.is_tagged(v)}
    return st.fixed_dictionaries(required, optional=optional)


def _normal(x: Any) -> Any:
    if isinstance(x, memoryview | bytearray):
        return bytes(x)
    if isinstance(x, dict):
        return {k: _normal(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_normal(e) for e in x]
    return x


def _assert_subset(sent: Any, got: Any) -> None:
    """Every value sent comes back (decoded bodies also hold defaults for fields not sent)."""
    if isinstance(sent, dict):
        for k, v in sent.items():
            _assert_subset(v, got[k])
    elif isinstance(sent, list):
        assert len(sent) == len(got)
        for a, b in zip(sent, got, strict=True):
            _assert_subset(a, b)
    else:
        assert _normal(sent) == _normal(got)


CASES = [(key, v) for key, s in sorted(MESSAGES.items()) for v in range(s.min_version, s.max_version + 1)]


def _round_trip(api_key: int, v: int, data: st.DataObject) -> None:
    spec = MESSAGES[api_key]
    req = data.draw(_struct(spec.request.fields, v), label="request")
    frame = encode_request(api_key, v, 17, "client-1", req)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, pos = decode_request_header(memoryview(frame)[4:])
    # ControlledShutdown v0 alone has request header v0, which carries no client id
    client_id = None if header.header_version == 0 else "client-1"
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        api_key, v, 17, client_id)
    body, end = decode_request_body(api_key, v, memoryview(frame)[4:], pos)
    assert end == len(frame) - 4
    _assert_subset(req, body)
    assert encode_request(api_key, v, 17, "client-1", _normal(body)) == frame

    resp = data.draw(_struct(spec.response.fields, v), label="response")
    chunks = encode_response(api_key, v, 99, resp)
    assert all(isinstance(c, bytes) for c in chunks) and len(chunks) == 1
    raw = chunks[0]
    assert int.from_bytes(raw[:4], "big") == len(raw) - 4
    corr, got = decode_response(api_key, v, raw[4:])
    assert corr == 99
    _assert_subset(resp, got)
    assert encode_response(api_key, v, 99, _normal(got)) == chunks


@pytest.mark.parametrize("api_key", sorted(MESSAGES), ids=lambda k: ApiKey(k).name)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_request_and_response_round_trip(api_key: int, data: st.DataObject) -> None:
    spec = MESSAGES[api_key]
    v = data.draw(st.integers(spec.min_version, spec.max_version), label="version")
    _round_trip(api_key, v, data)


CLUSTER_APIS = (
    ApiKey.LEADER_AND_ISR,
    ApiKey.STOP_REPLICA,
    ApiKey.UPDATE_METADATA,
    ApiKey.CONTROLLED_SHUTDOWN,
    ApiKey.ALTER_PARTITION,
    ApiKey.ELECT_LEADERS,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    ApiKey.LIST_PARTITION_REASSIGNMENTS,
    ApiKey.ALTER_REPLICA_LOG_DIRS,
    ApiKey.DESCRIBE_LOG_DIRS,
)
CLUSTER_CASES = [(key, v) for key in CLUSTER_APIS for v in range(MESSAGES[key].min_version,
                                                                  MESSAGES[key].max_version + 1)]


@pytest.mark.parametrize(("api_key", "version"), CLUSTER_CASES, ids=lambda x: str(x))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_controller_and_replication_messages_round_trip_at_every_version(
    api_key: int, version: int, data: st.DataObject
) -> None:
    _round_trip(api_key, version, data)


@pytest.mark.parametrize(("api_key", "version"), CASES)
def test_empty_bodies_take_defaults(api_key: int, version: int) -> None:
    """Every version encodes ``{}`` (all defaults) and decodes it back to the same bytes."""
    frame = encode_request(api_key, version, 1, None, {})
    header, pos = decode_request_header(frame[4:])
    assert header.client_id is None
    body = decode_request(api_key, version, frame[4:], pos)
    assert encode_request(api_key, version, 1, None, _normal(body)) == frame
    chunks = encode_response(api_key, version, 1, {})
    assert decode_response(api_key, version, chunks[0][4:])[0] == 1


@pytest.mark.parametrize("name", sorted(DATA))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_data_messages_round_trip(name: str, data: st.DataObject) -> None:
    msg: Message = DATA[name]
    v = data.draw(st.integers(msg.versions.low, msg.versions.high))
    body = data.draw(_struct(msg.fields, v))
    raw = encode_data(name, v, body)
    _assert_subset(body, decode_data(name, v, raw))
    version, got = decode_versioned(name, encode_versioned(name, v, body))
    assert version == v
    _assert_subset(body, got)


def test_api_versions_response_uses_header_v0_and_omits_default_tags() -> None:
    body = {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 9}],
            "throttle_time_ms": 0, "finalized_features_epoch": -1, "zk_migration_ready": False}
    raw = encode_response(ApiKey.API_VERSIONS, 3, 5, body)[0]
    # size, correlation id, then directly the error code: no header tagged-field byte
    assert raw[4:8] == (5).to_bytes(4, "big") and raw[8:10] == b"\x00\x00"
    # the body ends with an empty tagged-field section: default-valued tags are not written
    assert raw[-1:] == b"\x00"
    with_tag = encode_response(ApiKey.API_VERSIONS, 3, 5, {**body, "finalized_features_epoch": 7})[0]
    assert len(with_tag) > len(raw)
    assert decode_response(ApiKey.API_VERSIONS, 3, with_tag[4:])[1]["finalized_features_epoch"] == 7


def test_fetch_response_with_file_regions() -> None:
    region = FileRegion(fd=7, position=100, length=1 << 20)
    tail = FileRegion(fd=7, position=200, length=50)
    body = {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "high_watermark": 5, "records": region},
        {"partition_index": 1, "high_watermark": 5, "records": [region, tail]},
        {"partition_index": 2, "high_watermark": 5, "records": b"abc"},
    ]}]}
    for version in (11, 12, 16):
        if version >= 13:
            body["responses"][0]["topic_id"] = b"\x01" * 16
        chunks = encode_response(ApiKey.FETCH, version, 3, body)
        assert [type(c) for c in chunks] == [bytes, FileRegion, bytes, FileRegion, FileRegion, bytes]
        total = sum(c.length if isinstance(c, FileRegion) else len(c) for c in chunks)
        assert int.from_bytes(chunks[0][:4], "big") == total - 4


def test_encode_errors_are_clear() -> None:
    with pytest.raises(ProtocolEncodeError, match="Name"):
        encode_request(ApiKey.METADATA, 4, 1, None, {"topics": [{"name": None}]})
    with pytest.raises(ProtocolEncodeError):
        encode_response(ApiKey.METADATA, 4, 1, {"throttle_time_ms": "soon"})
    with pytest.raises(ProtocolEncodeError):
        encode_response(ApiKey.HEARTBEAT, 1, 1, {"error_code": 1 << 20})
