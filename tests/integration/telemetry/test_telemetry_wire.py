"""GetTelemetrySubscriptions and PushTelemetry on the wire, against a broker whose client metrics clock the test
moves (so the push interval's pacing is exact): Kafka's error codes for every refused push, each refusal changing
nothing, and the pushed metrics on the Prometheus endpoint, bounded per client and gone once the client expires."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import zstandard
from tests.integration.broker._wire import Wire
from tests.integration.telemetry._telemetry import (
    ZERO,
    alter,
    free_port,
    get_subscriptions,
    payload,
    push,
    pushed,
    scrape,
)

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey

pytestmark = pytest.mark.timeout(120)


@dataclass
class Setup:
    wire: Wire
    metrics_port: int
    clock: list[float]

    def advance(self, ms: float) -> None:
        self.clock[0] += ms


@pytest.fixture
def tel() -> Iterator[Setup]:
    port = free_port()
    with rill.testing.broker({"metrics.port": str(port), "telemetry.max.series.per.client": "3",
                              "telemetry.max.bytes": "4096"}) as b:  # fmt: skip
        clock = [1e9]
        b.broker.services.client_metrics.pushed.clock_ms = lambda: clock[0]
        wire = Wire(b.bootstrap_servers)
        try:
            yield Setup(wire, port, clock)
        finally:
            wire.close()


def test_without_a_subscription_nothing_is_asked_for(tel: Setup) -> None:
    r = get_subscriptions(tel.wire)
    assert r["error_code"] == 0
    assert r["client_instance_id"] not in (ZERO, uuid.UUID(int=1))
    assert r["requested_metrics"] == []
    assert r["push_interval_ms"] == 300000
    assert r["accepted_compression_types"] == [4, 3, 1, 2]
    assert r["telemetry_max_bytes"] == 4096
    assert r["delta_temporality"] is True
    # Asked again within the interval: throttled; after it: answered with the same subscription id.
    again = get_subscriptions(tel.wire, r["client_instance_id"])
    assert again["error_code"] == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    tel.advance(300000)
    later = get_subscriptions(tel.wire, r["client_instance_id"])
    assert (later["error_code"], later["subscription_id"]) == (0, r["subscription_id"])


def test_pushes_paced_checked_and_exported(tel: Setup) -> None:
    assert alter(tel.wire, "all", {"metrics": "*", "interval.ms": "1000"}) == (0, "")
    sub = get_subscriptions(tel.wire)
    instance, sid = sub["client_instance_id"], sub["subscription_id"]
    assert (sub["requested_metrics"], sub["push_interval_ms"]) == (["*"], 1000)
    ok = payload(gauges={"org.apache.kafka.producer.record.queue.time.avg": 2.5},
                 counters={"org.apache.kafka.producer.connection.creation.total": 3},
                 attributes={"node.id": "0"})  # fmt: skip
    before = scrape(tel.metrics_port)
    # Refused pushes, each changing nothing (the first push after the GET would be taken).
    assert push(tel.wire, ZERO, sid, ok) == ErrorCode.INVALID_REQUEST
    assert push(tel.wire, uuid.UUID(int=1), sid, ok) == ErrorCode.INVALID_REQUEST
    assert push(tel.wire, instance, sid + 1, ok) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    assert push(tel.wire, instance, sid, ok, compression=9) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert push(tel.wire, instance, sid, b"\x00" * 5000) == ErrorCode.TELEMETRY_TOO_LARGE
    assert push(tel.wire, instance, sid, b"\xff\xff\xff") == ErrorCode.INVALID_RECORD
    assert push(tel.wire, instance, sid, ok, compression=4) == ErrorCode.INVALID_RECORD  # not zstd data
    bomb = zstandard.ZstdCompressor().compress(b"\x00" * 100_000)
    assert push(tel.wire, instance, sid, bomb, compression=4) == ErrorCode.TELEMETRY_TOO_LARGE
    assert pushed(scrape(tel.metrics_port)) == pushed(before) == {}
    # The first good push is taken and exported: gauges as they are, delta counters added up.
    assert push(tel.wire, instance, sid, zstandard.ZstdCompressor().compress(ok), compression=4) == 0
    labels = (("client_instance_id", str(instance)), ("node_id", "0"))
    s = pushed(scrape(tel.metrics_port))
    assert s == {("org_apache_kafka_producer_record_queue_time_avg", labels): 2.5,
                 ("org_apache_kafka_producer_connection_creation_total", labels): 3.0}  # fmt: skip
    # Too soon: throttled, and not counted.
    tel.advance(999)
    assert push(tel.wire, instance, sid, ok) == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert pushed(scrape(tel.metrics_port)) == s
    tel.advance(1)
    assert push(tel.wire, instance, sid, ok) == 0
    assert pushed(scrape(tel.metrics_port))[("org_apache_kafka_producer_connection_creation_total", labels)] == 6.0
    # A terminating push is taken at once; nothing after it is.
    assert push(tel.wire, instance, sid, b"", terminating=True) == 0
    tel.advance(5000)
    assert push(tel.wire, instance, sid, ok) == ErrorCode.INVALID_REQUEST


def test_a_changed_subscription_is_a_new_subscription_id(tel: Setup) -> None:
    assert alter(tel.wire, "p", {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000"})[0] == 0
    sub = get_subscriptions(tel.wire)
    instance = sub["client_instance_id"]
    assert alter(tel.wire, "c", {"metrics": "org.apache.kafka.consumer.", "interval.ms": "500"})[0] == 0
    assert push(tel.wire, instance, sub["subscription_id"], payload()) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    again = get_subscriptions(tel.wire, instance)  # not throttled after UNKNOWN_SUBSCRIPTION_ID
    assert again["error_code"] == 0
    assert again["requested_metrics"] == ["org.apache.kafka.consumer.", "org.apache.kafka.producer."]
    assert again["push_interval_ms"] == 500
    assert again["subscription_id"] != sub["subscription_id"]
    assert push(tel.wire, instance, again["subscription_id"], payload()) == 0


def test_match_selects_clients(tel: Setup) -> None:
    assert alter(tel.wire, "java", {"metrics": "*", "match": "client_software_name=apache-kafka-java"})[0] == 0
    mine = {"metrics": "x.", "match": "client_id=wire-.*,client_source_address=127\\.0\\.0\\.1"}
    assert alter(tel.wire, "mine", mine)[0] == 0
    sub = get_subscriptions(tel.wire)  # client id "wire-test", no ApiVersions v3: no software name
    assert sub["requested_metrics"] == ["x."]


def test_series_per_client_are_bounded_and_expire(tel: Setup) -> None:
    assert alter(tel.wire, "all", {"metrics": "*", "interval.ms": "100"})[0] == 0
    sub = get_subscriptions(tel.wire)
    instance, sid = sub["client_instance_id"], sub["subscription_id"]
    many = payload(gauges={f"org.apache.kafka.m{i}": float(i) for i in range(5)})
    assert push(tel.wire, instance, sid, many) == 0
    assert len(pushed(scrape(tel.metrics_port))) == 3  # telemetry.max.series.per.client
    # The broker's own names cannot be pushed over.
    tel.advance(100)
    own = payload(gauges={"kafka.server.client.metrics.instance.count": 99.0})
    assert push(tel.wire, instance, sid, own) == 0
    assert scrape(tel.metrics_port)[("kafka_server_client_metrics_instance_count", ())] == 1
    # Not heard from for a minute (three intervals, at least 60 s): the instance and its series go.
    tel.advance(60_000)
    assert pushed(scrape(tel.metrics_port)) == {}
    other = get_subscriptions(tel.wire)
    assert other["error_code"] == 0
    assert scrape(tel.metrics_port)[("kafka_server_client_metrics_instance_count", ())] == 1


def test_a_regex_cannot_make_a_client_s_value_hold_the_broker(tel: Setup) -> None:
    """A subscription's regexes are matched against values the client chooses: with a backtracking engine,
    `(a+)+` against forty a's and a bang takes about 2**40 steps on the event loop. RE2 (as Kafka's RE2/J)
    matches in linear time."""
    from rill.protocol import ApiKey, decode_response, encode_request

    assert alter(tel.wire, "nested", {"metrics": "x.", "match": "client_id=(a+)+"})[0] == 0
    client_id = "a" * 40 + "!"
    tel.wire.send_raw(encode_request(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, 99, client_id,
                                     {"client_instance_id": ZERO}))  # fmt: skip
    corr, answer = decode_response(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, tel.wire.read_frame())
    assert corr == 99
    assert answer["error_code"] == 0 and answer["requested_metrics"] == [], answer
    assert get_subscriptions(tel.wire)["error_code"] == 0  # and the broker goes on serving


@pytest.mark.parametrize("name, version", [("bad name", "1.0"), ("librdkafka", "1.0+x"), ("", "1"), ("-a", "1")])
def test_api_versions_refuses_a_software_name_or_version_kafka_refuses(tel: Setup, name: str, version: str) -> None:
    """ApiVersions v3+ carries the client's software name and version, which client metrics subscriptions match
    and keep: Kafka takes letters, digits, '.' and '-' (a letter or digit first and last), else INVALID_REQUEST."""
    refused = tel.wire.call(ApiKey.API_VERSIONS, 3, {"client_software_name": name, "client_software_version": version})
    assert refused["error_code"] == ErrorCode.INVALID_REQUEST
    taken = tel.wire.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "a", "client_software_version": "1.2-b.3"})
    assert taken["error_code"] == 0 and taken["api_keys"]
