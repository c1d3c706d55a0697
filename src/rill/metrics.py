"""The broker's Prometheus metrics, named after Kafka's JMX metrics where Kafka has one.

Two kinds of metric live here:

- counters and histograms the broker bumps on its hot path through small methods: ``on_request`` (one call
  per request), ``on_produce`` / ``on_fetch`` (one call per topic-partition appended or read) and
  ``set_connections``. Each adds to a plain per-label tally (a dict lookup and an integer add, ~0.2-0.4 us,
  against 2-8 us for prometheus-client's locked child metrics); the collector turns the tallies into
  counter and histogram families when scraped;
- gauges read lazily at scrape time from callables the broker registers: per-partition log stats
  (``set_partition_source``), committed group offsets (``set_group_source``; lag is computed against the
  partition's high watermark), purgatory sizes and the connection count. ``attach(broker)`` wires these from
  a running broker.

Metric (labels) and the Kafka metric it mirrors:

- ``kafka_server_brokertopicmetrics_bytesin_total`` (topic): BrokerTopicMetrics BytesInPerSec
- ``kafka_server_brokertopicmetrics_bytesout_total`` (topic): BrokerTopicMetrics BytesOutPerSec
- ``kafka_server_brokertopicmetrics_messagesin_total`` (topic): BrokerTopicMetrics MessagesInPerSec
- ``kafka_network_requestmetrics_requests_total`` (request): RequestMetrics RequestsPerSec
- ``kafka_network_requestmetrics_errors_total`` (request, error): RequestMetrics ErrorsPerSec, errors only
- ``kafka_network_requestmetrics_totaltime_seconds`` (request): RequestMetrics TotalTimeMs, a histogram in s
- ``kafka_server_delayedoperationpurgatory_purgatorysize`` (delayedoperation): PurgatorySize
- ``kafka_log_log_size``, ``_numlogsegments``, ``_logstartoffset``, ``_logendoffset`` (topic, partition): Log
- ``kafka_log_log_highwatermark`` (topic, partition): Rill's own, the partition's high watermark
- ``kafka_consumergroup_lag``, ``kafka_consumergroup_current_offset`` (consumergroup, topic, partition):
  the names kafka_exporter uses (Kafka's broker has no lag metric)
- ``kafka_server_socketservermetrics_connection_count``: socket-server-metrics connection-count
- ``kafka_log_logcleaner_cleaner_recopy_percent``, ``_max_clean_time_secs``, ``_max_buffer_utilization_percent``:
  LogCleaner cleaner-recopy-percent, max-clean-time-secs, max-buffer-utilization-percent (the last cleaning)
- ``kafka_log_logcleanermanager_max_dirty_percent``, ``_time_since_last_run_ms``,
  ``_uncleanable_partitions_count``: LogCleanerManager max-dirty-percent, time-since-last-run-ms,
  uncleanable-partitions-count (for the whole broker, not per log dir)
- ``rill_implementation_info`` (module, implementation): Rill's own, 1 for each module that has a compiled
  implementation and a pure-Python twin, labelled with the one in use (``compiled`` or ``python``)

The metrics live in their own ``CollectorRegistry`` (never the process-global one), so several brokers in one
process (tests) do not collide. ``start_http_server`` serves them at ``/metrics``.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import socket
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from rill.errors import ErrorCode

log = logging.getLogger(__name__)

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_BUCKET_LABELS = [repr(float(b)) for b in LATENCY_BUCKETS_S] + ["+Inf"]


@dataclass(frozen=True, slots=True)
class PartitionStats:
    """One partition's log as the scrape sees it."""

    topic: str
    partition: int
    size_bytes: int
    num_segments: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class GroupOffset:
    """A group's committed offset for one partition; lag is computed against the high watermark."""

    group: str
    topic: str
    partition: int
    committed_offset: int


PartitionSource = Callable[[], Iterable[PartitionStats]]
GroupSource = Callable[[], Iterable[GroupOffset]]
PurgatorySource = Callable[[], Mapping[str, int]]
CountSource = Callable[[], int]
ValuesSource = Callable[[], Mapping[str, float]]


