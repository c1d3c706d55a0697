"""Decode request bytes captured from real clients (see capture_fixtures.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rill.protocol import ApiKey, decode_request_body, decode_request_header, encode_request
from rill.records.record import decode_batch_records

FIXTURES = Path(__file__).parent / "fixtures"
FILES = sorted(FIXTURES.glob("*.bin"))


def test_fixtures_present() -> None:
    clients = {p.name.split("_")[0] for p in FILES}
    assert clients == {"confluent", "kafkapython", "aiokafka"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_decode_captured_request(path: Path) -> None:
    frame = memoryview(path.read_bytes())
    client, version = path.stem.split("_")[0], int(path.stem.rsplit("_v", 1)[1])
    header, pos = decode_request_header(frame)
    assert header.api_version == version
    assert ApiKey(header.api_key).name.lower() in path.stem
    body, end = decode_request_body(header.api_key, header.api_version, frame, pos)
    assert end == len(frame), "the declaration consumed exactly the client's bytes"
    if client != "aiokafka" or header.api_key != ApiKey.API_VERSIONS:
        assert header.client_id is not None and "fixture" in header.client_id
    # re-encoding the decoded body gives the client's bytes back
    again = encode_request(header.api_key, header.api_version, header.correlation_id, header.client_id, body)
    assert again[4:] == bytes(frame)
    if header.api_key == ApiKey.PRODUCE:
        (topic,) = body["topic_data"]
        assert topic["name"] == "fixture-topic"
        (part,) = topic["partition_data"]
        records = part["records"]
        assert isinstance(records, memoryview) and records.obj is frame.obj  # a view, not a copy
        (rec,) = decode_batch_records(records)
        assert (rec.key, rec.value, rec.timestamp) == (b"fixture-key", b"fixture-value", 1700000000000)
        assert rec.headers == [("h1", b"v1")]
    if header.api_key == ApiKey.API_VERSIONS and version >= 3:
        assert body["client_software_name"]
