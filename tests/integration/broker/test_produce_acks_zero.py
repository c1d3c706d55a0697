"""A Produce with acks=0 gets no response, so an error in it cannot reach the producer that way: as
Kafka does, the broker closes the connection, and the producer refreshes its metadata and reconnects.
A Produce with acks=0 that succeeds leaves the connection open and answers nothing."""

from __future__ import annotations

import pytest
from tests.integration.broker._wire import Wire

from rill.protocol import ApiKey, encode_request
from rill.records.builder import build_batch
from rill.records.record import Record

pytestmark = pytest.mark.timeout(60)


def _send_acks0(w: Wire, topic: str, records: bytes, index: int = 0) -> None:
    body = {
        "transactional_id": None,
        "acks": 0,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": index, "records": records}]}],
    }
    w.send_raw(encode_request(ApiKey.PRODUCE, 9, 1000, "acks0-test", body))  # no response comes


def _topic(w: Wire, name: str, configs: dict[str, str] | None = None) -> None:
    topics = [
        {
            "name": name,
            "num_partitions": 1,
            "replication_factor": 1,
            "assignments": [],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
        }
    ]
    resp = w.call(ApiKey.CREATE_TOPICS, 5, {"topics": topics, "timeout_ms": 5000, "validate_only": False})
    assert resp["topics"][0]["error_code"] == 0


def _still_open(w: Wire) -> bool:
    body = {
        "topics": [],
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    return bool(w.call(ApiKey.METADATA, 9, body)["brokers"])


GOOD = build_batch([Record(0, 1_700_000_000_000, b"k", b"v", [])])


@pytest.mark.parametrize(
    "case",
    ["unknown topic", "unknown partition", "corrupt batch", "keyless record on a compacted topic"],
)
def test_a_failed_acks0_produce_closes_the_connection(rill_broker, case: str) -> None:
    setup = Wire(rill_broker.bootstrap_servers)
    _topic(setup, "open")
    _topic(setup, "compacted", {"cleanup.policy": "compact"})
    setup.close()
    w = Wire(rill_broker.bootstrap_servers)
    try:
        _send_acks0(w, "open", GOOD)  # taken: no answer, the connection stays open
        assert _still_open(w)
        if case == "unknown topic":
            _send_acks0(w, "no-such-topic", GOOD)
        elif case == "unknown partition":
            _send_acks0(w, "open", GOOD, index=7)
        elif case == "corrupt batch":
            _send_acks0(w, "open", GOOD[:-1] + bytes([GOOD[-1] ^ 1]))  # fails its CRC
        else:
            _send_acks0(w, "compacted", build_batch([Record(0, 1_700_000_000_000, None, b"v", [])]))
        assert w.is_closed_by_peer(timeout=10)
    finally:
        w.close()
