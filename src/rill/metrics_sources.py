"""What the broker's metrics read from a running broker at scrape time.

The gauges of ``rill.metrics.BrokerMetrics`` are not kept up to date by the broker: each scrape calls the
sources registered with it. This module holds the values those sources give (one partition's log, one group's
committed offset, the replication and controller counts, one client quota group) and the functions that read
them from the broker's parts (replica manager, controller, metadata store, group coordinator, quota managers).
``BrokerMetrics.attach`` wires them. They run on the scrape's thread and only read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


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
    last_stable_offset_lag: int = 0


@dataclass(frozen=True, slots=True)
class GroupOffset:
    """A group's committed offset for one partition; lag is computed against the high watermark."""

    group: str
    topic: str
    partition: int
    committed_offset: int


@dataclass(frozen=True, slots=True)
class ReplicationStats:
    """The broker's replication and controller state as the scrape sees it."""

    partitions: int
    leaders: int
    under_replicated: int
    under_min_isr: int
    at_min_isr: int
    isr_shrinks: int
    isr_expands: int
    fetcher_max_lag: int
    active_controller: int
    offline_partitions: int
    leader_elections: int
    unclean_elections: int
    election_time_ms: float
    fetch_sessions: int = 0
    fetch_session_partitions: int = 0
    fetch_session_evictions: int = 0


@dataclass(frozen=True, slots=True)
class QuotaGroupStats:
    """One client quota group's rate and throttle time as the scrape sees it."""

    quota_type: str  # Produce, Fetch, Request
    user: str
    client_id: str
    rate: float
    throttle_time_ms: float


PartitionSource = Callable[[], Iterable[PartitionStats]]
GroupSource = Callable[[], Iterable[GroupOffset]]
PurgatorySource = Callable[[], Mapping[str, int]]
CountSource = Callable[[], int]
ValuesSource = Callable[[], Mapping[str, float]]
LabelledValuesSource = Callable[[], Mapping[str, Mapping[str, float]]]  # name -> label value -> value


def quota_stats(quotas: Any) -> list[QuotaGroupStats]:
    now = time.monotonic_ns() // 1_000_000  # the quota managers' clock
    return [
        QuotaGroupStats(m.quota_type, s.user, s.client_id, s.rate.measure(now), s.throttle_time.measure(now))
        for m in quotas.all()
        for s in list(m.sensors.values())
    ]


def partition_stats(replica_manager: Any) -> list[PartitionStats]:
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
                int(partition.high_watermark - partition.last_stable_offset),
            )
        )
    return stats


def replication_stats(broker: Any) -> ReplicationStats:
    """ReplicaManager's counts over the partitions this broker leads; the controller's over the cluster."""
    rm, store, controller = broker.replica_manager, broker.metadata, broker.controller
    partitions = list(rm.partitions().values())
    leaders = under = under_min = at_min = 0
    for p in partitions:
        if p.is_leader:
            isr = len(p.state.isr)
            leaders += 1
            # Kafka's replication factor: a reassignment's replicas on their way out do not count.
            under += isr < len(p.state.replicas) - len(p.state.removing_replicas)
            under_min += isr < p.min_insync_replicas
            at_min += isr == p.min_insync_replicas
    active = bool(controller.active) if controller is not None else store.controller_id == broker.node_id
    offline = 0
    if active:
        live = {b.node_id for b in store.brokers()}
        offline = sum(s.leader not in live for t in list(store.topics().values()) for s in t.partitions)
    return ReplicationStats(
        len(partitions), leaders, under, under_min, at_min, int(rm.isr_shrinks), int(rm.isr_expands),
        int(rm.fetchers.max_lag()) if rm.fetchers is not None else 0, int(active), offline,
        int(getattr(controller, "elections", 0)), int(getattr(controller, "unclean_elections", 0)),
        float(getattr(controller, "election_time_ms", 0.0)), *_fetch_session_stats(broker),
    )  # fmt: skip


def _fetch_session_stats(broker: Any) -> tuple[int, int, int]:
    """The fetch session cache's sessions, partitions held and evictions (zeros before the first Fetch)."""
    services = getattr(broker, "services", None)
    cache = getattr(services, "fetch_sessions", None)
    if cache is None:
        return 0, 0, 0
    return len(cache), int(cache.total_partitions), int(cache.evictions)


def purgatory_sizes(replica_manager: Any) -> dict[str, int]:
    # Only fetches wait: a Produce with acks=all completes at append while the ISR is this one replica.
    purgatory = replica_manager.fetch_purgatory
    return {str(purgatory.name): int(purgatory.size)}


def group_offsets(raw: Iterable[Any]) -> list[GroupOffset]:
    """Accept ``GroupOffset``s or ``(group, topic, partition, offset)`` tuples from the coordinator."""
    result = []
    for item in raw:
        if isinstance(item, GroupOffset):
            result.append(item)
        else:
            group, topic, partition, offset = item
            result.append(GroupOffset(str(group), str(topic), int(partition), int(offset)))
    return result


def offsets_of_groups(groups: Mapping[str, Any]) -> list[GroupOffset]:
    """Committed offsets read from a coordinator's ``groups`` (``GroupMetadata.offsets`` by partition)."""
    result = []
    for group_id, group in list(groups.items()):
        for tp, committed in list(getattr(group, "offsets", {}).items()):
            result.append(GroupOffset(str(group_id), tp.topic, int(tp.partition), int(committed.offset)))
    return result
