"""Every API and version the broker advertises, sent with every nullable field null (once more with
unknown topic ids, and once with no field null): the broker answers each, and never fails to encode
its answer (a response field that cannot be null, filled from a request field that can). Metadata v10
and v11, whose topic name may be null in the request but not in the response, are answered as
Kafka answers them: INVALID_REQUEST for every topic named."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from tests.integration.broker._wire import Wire

from rill.errors import ErrorCode
from rill.protocol import MESSAGES, ApiKey, decode_response, encode_request
from rill.protocol.schema import Field

pytestmark = pytest.mark.timeout(180)

_SCALARS: dict[str, Any] = {
    "bool": False,
    "int8": 0,
    "int16": 0,
    "uint16": 0,
    "int32": 0,
    "uint32": 0,
    "int64": 0,
    "float64": 0.0,
    "uuid": uuid.UUID(int=0),
    "string": "probe",
    "bytes": b"",
    "records": b"",
}


def _scalar(type_: str, ids: bool) -> Any:
    return uuid.uuid4() if ids and type_ == "uuid" else _SCALARS[type_]


def _value(f: Field, version: int, nulls: bool, ids: bool) -> Any:
    if nulls and f.is_nullable(version):
        return None
    if f.is_array:
        element = _body(f.fields, version, nulls, ids) if f.fields else _scalar(f.element_type, ids)
        return [element]
    if f.fields:
        return _body(f.fields, version, nulls, ids)
    return _scalar(f.type, ids)


def _body(fields: tuple[Field, ...], version: int, nulls: bool, ids: bool = False) -> dict[str, Any]:
    """A request body with every field present at ``version``: nullable ones null when ``nulls``,
    topic ids unknown ones (random) when ``ids``, else zero."""
    return {f.key: _value(f, version, nulls, ids) for f in fields if version in f.versions}


def _exchange(bootstrap: str, api_key: int, version: int, body: dict[str, Any]) -> str:
    """"answered", "closed" or "silent" (nothing within 3 s)."""
    w = Wire(bootstrap, timeout=3.0)
    try:
        w.send_raw(encode_request(api_key, version, 7, "null-probe", body))
        try:
            frame = w.read_frame()
        except ConnectionError:
            return "closed"
        except TimeoutError:
            return "silent"
        corr, _ = decode_response(api_key, version, frame)
        assert corr == 7
        return "answered"
    finally:
        w.close()


def test_nullable_request_fields_never_break_a_response(rill_broker, caplog: pytest.LogCaptureFixture) -> None:
    bootstrap = rill_broker.bootstrap_servers
    w = Wire(bootstrap)
    table = w.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "p", "client_software_version": "1"})["api_keys"]
    w.close()
    outcomes: dict[tuple[str, int, bool, bool], str] = {}
    with caplog.at_level(logging.ERROR):
        for entry in table:
            spec = MESSAGES[entry["api_key"]]
            for version in range(entry["min_version"], entry["max_version"] + 1):
                for nulls, ids in ((True, False), (False, False), (True, True)):
                    body = _body(spec.request.fields, version, nulls, ids)
                    if spec.api_key == ApiKey.PRODUCE:
                        body["acks"] = 1  # acks=0 would answer nothing
                    outcomes[(spec.name, version, nulls, ids)] = _exchange(bootstrap, spec.api_key, version, body)
    failures = [r.getMessage() for r in caplog.records if "request handler failed" in r.getMessage()]
    assert failures == [], failures
    assert [k for k, v in outcomes.items() if v != "answered"] == []
    assert outcomes[("Metadata", 10, True, False)] == outcomes[("Metadata", 11, True, True)] == "answered"


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_v11_by_id_is_an_invalid_request(rill_broker, version: int) -> None:
    w = Wire(rill_broker.bootstrap_servers)
    try:
        some_id = uuid.uuid4()
        body = {
            "topics": [{"name": None, "topic_id": some_id}, {"name": "named", "topic_id": uuid.UUID(int=0)}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        resp = w.call(ApiKey.METADATA, version, body)
        assert [(t["error_code"], t["name"], t["topic_id"]) for t in resp["topics"]] == [
            (ErrorCode.INVALID_REQUEST, "", some_id),
            (ErrorCode.INVALID_REQUEST, "named", uuid.UUID(int=0)),
        ]
        # a name with an id beside it is refused the same way; names alone are answered
        body["topics"] = [{"name": "named", "topic_id": some_id}]
        assert w.call(ApiKey.METADATA, version, body)["topics"][0]["error_code"] == ErrorCode.INVALID_REQUEST
        body["topics"] = [{"name": "named", "topic_id": uuid.UUID(int=0)}]
        assert w.call(ApiKey.METADATA, version, body)["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # v12 looks the id up: unknown, with the null name the v12 response allows
        body["topics"] = [{"name": None, "topic_id": some_id}]
        topic = w.call(ApiKey.METADATA, 12, body)["topics"][0]
        assert (topic["error_code"], topic["name"]) == (ErrorCode.UNKNOWN_TOPIC_ID, None)
    finally:
        w.close()