TWINNED_MODULES = ("rill.records.scan",)
"""Modules with a compiled implementation and a pure-Python twin (used where the package was installed
without a C compiler); each says in ``ACCELERATED`` which one it runs."""


def implementations() -> dict[str, str]:
    """``compiled`` or ``python`` for each of ``TWINNED_MODULES``: the implementation in use."""
    return {
        name: "compiled" if importlib.import_module(name).ACCELERATED else "python" for name in TWINNED_MODULES
    }


def request_label(api_name: str) -> str:
    """Kafka's request label for an API: ``PRODUCE`` or ``Produce`` -> ``Produce``, ``API_VERSIONS`` ->
    ``ApiVersions``."""
    if api_name.isupper() or "_" in api_name:
        return "".join(part.capitalize() for part in api_name.split("_"))
    return api_name


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class _RequestTally:
    """One API's request count, latency histogram (non-cumulative bucket counts) and error counts."""

    __slots__ = ("buckets", "count", "errors", "label", "total_seconds")

    def __init__(self, label: str) -> None:
        self.label = label
        self.count = 0
        self.total_seconds = 0.0
        self.buckets = [0] * (len(LATENCY_BUCKETS_S) + 1)  # the last one is +Inf
        self.errors: dict[int, int] = {}


class _TopicTally:
    __slots__ = ("bytes_in", "bytes_out", "messages_in")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.bytes_out = 0
        self.messages_in = 0


