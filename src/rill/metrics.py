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
- ``kafka_server_brokertopicmetrics_bytesout_total`` (topic): BrokerTopicMetrics BytesOutPerSec (to consumers)
- ``kafka_server_brokertopicmetrics_replicationbytesout_total``: BrokerTopicMetrics ReplicationBytesOutPerSec
  (to followers)
- ``kafka_server_brokertopicmetrics_messagesin_total`` (topic): BrokerTopicMetrics MessagesInPerSec
- ``kafka_network_requestmetrics_requests_total`` (request): RequestMetrics RequestsPerSec
- ``kafka_network_requestmetrics_errors_total`` (request, error): RequestMetrics ErrorsPerSec, errors only
- ``kafka_network_requestmetrics_totaltime_seconds`` (request): RequestMetrics TotalTimeMs, a histogram in s
- ``kafka_server_delayedoperationpurgatory_purgatorysize`` (delayedoperation): PurgatorySize
- ``kafka_log_log_size``, ``_numlogsegments``, ``_logstartoffset``, ``_logendoffset`` (topic, partition): Log
- ``kafka_log_log_highwatermark`` (topic, partition): Rill's own, the partition's high watermark
- ``kafka_cluster_partition_laststableoffsetlag`` (topic, partition): Partition LastStableOffsetLag, the high
  watermark minus the last stable offset (records held back from read_committed consumers by open transactions)
