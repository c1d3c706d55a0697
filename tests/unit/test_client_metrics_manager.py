"""Properties of the client metrics manager (KIP-714), driven without sockets: the subscription id is the same on
every broker for the same subscriptions, whatever order they were set in; a refused push changes nothing; pushes
are paced by the interval."""

from __future__ import annotations

import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    Gauge,
    Histogram,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)
from tests.integration.telemetry._telemetry import payload

from rill.errors import ErrorCode, KafkaError
from rill.telemetry.client_metrics_manager import MAX_INSTANCE_CHARS, ClientInfo, ClientMetricsManager
from rill.telemetry.pushed_metrics import GAUGE, MAX_LABELS, Point, PushedMetrics, decode_payload

CLIENT = ClientInfo("app-1", "librdkafka", "2.16.0", "127.0.0.1", 40000)
prefixes = st.sampled_from(["*", "org.apache.kafka.producer.", "org.apache.kafka.consumer.", "x."])
subscription = st.fixed_dictionaries({
    "metrics": st.lists(prefixes, unique=True, max_size=3).map(",".join),
    "interval.ms": st.integers(100, 3_600_000).map(str),
    "match": st.sampled_from(["", "client_id=app-.*", "client_software_name=java", "client_source_port=4.*"]),
})  # fmt: skip


def _manager(subs: dict[str, dict[str, str]], clock: list[float]) -> ClientMetricsManager:
    pushed = PushedMetrics(100, clock_ms=lambda: clock[0])
    manager = ClientMetricsManager(lambda: subs, 4096, pushed)
    manager.exporting = True
    return manager


@settings(max_examples=100, deadline=None)
@given(subs=st.dictionaries(st.sampled_from("abcde"), subscription, max_size=4), instance=st.uuids())
def test_the_subscription_id_is_the_same_on_every_broker(subs: dict[str, dict[str, str]], instance: uuid.UUID) -> None:
    reordered = dict(reversed(list(subs.items())))
    answers = [_manager(s, [1e9]).get_subscriptions(instance, CLIENT) for s in (subs, reordered)]
    assert answers[0] == answers[1]
    assert answers[0]["error_code"] == 0


push_case = st.fixed_dictionaries({
    "advance": st.sampled_from([0, 50, 100, 1000]),
    "right_id": st.booleans(),
    "compression": st.sampled_from([0, 0, 0, 9]),
    "metrics": st.sampled_from([payload(gauges={"org.g": 1.0}), payload(counters={"org.c": 2}), b"\xff\x00", b""]),
    "terminating": st.sampled_from([False, False, False, True]),
})  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(pushes=st.lists(push_case, min_size=1, max_size=12))
def test_refused_pushes_change_nothing_and_pushes_are_paced(pushes: list[dict[str, object]]) -> None:
    clock = [1e9]
    manager = _manager({"all": {"metrics": "*", "interval.ms": "100"}}, clock)
    sub = manager.get_subscriptions(uuid.UUID(int=0), CLIENT)
    instance, sid = sub["client_instance_id"], sub["subscription_id"]
    last_taken: float | None = None
    terminated = False
    for p in pushes:
        clock[0] += float(p["advance"])  # type: ignore[arg-type]
        before = {k: dict(v.values) for k, v in manager.pushed.clients.items()}
        request = {"client_instance_id": instance, "subscription_id": sid if p["right_id"] else sid + 1,
                   "terminating": p["terminating"], "compression_type": p["compression"],
                   "metrics": p["metrics"]}  # fmt: skip
        code = manager.push(request, CLIENT)
        if code != 0:
            assert {k: dict(v.values) for k, v in manager.pushed.clients.items()} == before
        if terminated:
            assert code == ErrorCode.INVALID_REQUEST
        elif last_taken is not None and clock[0] - last_taken < 100 and not p["terminating"]:
            assert code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        if code == 0:
            last_taken = clock[0]
            terminated = bool(p["terminating"])


