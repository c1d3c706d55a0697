"""The mirror's Prometheus metrics, named as MirrorMaker 2's MirrorSourceConnector metrics appear through the
JMX exporter (``kafka_connect_mirror_mirrorsourceconnector_*``, labelled by target cluster alias, topic and
partition), plus the lag of each copied partition."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from rill.mirror.mirror_maker import MirrorMaker

PREFIX = "kafka_connect_mirror_mirrorsourceconnector_"


class MirrorCollector(Collector):
    def __init__(self, mirror: MirrorMaker, target_alias: str) -> None:
        self._mirror = mirror
        self._alias = target_alias

    def collect(self) -> Iterator[Any]:
        labels = ["target", "topic", "partition"]
        records = CounterMetricFamily(PREFIX + "record_count", "Records copied.", labels=labels)
        size = CounterMetricFamily(PREFIX + "byte_count", "Bytes of record values copied.", labels=labels)
        lag = GaugeMetricFamily("rill_mirror_partition_lag", "Source records not copied yet.", labels=labels)
        for (topic, partition), status in sorted(self._mirror.stats.partitions.items()):
            values = [self._alias, topic, str(partition)]
            records.add_metric(values, status.copied)
            size.add_metric(values, status.bytes)
            lag.add_metric(values, status.lag)
        yield records
        yield size
        yield lag
        stats = self._mirror.stats
        latency = GaugeMetricFamily(PREFIX + "replication_latency_ms_max", "Longest time from a source record's "
                                    "timestamp to its acknowledgement by the target.", labels=["target"])  # fmt: skip
        latency.add_metric([self._alias], stats.latency_ms_max)
        yield latency
        avg = GaugeMetricFamily(PREFIX + "replication_latency_ms_avg", "Average of that time.", labels=["target"])
        avg.add_metric([self._alias], stats.latency_ms_avg)
        yield avg


def serve_metrics(mirror: MirrorMaker, host: str, port: int, target_alias: str = "target") -> int:
    """Serve the mirror's metrics at http://host:port/metrics in a daemon thread; returns the bound port."""
    registry = CollectorRegistry()
    registry.register(MirrorCollector(mirror, target_alias))
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return int(server.server_port)