class BrokerMetrics:
    """Every metric of one broker, in its own registry.

    The hot-path methods add to plain per-label tallies (one dict lookup, no lock) that the registry's
    collector turns into counter and histogram families at scrape time. They must be called from one
    thread, the broker's event loop; scrapes may run on another thread (reading ints is safe there).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        self._requests: dict[str, _RequestTally] = {}
        self._by_label: dict[str, _RequestTally] = {}
        self._topics: dict[str, _TopicTally] = {}
        self._connection_count = 0
        self._partition_source: PartitionSource | None = None
        self._group_source: GroupSource | None = None
        self._purgatory_source: PurgatorySource | None = None
        self._connection_source: CountSource | None = None
        self._cleaner_source: ValuesSource | None = None
        self.registry.register(_Collector(self))

    # -- hot path ----------------------------------------------------------------------------------------

    def on_request(self, api_name: str, seconds: float, error_code: int = 0) -> None:
        tally = self._requests.get(api_name)
        if tally is None:
            tally = self._request_tally(api_name)
        tally.count += 1
        tally.total_seconds += seconds
        tally.buckets[bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        if error_code:
            errors = tally.errors
            errors[error_code] = errors.get(error_code, 0) + 1

    def on_error(self, api_name: str, error_code: int) -> None:
        """An error inside a request (one partition's error code), counted with the request's errors."""
        tally = self._requests.get(api_name)
        if tally is None:
            tally = self._request_tally(api_name)
        tally.errors[error_code] = tally.errors.get(error_code, 0) + 1

    def _request_tally(self, api_name: str) -> _RequestTally:
        label = request_label(api_name)
        tally = self._by_label.get(label)
        if tally is None:
            tally = self._by_label[label] = _RequestTally(label)
        self._requests[api_name] = tally  # an alias when two spellings name one API
        return tally

    def on_produce(self, topic: str, nbytes: int, messages: int) -> None:
        tally = self._topics.get(topic)
        if tally is None:
            tally = self._topics[topic] = _TopicTally()
        tally.bytes_in += nbytes
        tally.messages_in += messages

    def on_fetch(self, topic: str, nbytes: int) -> None:
        tally = self._topics.get(topic)
        if tally is None:
            tally = self._topics[topic] = _TopicTally()
        tally.bytes_out += nbytes

    def set_connections(self, n: int) -> None:
        self._connection_count = n

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's per-topic series."""
        self._topics.pop(topic, None)

    # -- lazy sources ------------------------------------------------------------------------------------

    def set_partition_source(self, source: PartitionSource | None) -> None:
        self._partition_source = source

    def set_group_source(self, source: GroupSource | None) -> None:
        self._group_source = source

    def set_purgatory_source(self, source: PurgatorySource | None) -> None:
        self._purgatory_source = source

    def set_connection_source(self, source: CountSource | None) -> None:
        """Read the connection count at scrape time instead of through ``set_connections``."""
        self._connection_source = source

    def set_cleaner_source(self, source: ValuesSource | None) -> None:
        """The log cleaner's gauges by metric name (``LogCleaner.metric_values``)."""
        self._cleaner_source = source

    def attach(self, broker: Any) -> None:
        """Wire the lazy sources from a started ``rill.broker.Broker``: replica manager, server, groups."""
        replica_manager = getattr(broker, "replica_manager", None)
        if replica_manager is not None:
            self.set_partition_source(lambda: _partition_stats(replica_manager))
            self.set_purgatory_source(lambda: _purgatory_sizes(replica_manager))
        server = getattr(broker, "socket_server", None) or getattr(broker, "_server", None)
        if server is not None and hasattr(server, "connection_count"):
            self.set_connection_source(lambda: int(server.connection_count))
        cleaner = getattr(getattr(broker, "log_manager", None), "cleaner", None)
        if cleaner is not None and callable(getattr(cleaner, "metric_values", None)):
            self.set_cleaner_source(cleaner.metric_values)
        services = getattr(broker, "services", None)
        coordinator: Any = getattr(services, "group_coordinator", None)
        offsets = getattr(coordinator, "committed_offsets", None)
        if callable(offsets):
            self.set_group_source(lambda: _group_offsets(offsets()))
        elif isinstance(getattr(coordinator, "groups", None), Mapping):
            self.set_group_source(lambda: _offsets_of_groups(coordinator.groups))

    def render(self) -> bytes:
        """The metrics in Prometheus' text format."""
        data: bytes = generate_latest(self.registry)
        return data


def _partition_stats(replica_manager: Any) -> list[PartitionStats]:
    stats = []
    for tp, partition in list(replica_manager.partitions().items()):
        plog = partition.log
        stats.append(
            PartitionStats(
                tp.topic,
                tp.partition,
                int(plog.size_bytes),
                int(plog.num_segments),
                int(partition.log_start_offset),
                int(partition.log_end_offset),
                int(partition.high_watermark),
            )
        )
    return stats


def _purgatory_sizes(replica_manager: Any) -> dict[str, int]:
    # Only fetches wait: a Produce with acks=all completes at append while the ISR is this one replica.
    purgatory = replica_manager.fetch_purgatory
    return {str(purgatory.name): int(purgatory.size)}


def _group_offsets(raw: Iterable[Any]) -> list[GroupOffset]:
    """Accept ``GroupOffset``s or ``(group, topic, partition, offset)`` tuples from the coordinator."""
    result = []
    for item in raw:
        if isinstance(item, GroupOffset):
            result.append(item)
        else:
            group, topic, partition, offset = item
            result.append(GroupOffset(str(group), str(topic), int(partition), int(offset)))
    return result


def _offsets_of_groups(groups: Mapping[str, Any]) -> list[GroupOffset]:
    """Committed offsets read from a coordinator's ``groups`` (``GroupMetadata.offsets`` by partition)."""
    result = []
    for group_id, group in list(groups.items()):
        for tp, committed in list(getattr(group, "offsets", {}).items()):
            result.append(GroupOffset(str(group_id), tp.topic, int(tp.partition), int(committed.offset)))
    return result


def _snapshot(source: Callable[[], Iterable[Any]] | None, what: str) -> list[Any]:
    """Call a source; retried when the owner mutated a dict under us (scrapes may run on another thread)."""
    if source is None:
        return []
    for attempt in range(3):
        try:
            return list(source())
        except RuntimeError:
            if attempt == 2:
                log.warning("metrics: %s changed during three scrapes in a row; skipped", what)
        except Exception:
            log.exception("metrics: reading %s failed", what)
            return []
    return []


class _Collector:
    """Builds every metric family at scrape time: the hot-path tallies and the registered sources."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._m = metrics

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        yield from self._topic_families()
        yield from self._request_families()
        yield from self._source_families()

    def _topic_families(self) -> Iterator[Any]:
        prefix = "kafka_server_brokertopicmetrics_"
        bytes_in = CounterMetricFamily(prefix + "bytesin", "Bytes appended by producers.", labels=["topic"])
        bytes_out = CounterMetricFamily(prefix + "bytesout", "Bytes sent to fetchers.", labels=["topic"])
        messages_in = CounterMetricFamily(prefix + "messagesin", "Records appended.", labels=["topic"])
        for topic, tally in list(self._m._topics.items()):
            bytes_in.add_metric([topic], tally.bytes_in)
            bytes_out.add_metric([topic], tally.bytes_out)
            messages_in.add_metric([topic], tally.messages_in)
        yield from (bytes_in, bytes_out, messages_in)

    def _request_families(self) -> Iterator[Any]:
        prefix = "kafka_network_requestmetrics_"
        requests = CounterMetricFamily(prefix + "requests", "Requests handled, per API.", labels=["request"])
        errors = CounterMetricFamily(
            prefix + "errors",
            "Requests answered with a top-level error, per API and error.",
            labels=["request", "error"],
        )
        total_time = HistogramMetricFamily(
            prefix + "totaltime_seconds",
            "Time from reading a request to its response being ready, per API.",
            labels=["request"],
        )
        for tally in list(self._m._by_label.values()):
            requests.add_metric([tally.label], tally.count)
            for code, n in list(tally.errors.items()):
                errors.add_metric([tally.label, _error_name(code)], n)
            cumulative = 0
            buckets = []
            for bound, n in zip(_BUCKET_LABELS, list(tally.buckets), strict=True):
                cumulative += n
                buckets.append((bound, cumulative))
            total_time.add_metric([tally.label], buckets, tally.total_seconds)
        yield from (requests, errors, total_time)

    def _source_families(self) -> Iterator[Any]:
        m = self._m
        pl = ["topic", "partition"]
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of the partition's log on disk.", labels=pl)
        segments = GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments of the partition's log.", labels=pl)
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "First offset of the partition's log.", labels=pl)
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "Offset the next record will get.", labels=pl)
        hw = GaugeMetricFamily("kafka_log_log_highwatermark", "The partition's high watermark.", labels=pl)
        hw_by_tp: dict[tuple[str, int], int] = {}
        for s in _snapshot(m._partition_source, "partition stats"):
            labels = [s.topic, str(s.partition)]
            size.add_metric(labels, s.size_bytes)
            segments.add_metric(labels, s.num_segments)
            start.add_metric(labels, s.log_start_offset)
            end.add_metric(labels, s.log_end_offset)
            hw.add_metric(labels, s.high_watermark)
            hw_by_tp[(s.topic, s.partition)] = s.high_watermark
        yield from (size, segments, start, end, hw)

        gl = ["consumergroup", "topic", "partition"]
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "High watermark minus committed offset.", labels=gl)
        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "Committed offset of the group.", labels=gl)
        for g in _snapshot(m._group_source, "group offsets"):
            labels = [g.group, g.topic, str(g.partition)]
            current.add_metric(labels, g.committed_offset)
            high = hw_by_tp.get((g.topic, g.partition))
            if high is not None:
                lag.add_metric(labels, max(0, high - g.committed_offset))
        yield from (lag, current)

        purgatory = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Operations waiting in a purgatory.",
            labels=["delayedoperation"],
        )
        sizes = _snapshot(lambda: list((m._purgatory_source or dict)().items()), "purgatory sizes")
        for name, n in sizes:
            purgatory.add_metric([name], n)
        yield purgatory

        count = m._connection_count
        if m._connection_source is not None:
            try:
                count = m._connection_source()
            except Exception:
                log.exception("metrics: reading the connection count failed")
        yield GaugeMetricFamily(
            "kafka_server_socketservermetrics_connection_count", "Open client connections.", value=count
        )

        if m._cleaner_source is not None:
            for name, v in _snapshot(lambda: list((m._cleaner_source or dict)().items()), "cleaner metrics"):
                yield GaugeMetricFamily(name, "Kafka's log cleaner gauge of this name.", value=v)

        info = GaugeMetricFamily(
            "rill_implementation_info",
            "1 per module with a compiled implementation and a pure-Python twin, labelled with the one in use.",
            labels=["module", "implementation"],
        )
        for module, implementation in implementations().items():
            info.add_metric([module, implementation], 1)
        yield info


# ------------------------------------------------------------------------------------------- HTTP endpoint


class MetricsServer:
    """A running ``/metrics`` endpoint: call it (or ``stop()``) to stop; ``port`` is the bound port."""

    def __init__(self, host: str, port: int, stop: Callable[[], None], fd: int = -1) -> None:
        self.host = host
        self.port = port
        self.fd = fd  # the listening socket's descriptor
        self._stop = stop
        self._stopped = False

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._stop()

    def __call__(self) -> None:
        self.stop()


def start_http_server(host: str, port: int, metrics: BrokerMetrics) -> MetricsServer:
    """Serve ``metrics`` at ``http://host:port/metrics`` (port 0 picks a free one).

    Called from a running asyncio loop, the endpoint is served on that loop, so sources read broker state
    from the thread that owns it; called elsewhere, it runs in a daemon thread.
    """
    sock = socket.create_server((host, port), reuse_port=False)
    bound_port = int(sock.getsockname()[1])
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        return _serve_on_loop(loop, sock, host, bound_port, metrics)
    return _serve_in_thread(sock, host, bound_port, metrics)


_MAX_REQUEST_HEAD = 16 * 1024
_READ_TIMEOUT_S = 10.0


def _http_response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _respond(request_head: bytes, metrics: BrokerMetrics) -> bytes:
    line = request_head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split()
    if len(parts) < 2:
        return _http_response("400 Bad Request", b"bad request\n")
    method, target = parts[0], parts[1].split("?", 1)[0]
    if method not in ("GET", "HEAD"):
        return _http_response("405 Method Not Allowed", b"only GET\n")
    if target not in ("/metrics", "/"):
        return _http_response("404 Not Found", b"metrics are at /metrics\n")
    body = metrics.render()
    response = _http_response("200 OK", body, CONTENT_TYPE_LATEST)
    return response if method == "GET" else response[: len(response) - len(body)]


def _serve_on_loop(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, host: str, port: int, metrics: BrokerMetrics
) -> MetricsServer:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            writer.write(_respond(head, metrics))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    holder: list[asyncio.Server] = []

    async def serve() -> None:
        holder.append(await asyncio.start_server(handle, sock=sock, limit=_MAX_REQUEST_HEAD))

    task = loop.create_task(serve(), name="metrics-http")

    def stop() -> None:
        if holder:
            holder[0].close()
        else:
            task.cancel()
            sock.close()

    return MetricsServer(host, port, stop, sock.fileno())


def _serve_in_thread(sock: socket.socket, host: str, port: int, metrics: BrokerMetrics) -> MetricsServer:
    stopping = threading.Event()
    sock.settimeout(0.2)

    def serve_one(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(_READ_TIMEOUT_S)
            head = b""
            try:
                while b"\r\n\r\n" not in head and len(head) < _MAX_REQUEST_HEAD:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    head += chunk
                conn.sendall(_respond(head, metrics))
            except OSError:
                pass

    def loop() -> None:
        while not stopping.is_set():
            try:
                conn, _addr = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            threading.Thread(target=serve_one, args=(conn,), daemon=True, name="metrics-conn").start()

    thread = threading.Thread(target=loop, daemon=True, name="metrics-http")
    thread.start()

    def stop() -> None:
        stopping.set()
        thread.join(timeout=2.0)
        sock.close()

    return MetricsServer(host, port, stop, sock.fileno())
