"""The metrics clients push (KIP-714), decoded and held for the broker's Prometheus endpoint.

A push carries OTLP ``MetricsData`` (opentelemetry-proto), compressed with one of Kafka's record codecs or not.
``decode_payload`` turns it into points, or refuses it whole: a payload that does not decompress or parse is
INVALID_RECORD, one that decompresses beyond ``telemetry.max.bytes`` TELEMETRY_TOO_LARGE. Gauges and sums are
kept (a monotonic sum as a counter: deltas, which the broker asks for, are added up; a cumulative value
replaces the last), histograms and summaries are skipped.

Each point becomes a series named as the OpenTelemetry Prometheus exporter names it (the metric's name with
every character other than a letter, digit or ``_`` replaced by ``_``: librdkafka's
``org.apache.kafka.producer.node.request.latency.avg`` becomes
``org_apache_kafka_producer_node_request_latency_avg``), labelled with the client's ``client_instance_id`` and
the point's attributes (``node.id`` becomes ``node_id``). Names in the broker's own namespaces (``kafka_``,
``rill_``) are skipped, so a client cannot shadow a broker metric. What one client makes the broker hold is
bounded: at most ``telemetry.max.series.per.client`` series (later new ones are dropped and counted), at most
16 labels of at most 256 characters each per series (longer names are skipped); a client's series go when its
instance expires. Every client's series together are bounded too, at 50 times the per-client cap (so instances
made on purpose, each cheap to ask for, cannot add up past it). A push is looked at up to that many points,
and four entries (resources, scopes, metrics, points) a point, a point's attributes up to the sixteenth, so none
holds the event loop long (about 13 us a point: 1.5 ms for librdkafka-sized pushes of 110 metrics).
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, MetricsData
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from rill.errors import ErrorCode, KafkaError
from rill.records.compression import decompress_chunks

log = logging.getLogger(__name__)

GAUGE, COUNTER = "gauge", "counter"
MAX_LABELS = 16
MAX_LABEL_CHARS = 256
TOTAL_SERIES_FACTOR = 50  # every client's series together: at most 50 clients' worth
RESERVED_PREFIXES = ("kafka_", "rill_")
STEPS_PER_POINT = 4  # entries a push is read up to, per point of the cap
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_]")
_DELTA = AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Point:
    name: str
    kind: str  # GAUGE or COUNTER
    labels: Labels
    value: float
    delta: bool  # a counter's increase since the last push (else its whole value)


@functools.lru_cache(maxsize=4096)
def prometheus_name(name: str) -> str:
    """The Prometheus form of a metric or attribute name; empty (skipped) when longer than 256 characters."""
    if len(name) > MAX_LABEL_CHARS:
        return ""
    out = _NOT_NAME.sub("_", name)
    return f"_{out}" if out[:1].isdigit() else out


def _text(value: AnyValue) -> str:
    kind = value.WhichOneof("value")
    if kind is None:
        return ""
    if kind == "string_value":
        return str(value.string_value)
    if kind in ("bool_value", "int_value", "double_value"):
        return str(getattr(value, kind)).lower() if kind == "bool_value" else str(getattr(value, kind))
    return kind  # arrays, maps and bytes are not label values


def _labels(attributes: Any) -> Labels:
    out: dict[str, str] = {}
    kv: KeyValue
    for kv in itertools.islice(attributes, MAX_LABELS):  # the others are not looked at: a push may carry many
        key = prometheus_name(kv.key)
        if key and not key.startswith("__") and key != "client_instance_id":
            out[key] = _text(kv.value)[:MAX_LABEL_CHARS]
    return tuple(sorted(out.items()))


def _decompress(compression: int, payload: bytes, max_bytes: int) -> bytes:
    pieces: list[bytes] = []
    size = 0
    for piece in decompress_chunks(compression, payload, 64 * 1024, max_bytes):
        size += len(piece)
        if size > max_bytes:
            raise KafkaError(
                ErrorCode.TELEMETRY_TOO_LARGE, f"the metrics decompress to more than telemetry.max.bytes ({max_bytes})"
            )
        pieces.append(bytes(piece))
    return b"".join(pieces)


def decode_payload(compression: int, payload: bytes, max_bytes: int, max_points: int = 1 << 30) -> list[Point]:
    """The points of one push, at most ``max_points`` of them, read up to four entries a point (resources,
    scopes, metrics and points alike; the rest are not looked at: a push cannot hold the event loop for longer
    than that many take); KafkaError INVALID_RECORD or TELEMETRY_TOO_LARGE refuses the
    whole push."""
    try:
        data = MetricsData.FromString(_decompress(compression, payload, max_bytes))
    except KafkaError as e:
        if e.code == ErrorCode.TELEMETRY_TOO_LARGE:
            raise
        raise KafkaError(ErrorCode.INVALID_RECORD, f"the metrics do not decompress: {e.message}") from None
    except (DecodeError, ValueError, RuntimeError) as e:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"the metrics are not OTLP MetricsData: {e}") from None
    points: list[Point] = []
    steps = 0  # every entry looked at, a point or not (empty metrics or scopes, histograms): up to four a point
    for resource in data.resource_metrics:
        for scope in itertools.chain((None,), resource.scope_metrics):
            for metric in itertools.chain((None,), scope.metrics if scope is not None else ()):
                for point in itertools.chain((None,), _points(metric) if metric is not None else ()):
                    steps += 1
                    if steps > STEPS_PER_POINT * max_points:
                        return points
                    if point is not None:
                        if len(points) >= max_points:
                            return points
                        points.append(point)
    return points


def _points(metric: Any) -> Iterator[Point]:
    name = prometheus_name(metric.name)
    if not name or name.startswith(RESERVED_PREFIXES):
        return
    kind = metric.WhichOneof("data")
    if kind == "gauge":
        data_points, counter, delta = metric.gauge.data_points, False, False
    elif kind == "sum":
        data_points, counter = metric.sum.data_points, metric.sum.is_monotonic
        delta = metric.sum.aggregation_temporality == _DELTA
    else:
        return  # histograms, exponential histograms and summaries are not exported
    if counter and name.endswith("_total"):
        name = name.removesuffix("_total")  # the exposition adds it back
    for p in data_points:
        value = float(p.as_int) if p.WhichOneof("value") == "as_int" else float(p.as_double)
        yield Point(name, COUNTER if counter else GAUGE, _labels(p.attributes), value, counter and delta)


@dataclass
class ClientSeries:
    """One client instance's series: (name, labels) -> (kind, value)."""

    instance_id: str
    values: dict[tuple[str, Labels], tuple[str, float]] = field(default_factory=dict)
    dropped: int = 0
    expires_at: float = float("inf")  # monotonic ms: not shown after it (the instance expired)


