"""Helpers of the client telemetry tests: OTLP payloads, scrapes, raw config requests."""

from __future__ import annotations

import socket
import time
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.broker._wire import Wire

from rill.protocol import ApiKey

CLIENT_METRICS = 16
SET, DELETE = 0, 1
ZERO = uuid.UUID(int=0)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}  # fmt: skip


def pushed(samples: Samples, prefix: str = "org_apache_kafka_") -> Samples:
    return {k: v for k, v in samples.items() if k[0].startswith(prefix)}


def wait_for(
    what: str, probe: Callable[[], T | None], timeout: float = 60.0, between: Callable[[], Any] | None = None
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        if between is not None:
            between()
        else:
            time.sleep(0.05)


def payload(gauges: dict[str, float] | None = None, counters: dict[str, float] | None = None,
            attributes: dict[str, str] | None = None) -> bytes:  # fmt: skip
    """OTLP MetricsData: a gauge point per ``gauges`` entry and a delta monotonic sum per ``counters`` entry."""
    attrs = [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in (attributes or {}).items()]
    metrics = [Metric(name=n, gauge=Gauge(data_points=[NumberDataPoint(as_double=v, attributes=attrs)]))
               for n, v in (gauges or {}).items()]  # fmt: skip
    delta = AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
    metrics += [Metric(name=n, sum=Sum(data_points=[NumberDataPoint(as_int=int(v), attributes=attrs)],
                                       aggregation_temporality=delta, is_monotonic=True))
                for n, v in (counters or {}).items()]  # fmt: skip
    data = MetricsData(resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=metrics)])])
    return bytes(data.SerializeToString())


def alter(wire: Wire, name: str, configs: dict[str, str | None], validate_only: bool = False) -> tuple[int, str]:
    """IncrementalAlterConfigs on one subscription (None: delete the config): its error code and message."""
    ops = [{"name": k, "config_operation": DELETE if v is None else SET, "value": v} for k, v in configs.items()]
    body = {"resources": [{"resource_type": CLIENT_METRICS, "resource_name": name, "configs": ops}],
            "validate_only": validate_only}  # fmt: skip
    r = wire.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"][0]
    return r["error_code"], r["error_message"] or ""


def describe(wire: Wire, name: str) -> dict[str, tuple[str, int]]:
    body = {"resources": [{"resource_type": CLIENT_METRICS, "resource_name": name, "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False}  # fmt: skip
    result = wire.call(ApiKey.DESCRIBE_CONFIGS, 4, body)["results"][0]
    assert result["error_code"] == 0, result
    return {c["name"]: (c["value"], c["config_source"]) for c in result["configs"]}


def list_resources(wire: Wire, version: int = 1, types: list[int] | None = None) -> tuple[int, list[tuple[str, int]]]:
    body = {"resource_types": types or []} if version >= 1 else {}
    r = wire.call(ApiKey.LIST_CONFIG_RESOURCES, version, body)
    return r["error_code"], sorted((c["resource_name"], c.get("resource_type", CLIENT_METRICS))
                                   for c in r["config_resources"])  # fmt: skip


def get_subscriptions(wire: Wire, instance: uuid.UUID = ZERO) -> dict[str, Any]:
    return wire.call(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, {"client_instance_id": instance})


def push(wire: Wire, instance: uuid.UUID, subscription: int, metrics: bytes, *, compression: int = 0,
         terminating: bool = False) -> int:  # fmt: skip
    body = {"client_instance_id": instance, "subscription_id": subscription, "terminating": terminating,
            "compression_type": compression, "metrics": metrics}  # fmt: skip
    code: int = wire.call(ApiKey.PUSH_TELEMETRY, 0, body)["error_code"]
    return code
