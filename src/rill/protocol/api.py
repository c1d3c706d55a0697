"""The codec's public entry points: API keys, message specs, headers, and whole-frame encode/decode.

Frames on the wire (all sizes big-endian)::

    request   int32 size | request header | request body
    response  int32 size | response header | response body

    request header v0   int16 api_key, int16 api_version, int32 correlation_id
    request header v1   v0 + client_id (nullable string, always the classic int16-length form)
    request header v2   v1 + tagged fields
    response header v0  int32 correlation_id
    response header v1  v0 + tagged fields

Requests use header v2 in their flexible versions and v1 otherwise (ControlledShutdown v0 uses v0);
responses use v1 in flexible versions and v0 otherwise, except ApiVersions responses, which always use v0
so that a client can read the error whatever version it asked for.

The frames passed to the decoders are the bytes after the size prefix; the encoders include the prefix.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from rill.common import FileRegion
from rill.protocol import primitives as P
from rill.protocol.compiler import Decoder, Encoder, compile_decoder, compile_encoder
from rill.protocol.errors import ProtocolDecodeError, ProtocolEncodeError, UnsupportedVersionError
from rill.protocol.messages import API_MESSAGES, DATA_MESSAGES
from rill.protocol.schema import Message


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    CONTROLLER_REGISTRATION = 70
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    ASSIGN_REPLICAS_TO_DIRS = 73
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    UPDATE_RAFT_VOTER = 82
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    STREAMS_GROUP_HEARTBEAT = 88
    STREAMS_GROUP_DESCRIBE = 89
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


@dataclass(frozen=True, slots=True)
class MessageSpec:
    """One API as the codec declares it: its key, version range and both message declarations."""

    api_key: int
    name: str
    min_version: int
    max_version: int
    flexible_min_version: int | None
    request: Message
    response: Message

    def is_flexible(self, version: int) -> bool:
        return self.flexible_min_version is not None and version >= self.flexible_min_version


def _spec(request: Message, response: Message) -> MessageSpec:
    assert request.api_key is not None and request.api_key == response.api_key
    assert request.versions == response.versions and request.flexible == response.flexible
    return MessageSpec(
        api_key=request.api_key,
        name=request.name.removesuffix("Request"),
        min_version=request.versions.low,
        max_version=request.versions.high,
        flexible_min_version=request.flexible.low if request.flexible is not None else None,
        request=request,
        response=response,
    )


MESSAGES: dict[int, MessageSpec] = {s.api_key: s for s in (_spec(q, r) for q, r in API_MESSAGES)}
DATA: dict[str, Message] = {m.name: m for m in DATA_MESSAGES}


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int


_CONTROLLED_SHUTDOWN = int(ApiKey.CONTROLLED_SHUTDOWN)


def request_header_version(api_key: int, version: int) -> int:
    """Header v2 for flexible versions (also for versions newer than declared, when the API is flexible);
    ControlledShutdown v0 alone uses header v0 (no client id)."""
    if api_key == _CONTROLLED_SHUTDOWN and version == 0:
        return 0
    spec = MESSAGES.get(api_key)
    if spec is not None:
        return 2 if spec.is_flexible(version) else 1
    return 1


def response_header_version(api_key: int, version: int) -> int:
    if api_key == ApiKey.API_VERSIONS:
        return 0
    spec = MESSAGES.get(api_key)
    return 1 if spec is not None and spec.is_flexible(version) else 0


_HEADER = struct.Struct(">hhi")
_HEADER_CLIENT = struct.Struct(">hhih")
_SIZE = struct.Struct(">i")
_SIZE_CORR = struct.Struct(">ii")

_decoders: dict[tuple[int, int, bool], Decoder] = {}
_encoders: dict[tuple[int, int, bool], Encoder] = {}


def _message(api_key: int, version: int, request: bool) -> Message:
    spec = MESSAGES.get(api_key)
    if spec is None:
        raise UnsupportedVersionError(f"unknown api key {api_key}", api_key=api_key, api_version=version)
    if not spec.min_version <= version <= spec.max_version:
        raise UnsupportedVersionError(
            f"{spec.name} v{version} is outside v{spec.min_version}-v{spec.max_version}",
            api_key=api_key,
            api_version=version,
        )
    return spec.request if request else spec.response


def decoder(api_key: int, version: int, request: bool) -> Decoder:
    key = (api_key, version, request)
    fn = _decoders.get(key)
    if fn is None:
        fn = _decoders[key] = compile_decoder(_message(api_key, version, request), version)
    return fn


def encoder(api_key: int, version: int, request: bool) -> Encoder:
    key = (api_key, version, request)
    fn = _encoders.get(key)
    if fn is None:
        fn = _encoders[key] = compile_encoder(_message(api_key, version, request), version)
    return fn


def _decode_body(fn: Decoder, buf: memoryview, pos: int, what: str) -> tuple[dict[str, Any], int]:
    try:
        return fn(buf, pos)
    except ProtocolDecodeError:
        raise
    except Exception as e:  # any malformed input surfaces as one exception type
        raise ProtocolDecodeError(f"malformed {what}: {type(e).__name__}: {e}") from None


def _encode_body(
    fn: Encoder, out: bytearray, chunks: list[Any], body: dict[str, Any], what: str
) -> bytearray:
    try:
        return fn(out, chunks, body)
    except ProtocolEncodeError:
        raise
    except Exception as e:
        raise ProtocolEncodeError(f"cannot encode {what}: {type(e).__name__}: {e}") from None


# -- server side --------------------------------------------------------------------------------------


def decode_request_header(frame: memoryview | bytes) -> tuple[RequestHeader, int]:
    """Parse the request header; returns it and the position of the body."""
    buf = frame if type(frame) is memoryview else memoryview(frame)
    if len(buf) < 10:
        raise ProtocolDecodeError(f"request frame of {len(buf)} bytes is shorter than a header")
    api_key, version, correlation_id, n = _HEADER_CLIENT.unpack_from(buf, 0)
    spec = MESSAGES.get(api_key)
    if spec is not None and api_key != _CONTROLLED_SHUTDOWN:
        hv = 2 if spec.flexible_min_version is not None and version >= spec.flexible_min_version else 1
    else:
        hv = request_header_version(api_key, version)
    if hv == 0:
        return RequestHeader(api_key, version, correlation_id, None, 0), 8
    pos = 10 + max(n, 0)
    try:
        if n < -1 or pos > len(buf):
            raise ProtocolDecodeError(f"client id length {n} is invalid")
        client_id = None if n < 0 else str(buf[10:pos], "utf-8")
        if hv >= 2:
            pos = P.skip_tagged_fields(buf, pos)
    except (ProtocolDecodeError, UnicodeDecodeError) as e:
        raise ProtocolDecodeError(
            f"malformed request header: {e}",
            api_key=api_key,
            api_version=version,
            correlation_id=correlation_id,
        ) from None
    return RequestHeader(api_key, version, correlation_id, client_id, hv), pos


def decode_request_body(
    api_key: int, version: int, frame: memoryview | bytes, pos: int
) -> tuple[dict[str, Any], int]:
    """Decode a request body starting at ``pos``; returns the body and the position after it."""
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    return _decode_body(decoder(api_key, version, True), buf, pos, f"request {api_key} v{version}")


def decode_request(api_key: int, version: int, frame: memoryview | bytes, pos: int) -> dict[str, Any]:
    """Decode a request body. Records fields are ``memoryview`` slices of ``frame`` (no copy).

    Bytes after the body are ignored, as Kafka does.
    """
    fn = _decoders.get((api_key, version, True)) or decoder(api_key, version, True)
    buf = frame if type(frame) is memoryview else memoryview(frame)
    try:
        return fn(buf, pos)[0]
    except ProtocolDecodeError:
        raise
    except Exception as e:  # any malformed input surfaces as one exception type
        what = f"request {api_key} v{version}"
        raise ProtocolDecodeError(f"malformed {what}: {type(e).__name__}: {e}") from None


def encode_response(
    api_key: int, version: int, correlation_id: int, body: dict[str, Any]
) -> list[bytes | FileRegion]:
    """Size prefix + response header + body, as chunks to write in order (regions via ``os.sendfile``)."""
    fn = encoder(api_key, version, False)
    out = bytearray(_SIZE_CORR.pack(0, correlation_id))
    if response_header_version(api_key, version) >= 1:
        out.append(0)
    chunks: list[Any] = []
    out = _encode_body(fn, out, chunks, body, f"response {api_key} v{version}")
    chunks.append(out)
    return _finish(chunks)


def _finish(chunks: list[Any]) -> list[bytes | FileRegion]:
    total = -4
    for c in chunks:
        total += c.length if type(c) is FileRegion else len(c)
    first = chunks[0]
    first[0:4] = _SIZE.pack(total)
    result: list[bytes | FileRegion] = []
    for c in chunks:
        if type(c) is FileRegion:
            if c.length:
                result.append(c)
        elif c:
            if result and type(result[-1]) is bytes:
                result[-1] += bytes(c)
            else:
                result.append(bytes(c))
    return result


# -- client side --------------------------------------------------------------------------------------


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str | None, body: dict[str, Any]
) -> bytes:
    """Size prefix + request header + body, ready to send."""
    fn = encoder(api_key, version, True)
    out = bytearray(_SIZE.pack(0))
    out += _HEADER.pack(api_key, version, correlation_id)
    hv = request_header_version(api_key, version)
    if hv >= 1:
        P.write_nullable_string(out, client_id)
    if hv >= 2:
        out.append(0)
    chunks: list[Any] = []
    out = _encode_body(fn, out, chunks, body, f"request {api_key} v{version}")
    if chunks:
        raise ProtocolEncodeError("file regions are not supported in requests")
    out[0:4] = _SIZE.pack(len(out) - 4)
    return bytes(out)


def decode_response(api_key: int, version: int, frame: memoryview | bytes) -> tuple[int, dict[str, Any]]:
    """Decode a response frame (without its size prefix): returns (correlation id, body)."""
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    if len(buf) < 4:
        raise ProtocolDecodeError("response frame shorter than its header")
    (correlation_id,) = P.INT32.unpack_from(buf, 0)
    pos = 4
    if response_header_version(api_key, version) >= 1:
        pos = P.skip_tagged_fields(buf, pos)
    body, _ = _decode_body(decoder(api_key, version, False), buf, pos, f"response {api_key} v{version}")
    return correlation_id, body


def decode_response_after_correlation_id(api_key: int, version: int, rest: memoryview | bytes) -> dict[str, Any]:
    """Decode a response from what follows its correlation id (for a client that read the id first, to know
    which request the frame answers before reading the rest of it): the body."""
    buf = rest if isinstance(rest, memoryview) else memoryview(rest)
    pos = P.skip_tagged_fields(buf, 0) if response_header_version(api_key, version) >= 1 else 0
    body, _ = _decode_body(decoder(api_key, version, False), buf, pos, f"response {api_key} v{version}")
    return body


# -- data payloads (consumer protocol, __consumer_offsets records) ----------------------------------


_data_codecs: dict[tuple[str, int], tuple[Decoder, Encoder]] = {}


def _data_codec(name: str, version: int) -> tuple[Decoder, Encoder]:
    key = (name, version)
    codec = _data_codecs.get(key)
    if codec is None:
        msg = DATA.get(name)
        if msg is None:
            raise ProtocolDecodeError(f"unknown data message {name}")
        if version not in msg.versions:
            raise UnsupportedVersionError(f"{name} v{version} is outside v{msg.versions}")
        codec = _data_codecs[key] = (compile_decoder(msg, version), compile_encoder(msg, version))
    return codec


def encode_data(name: str, version: int, body: dict[str, Any]) -> bytes:
    out = _encode_body(_data_codec(name, version)[1], bytearray(), [], body, f"{name} v{version}")
    return bytes(out)


def decode_data(name: str, version: int, buf: memoryview | bytes) -> dict[str, Any]:
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    return _decode_body(_data_codec(name, version)[0], view, 0, f"{name} v{version}")[0]


def encode_versioned(name: str, version: int, body: dict[str, Any]) -> bytes:
    """An int16 version followed by the payload, as the consumer protocol and internal records store it."""
    return P.INT16.pack(version) + encode_data(name, version, body)


def decode_versioned(name: str, buf: memoryview | bytes) -> tuple[int, dict[str, Any]]:
    """Read the int16 version and the payload; versions newer than declared are read as the newest one
    (newer versions only append fields), as Kafka's consumer protocol does."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    version, pos = P.read_int16(view, 0)
    msg = DATA.get(name)
    if msg is None:
        raise ProtocolDecodeError(f"unknown data message {name}")
    if version < msg.versions.low:
        raise UnsupportedVersionError(f"{name} v{version} is older than v{msg.versions.low}")
    use = min(version, msg.versions.high)
    body = _decode_body(_data_codec(name, use)[0], view[pos:], 0, f"{name} v{version}")[0]
    return version, body