class PushedMetrics:
    """Every client's series, read by the Prometheus collector at scrape time (which may run on another thread:
    a client's series are replaced as one dict, never changed in place while a scrape may hold them)."""

    def __init__(
        self, max_series_per_client: int, clock_ms: Callable[[], float] = lambda: time.monotonic() * 1000
    ) -> None:
        self.max_series = max_series_per_client
        self.max_total = TOTAL_SERIES_FACTOR * max_series_per_client
        self.total = 0  # series held over every client
        self.clock_ms = clock_ms  # the client instances' clock (monotonic milliseconds)
        self.clients: dict[str, ClientSeries] = {}

    def record(self, instance_id: str, points: list[Point], expires_at: float) -> None:
        old = self.clients.get(instance_id)
        series = ClientSeries(instance_id, dict(old.values) if old else {}, old.dropped if old else 0, expires_at)
        values = series.values
        for p in points:
            key = (p.name, p.labels)
            held = values.get(key)
            if held is None and (len(values) >= self.max_series or self.total >= self.max_total):
                series.dropped += 1
                continue
            if held is not None and held[0] != p.kind:
                continue
            value = p.value + held[1] if p.delta and held is not None else p.value
            values[key] = (p.kind, value)
            self.total += held is None
        if series.dropped and (old is None or not old.dropped):
            log.warning(
                "client %s pushed more than telemetry.max.series.per.client (%d) series; the rest are dropped",
                instance_id,
                self.max_series,
            )
        self.clients[instance_id] = series

    def seen(self, instance_id: str, expires_at: float) -> None:
        series = self.clients.get(instance_id)
        if series is not None:
            series.expires_at = expires_at

    def forget(self, instance_id: str) -> None:
        gone = self.clients.pop(instance_id, None)
        if gone is not None:
            self.total -= len(gone.values)


class PushedMetricsCollector:
    """The pushed series as Prometheus families (one kind per name: a point of another kind is skipped)."""

    def __init__(self, pushed: PushedMetrics) -> None:
        self.pushed = pushed

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        now = self.pushed.clock_ms()
        for client in list(self.pushed.clients.values()):
            if client.expires_at <= now:
                continue
            for (name, labels), (kind, value) in list(client.values.items()):
                family = families.get(name)
                if family is None:
                    doc = "Pushed by clients (KIP-714)."
                    family = CounterMetricFamily(name, doc) if kind == COUNTER else GaugeMetricFamily(name, doc)
                    families[name] = family
                elif family.type != kind:
                    continue
                sample = name + "_total" if kind == COUNTER else name
                family.add_sample(sample, {"client_instance_id": client.instance_id, **dict(labels)}, value)
        yield from families.values()