- ``kafka_consumergroup_lag``, ``kafka_consumergroup_current_offset`` (consumergroup, topic, partition):
  the names kafka_exporter uses (Kafka's broker has no lag metric)
- ``kafka_server_socketservermetrics_connection_count``: socket-server-metrics connection-count
- ``kafka_server_replicamanager_`` ``partitioncount``, ``leadercount``, ``underreplicatedpartitions`` (led
  partitions whose ISR is smaller than their replication factor), ``underminisrpartitioncount`` (led
  partitions whose ISR is smaller than ``min.insync.replicas``), ``atminisrpartitioncount`` (equal to it):
  ReplicaManager's gauges of those names
- ``kafka_server_replicamanager_isrshrinks_total``, ``_isrexpands_total``: ReplicaManager IsrShrinksPerSec,
  IsrExpandsPerSec (ISR changes this broker made as leader)
- ``kafka_server_replicafetchermanager_maxlag`` (clientid): ReplicaFetcherManager MaxLag (``clientid="Replica"``),
  the largest lag in offsets of a partition this broker follows
- ``kafka_server_fetchsessioncache_numincrementalfetchsessions``, ``_numincrementalfetchpartitionscached``,
  ``_incrementalfetchsessionevictions_total``: FetchSessionCache NumIncrementalFetchSessions,
  NumIncrementalFetchPartitionsCached, IncrementalFetchSessionEvictionsPerSec
- ``kafka_controller_kafkacontroller_activecontrollercount``: KafkaController ActiveControllerCount, 1 on the
  controller (and on a single broker, its own controller), 0 elsewhere
- ``kafka_controller_kafkacontroller_offlinepartitionscount``: KafkaController OfflinePartitionsCount, partitions
  without a live leader; the controller's count (0 on other brokers, as in Kafka)
- ``kafka_controller_controllerstats_leaderelectionrateandtimems`` (``_count``, ``_sum``): ControllerStats
  LeaderElectionRateAndTimeMs, the elections of a new leader this broker made while controller and the time
  each took (milliseconds from the start of the controller's pass that found it due to its write in
  ZooKeeper); ``kafka_controller_controllerstats_uncleanleaderelections_total``: UncleanLeaderElectionsPerSec
- ``kafka_log_logcleaner_cleaner_recopy_percent``, ``_max_clean_time_secs``, ``_max_buffer_utilization_percent``,
  ``_max_compaction_delay_secs``, ``_deadthreadcount``: LogCleaner cleaner-recopy-percent,
  max-clean-time-secs, max-buffer-utilization-percent, max-compaction-delay-secs (over the last cleaning of
  each cleaner thread, as fractions where Kafka truncates to integers) and DeadThreadCount
- ``kafka_log_logcleanermanager_max_dirty_percent``, ``_time_since_last_run_ms``: LogCleanerManager
  max-dirty-percent, time-since-last-run-ms (since a cleaner thread last looked for a log to clean)
- ``kafka_log_logcleanermanager_uncleanable_partitions_count``, ``_uncleanable_bytes`` (logdirectory):
  LogCleanerManager uncleanable-partitions-count and uncleanable-bytes of each log dir
- the group coordinator's, for classic and consumer groups: see ``rill.metrics_groups``
- ``kafka_server_client_metrics_instance_count``, ``_throttle_total``, ``_unknown_subscription_request_total``,
  ``_plugin_export_total``, ``_plugin_error_total``: Kafka's client-metrics group (KIP-714)
- the metrics clients push (KIP-714), under their own names with a ``client_instance_id`` label: see
  ``rill.telemetry.pushed_metrics``
- ``rill_implementation_info`` (module, implementation): Rill's own, 1 for each module that has a compiled
  implementation and a pure-Python twin, labelled with the one in use (``compiled`` or ``python``)

The gauges' values and the functions that read them from a running broker are in ``rill.metrics_sources``.
The metrics live in their own ``CollectorRegistry`` (never the process-global one), so several brokers in one
process (tests) do not collide. ``start_http_server`` (in ``rill.metrics_http``) serves them at ``/metrics``.
"""

from __future__ import annotations

import importlib
import logging
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    SummaryMetricFamily,
)

from rill.errors import ErrorCode
from rill.metrics_sources import (
    CountSource,
    GroupSource,
    LabelledValuesSource,
    PartitionSource,
    PurgatorySource,
    QuotaGroupStats,
    ReplicationStats,
    ValuesSource,
    group_offsets,
    offsets_of_groups,
    partition_stats,
    purgatory_sizes,
    quota_stats,
    replication_stats,
)

log = logging.getLogger(__name__)

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_BUCKET_LABELS = [repr(float(b)) for b in LATENCY_BUCKETS_S] + ["+Inf"]

TWINNED_MODULES = ("rill.records.scan",)
"""Modules with a compiled implementation and a pure-Python twin (used where the package was installed
without a C compiler); each says in ``ACCELERATED`` which one it runs."""


def implementations() -> dict[str, str]:
    """``compiled`` or ``python`` for each of ``TWINNED_MODULES``: the implementation in use."""
    return {name: "compiled" if importlib.import_module(name).ACCELERATED else "python" for name in TWINNED_MODULES}


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
        self._replication_bytes_out = 0
        self._connection_count = 0
        self._partition_source: PartitionSource | None = None
        self._group_source: GroupSource | None = None
        self._purgatory_source: PurgatorySource | None = None
        self._connection_source: CountSource | None = None
        self._replication_source: Callable[[], ReplicationStats] | None = None
        self._cleaner_source: ValuesSource | None = None
        self._authentication_source: Callable[[], dict[str, list[int]]] | None = None  # listener -> [ok, failed]
        self._cleaner_dir_source: LabelledValuesSource | None = None
        self._txn_source: Any = None  # the transaction coordinator (metric_values, outcomes)
        self._quota_source: Callable[[], list[QuotaGroupStats]] | None = None
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

    def on_fetch(self, topic: str, nbytes: int, *, replication: bool = False) -> None:
        """Bytes of ``topic`` sent to a consumer, or (``replication``) to a follower, counted apart as Kafka
        does."""
        if replication:
            self._replication_bytes_out += nbytes
            return
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

    def set_replication_source(self, source: Callable[[], ReplicationStats] | None) -> None:
        self._replication_source = source

    def set_cleaner_source(self, source: ValuesSource | None, per_log_dir: LabelledValuesSource | None = None) -> None:
        """The log cleaner's gauges by metric name (``LogCleaner.metric_values``), and those of each log dir
        (``LogCleaner.log_dir_metric_values``)."""
        self._cleaner_source = source
        self._cleaner_dir_source = per_log_dir

    def set_txn_coordinator_source(self, coordinator: Any) -> None:
        """The transaction coordinator: its gauges (``metric_values``) and its transactions by outcome."""
        self._txn_source = coordinator

    def attach(self, broker: Any) -> None:
        """Wire the lazy sources from a started ``rill.broker.Broker``: replica manager, server, groups."""
        replica_manager = getattr(broker, "replica_manager", None)
        if replica_manager is not None:
            self.set_partition_source(lambda: partition_stats(replica_manager))
            self.set_purgatory_source(lambda: purgatory_sizes(replica_manager))
            self.set_replication_source(lambda: replication_stats(broker))
        server = getattr(broker, "socket_server", None) or getattr(broker, "_server", None)
        if server is not None and hasattr(server, "connection_count"):
            self.set_connection_source(lambda: int(server.connection_count))
        cleaner = getattr(getattr(broker, "log_manager", None), "cleaner", None)
        if cleaner is not None and callable(getattr(cleaner, "metric_values", None)):
            self.set_cleaner_source(cleaner.metric_values, getattr(cleaner, "log_dir_metric_values", None))
        services = getattr(broker, "services", None)
        security = getattr(services, "security", None)
        if security is not None:
            self._authentication_source = lambda: dict(security.authentications)
        txn_coordinator = getattr(services, "txn_coordinator", None)
        if txn_coordinator is not None:
            self.set_txn_coordinator_source(txn_coordinator)
        quotas = getattr(services, "quotas", None)
        if quotas is not None:
            self._quota_source = lambda: quota_stats(quotas)
        coordinator: Any = getattr(services, "group_coordinator", None)
        if coordinator is not None and hasattr(coordinator, "consumer"):
            from rill.metrics_groups import GroupCoordinatorCollector

            self.registry.register(GroupCoordinatorCollector(coordinator))
        client_metrics = getattr(services, "client_metrics", None)
        if client_metrics is not None:
            from rill.telemetry.pushed_metrics import PushedMetricsCollector

            client_metrics.exporting = True
            self.registry.register(PushedMetricsCollector(client_metrics.pushed))
            self.registry.register(_ClientMetricsStats(client_metrics))
        offsets = getattr(coordinator, "committed_offsets", None)
        if callable(offsets):
            self.set_group_source(lambda: group_offsets(offsets()))
        elif isinstance(getattr(coordinator, "groups", None), Mapping):
            self.set_group_source(lambda: offsets_of_groups(coordinator.groups))

    def render(self) -> bytes:
        """The metrics in Prometheus' text format."""
        data: bytes = generate_latest(self.registry)
        return data


class _ClientMetricsStats:
    """Kafka's ``client-metrics`` group: instances held, throttled telemetry requests, pushes with an unknown
    subscription id, pushes exported and refused."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        prefix = "kafka_server_client_metrics_"
        yield GaugeMetricFamily(prefix + "instance_count", "Client metrics instances the broker holds.",
                                value=len(self.manager.instances))  # fmt: skip
        for name, count in dict(self.manager.counts).items():
            yield CounterMetricFamily(prefix + name, f"Client telemetry: {name.replace('_', ' ')} count.", value=count)


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
        yield from self._replication_families()
        yield from self._quota_families()

    def _quota_families(self) -> Iterator[Any]:
        """Per quota group (Kafka's Produce/Fetch/Request metrics, tagged user and client-id)."""
        stats: list[QuotaGroupStats] = _snapshot(self._m._quota_source, "client quota metrics")
        if not stats:
            return
        labels = ["user", "client_id"]
        families: dict[str, Any] = {}
        for s in stats:
            group = s.quota_type.lower()
            rate_name = "request_time" if group == "request" else "byte_rate"
            for name, doc, value in (
                (f"kafka_server_{group}_{rate_name}", f"{s.quota_type} quota group's rate (bytes per second; "
                 "request time: percent of one thread).", s.rate),
                (f"kafka_server_{group}_throttle_time", f"{s.quota_type} quota group's average throttle time (ms) "
                 "over the last minute.", s.throttle_time_ms),
            ):  # fmt: skip
                family = families.get(name)
                if family is None:
                    family = families[name] = GaugeMetricFamily(name, doc, labels=labels)
                family.add_metric([s.user, s.client_id], value)
        yield from families.values()

    def _replication_families(self) -> Iterator[Any]:
        source = self._m._replication_source
        stats = _snapshot(lambda: [source()] if source is not None else [], "replication stats")
        if not stats:
            return
        r: ReplicationStats = stats[0]
        rm, kc = "kafka_server_replicamanager_", "kafka_controller_kafkacontroller_"
        cs, fs = "kafka_controller_controllerstats_", "kafka_server_fetchsessioncache_"
        for family, name, doc, value in (
            (GaugeMetricFamily, rm + "partitioncount", "Partitions hosted.", r.partitions),
            (GaugeMetricFamily, rm + "leadercount", "Partitions led.", r.leaders),
            (GaugeMetricFamily, rm + "underreplicatedpartitions", "Led, ISR < replicas.", r.under_replicated),
            (GaugeMetricFamily, rm + "underminisrpartitioncount", "Led partitions, ISR < min.insync.replicas.",
             r.under_min_isr),
            (GaugeMetricFamily, rm + "atminisrpartitioncount", "Led partitions, ISR = min.insync.replicas.",
             r.at_min_isr),
            (CounterMetricFamily, rm + "isrshrinks", "ISR shrinks made as leader.", r.isr_shrinks),
            (CounterMetricFamily, rm + "isrexpands", "ISR expansions made as leader.", r.isr_expands),
            (GaugeMetricFamily, kc + "activecontrollercount", "1 on the controller.", r.active_controller),
            (GaugeMetricFamily, kc + "offlinepartitionscount", "Partitions without a live leader (controller).",
             r.offline_partitions),
            (CounterMetricFamily, cs + "uncleanleaderelections", "Unclean elections made as controller.",
             r.unclean_elections),
            (GaugeMetricFamily, fs + "numincrementalfetchsessions", "Incremental fetch sessions held.",
             r.fetch_sessions),
            (GaugeMetricFamily, fs + "numincrementalfetchpartitionscached", "Partitions held in fetch sessions.",
             r.fetch_session_partitions),
            (CounterMetricFamily, fs + "incrementalfetchsessionevictions", "Fetch sessions evicted.",
             r.fetch_session_evictions),
        ):  # fmt: skip
            yield family(name, doc, value=value)
        yield SummaryMetricFamily(cs + "leaderelectionrateandtimems", "Leader elections made as controller, and the "
                                  "milliseconds each took.", count_value=r.leader_elections,
                                  sum_value=r.election_time_ms)  # fmt: skip
        lag = GaugeMetricFamily("kafka_server_replicafetchermanager_maxlag", "Largest lag (offsets) of a followed "
                                "partition.", labels=["clientid"])  # fmt: skip
        lag.add_metric(["Replica"], r.fetcher_max_lag)
        yield lag

    def _topic_families(self) -> Iterator[Any]:
        prefix = "kafka_server_brokertopicmetrics_"
        bytes_in = CounterMetricFamily(prefix + "bytesin", "Bytes appended by producers.", labels=["topic"])
        bytes_out = CounterMetricFamily(prefix + "bytesout", "Bytes sent to consumers.", labels=["topic"])
        messages_in = CounterMetricFamily(prefix + "messagesin", "Records appended.", labels=["topic"])
        for topic, tally in list(self._m._topics.items()):
            bytes_in.add_metric([topic], tally.bytes_in)
            bytes_out.add_metric([topic], tally.bytes_out)
            messages_in.add_metric([topic], tally.messages_in)
        yield from (bytes_in, bytes_out, messages_in)
        yield CounterMetricFamily(prefix + "replicationbytesout", "Bytes sent to followers.",
                                  value=self._m._replication_bytes_out)  # fmt: skip

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
        lso_lag = GaugeMetricFamily(
            "kafka_cluster_partition_laststableoffsetlag", "High watermark minus last stable offset.", labels=pl
        )
        hw_by_tp: dict[tuple[str, int], int] = {}
        for s in _snapshot(m._partition_source, "partition stats"):
            labels = [s.topic, str(s.partition)]
            size.add_metric(labels, s.size_bytes)
            segments.add_metric(labels, s.num_segments)
            start.add_metric(labels, s.log_start_offset)
            end.add_metric(labels, s.log_end_offset)
            hw.add_metric(labels, s.high_watermark)
            lso_lag.add_metric(labels, s.last_stable_offset_lag)
            hw_by_tp[(s.topic, s.partition)] = s.high_watermark
        yield from (size, segments, start, end, hw, lso_lag)

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

        if m._authentication_source is not None:
            ok = CounterMetricFamily("kafka_server_socketservermetrics_successful_authentication",
                                     "Connections that authenticated, per listener.", labels=["listener"])  # fmt: skip
            failed = CounterMetricFamily("kafka_server_socketservermetrics_failed_authentication",
                                         "Authentications that failed, per listener.", labels=["listener"])  # fmt: skip
            for listener, (n_ok, n_failed) in _snapshot(lambda: list((m._authentication_source or dict)().items()),
                                                        "authentication counts"):  # fmt: skip
                ok.add_metric([listener], n_ok)
                failed.add_metric([listener], n_failed)
            yield from (ok, failed)

        if m._cleaner_source is not None:
            for name, v in _snapshot(lambda: list((m._cleaner_source or dict)().items()), "cleaner metrics"):
                yield GaugeMetricFamily(name, "Kafka's log cleaner gauge of this name.", value=v)
        if m._cleaner_dir_source is not None:
            source = m._cleaner_dir_source
            for name, by_dir in _snapshot(lambda: [(k, dict(v)) for k, v in source().items()], "cleaner metrics"):
                family = GaugeMetricFamily(
                    name, "Kafka's log cleaner gauge of this name, per log dir.", labels=["logdirectory"]
                )
                for directory, v in sorted(by_dir.items()):
                    family.add_metric([directory], v)
                yield family

        txn = m._txn_source
        if txn is not None:
            for name, v in _snapshot(lambda: list(txn.metric_values().items()), "transaction coordinator metrics"):
                yield GaugeMetricFamily(name, "Kafka's transaction coordinator gauge of this name.", value=v)
            outcomes = CounterMetricFamily(
                "rill_transactions_completed",
                "Transactions the coordinator completed, by outcome (timed_out: aborted at its timeout).",
                labels=["outcome"],
            )
            for outcome, n in _snapshot(lambda: list(txn.outcomes.items()), "transaction outcomes"):
                outcomes.add_metric([outcome], n)
            yield outcomes

        info = GaugeMetricFamily(
            "rill_implementation_info",
            "1 per module with a compiled implementation and a pure-Python twin, labelled with the one in use.",
            labels=["module", "implementation"],
        )
        for module, implementation in implementations().items():
            info.add_metric([module, implementation], 1)
        yield info


# The endpoint lives in its own module; imported here so that ``rill.metrics`` offers it as before.
from rill.metrics_http import MetricsServer, start_http_server  # noqa: E402

__all__ = ["BrokerMetrics", "MetricsServer", "start_http_server"]