def test_every_clients_series_together_are_bounded() -> None:
    pushed = PushedMetrics(2, clock_ms=lambda: 0.0)
    points = [Point(f"m{i}", GAUGE, (), 1.0, False) for i in range(3)]
    for client in range(60):
        pushed.record(f"c{client}", points, 1.0)
    assert sum(len(c.values) for c in pushed.clients.values()) == pushed.total == 100  # 50 clients' worth
    assert pushed.clients["c0"].dropped == 1 and pushed.clients["c59"].dropped == 3
    pushed.forget("c0")
    assert pushed.total == 98


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(st.binary(max_size=200),
                      st.lists(st.sampled_from([payload(gauges={"a.b": 1.0}), payload(counters={"c": 1})]),
                               min_size=1, max_size=3).map(b"".join),
                      st.binary(max_size=50).map(lambda b: payload(gauges={"x": 1.0}) + b)),
       compression=st.sampled_from([0, 1, 2, 3, 4]))  # fmt: skip
def test_any_payload_is_decoded_or_refused_as_invalid_record(data: bytes, compression: int) -> None:
    try:
        points = decode_payload(compression, data, 4096)
    except KafkaError as e:
        assert e.code in (ErrorCode.INVALID_RECORD, ErrorCode.TELEMETRY_TOO_LARGE)
    else:
        assert all(p.name and not p.name.startswith(("kafka_", "rill_")) for p in points)


def test_a_push_is_looked_at_up_to_the_series_cap() -> None:
    many = payload(gauges={f"m{i}": float(i) for i in range(5000)})
    assert len(decode_payload(0, many, 1 << 20, 1000)) == 1000


def _metrics_data(scopes: list[ScopeMetrics]) -> bytes:
    return bytes(MetricsData(resource_metrics=[ResourceMetrics(scope_metrics=scopes)]).SerializeToString())


def test_what_a_push_carries_without_points_counts_toward_the_cap() -> None:
    """Empty metrics, histograms and empty scopes yield no point, yet each takes a loop step: a 117-byte zstd push
    of 200,000 empty metrics held the event loop for 0.3 s. They count toward the cap like points."""
    gauge = Metric(name="g", gauge=Gauge(data_points=[NumberDataPoint(as_double=1.0)]))
    empty = [Metric(name="e") for _ in range(2500)]
    histograms = [Metric(name="h", histogram=Histogram()) for _ in range(2500)]
    scopes = [ScopeMetrics() for _ in range(2500)]
    for filler in ([ScopeMetrics(metrics=[*empty, gauge])], [ScopeMetrics(metrics=[*histograms, gauge])],
                   [*scopes, ScopeMetrics(metrics=[gauge])]):  # fmt: skip
        assert decode_payload(0, _metrics_data(filler), 1 << 20, 500) == []
        assert len(decode_payload(0, _metrics_data(filler), 1 << 20, 1000)) == 1


@pytest.mark.timing
def test_a_points_attributes_past_the_label_cap_are_not_looked_at() -> None:
    """A point carrying thousands of attributes costs what one with sixteen does (only sixteen become labels):
    before, every attribute was read, 0.2 s for a 400 KB push."""
    few = [KeyValue(key=f"k{i}") for i in range(MAX_LABELS)]
    many = few + [KeyValue(key="") for _ in range(2000)]

    def took(attrs: list[KeyValue]) -> float:
        points = [NumberDataPoint(as_double=1.0, attributes=attrs) for _ in range(100)]
        data = _metrics_data([ScopeMetrics(metrics=[Metric(name="g", gauge=Gauge(data_points=points))])])
        started = time.perf_counter()
        assert len(decode_payload(0, data, 1 << 22, 1000)) == 100
        return time.perf_counter() - started

    base = min(took(few) for _ in range(3))
    assert min(took(many) for _ in range(3)) < 10 * base + 0.01


def test_the_instances_held_are_bounded_in_bytes() -> None:
    """An instance outlives its connection and keeps what its client chose (a 32 KB client id, an ApiVersions
    software name as long as a request may be): 16384 of them could hold gigabytes. What they keep together is
    bounded; the least recently heard from goes first."""
    manager = _manager({}, [1e9])
    big = ClientInfo("x" * 32_000, "librdkafka", "2.16.0", "127.0.0.1", 40000)
    for _ in range(2000):
        assert manager.get_subscriptions(uuid.UUID(int=0), big)["error_code"] == 0
    held = sum(len(v) for i in manager.instances.values() for v in i.attributes.values())
    assert 0 < held <= MAX_INSTANCE_CHARS
    assert manager.held_chars == held
    last = next(reversed(manager.instances))
    assert manager.get_subscriptions(last, CLIENT)["error_code"] == ErrorCode.THROTTLING_QUOTA_EXCEEDED  # kept
