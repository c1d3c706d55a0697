"""The group coordinator's metrics, with the names of Kafka's ``group-coordinator-metrics`` (as a JMX exporter
writes them), for both kinds of group:

- ``kafka_server_group_coordinator_metrics_group_count`` (protocol): groups by protocol, ``classic`` and
  ``consumer`` (Kafka's group-count)
- ``kafka_server_group_coordinator_metrics_consumer_group_count`` (state): consumer groups by state, ``empty``,
  ``assigning``, ``reconciling``, ``stable`` (consumer-group-count)
- ``kafka_server_group_coordinator_metrics_classic_group_count`` (state): classic groups by state
  (classic-group-count)
- ``kafka_server_group_coordinator_metrics_consumer_group_rebalance_count``: consumer group rebalances completed
  (from a group epoch bump until every member reached the new target; consumer-group-rebalance-count), and
  ``..._consumer_group_rebalance_time_ms_total`` the time they took
- ``kafka_server_group_coordinator_metrics_classic_group_completed_rebalance_count``: classic groups' completed
  rebalances, and ``..._classic_group_rebalance_time_ms_total`` the time they took
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily

log = logging.getLogger(__name__)

PREFIX = "kafka_server_group_coordinator_metrics_"
CONSUMER_STATES = ("empty", "assigning", "reconciling", "stable")
CLASSIC_STATES = ("preparingrebalance", "completingrebalance", "stable", "empty")


class GroupCoordinatorCollector:
    """Read at scrape time from the broker's group coordinator."""

    def __init__(self, coordinator: Any) -> None:
        self.coordinator = coordinator

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        for attempt in range(3):  # the event loop may change the groups while a scrape on another thread reads
            try:
                families = self._families()
            except RuntimeError:
                if attempt == 2:
                    log.warning("metrics: the groups changed during three scrapes in a row; skipped")
                continue
            yield from families
            return

    def _families(self) -> list[Any]:
        c = self.coordinator
        consumer = c.consumer
        consumer_groups = list(consumer.groups.values())
        classic = [g for gid, g in list(c.groups.items()) if gid not in consumer.groups and g.state.value != "Dead"]
        by_protocol = GaugeMetricFamily(PREFIX + "group_count", "Groups by protocol.", labels=["protocol"])
        by_protocol.add_metric(["classic"], len(classic))
        by_protocol.add_metric(["consumer"], len(consumer_groups))
        consumer_states = GaugeMetricFamily(PREFIX + "consumer_group_count", "Consumer groups by state.",
                                            labels=["state"])  # fmt: skip
        counts = dict.fromkeys(CONSUMER_STATES, 0)
        for group in consumer_groups:
            state = group.state.value.lower()
            counts[state] = counts.get(state, 0) + 1
        for state, n in counts.items():
            consumer_states.add_metric([state], n)
        classic_states = GaugeMetricFamily(PREFIX + "classic_group_count", "Classic groups by state.", labels=["state"])
        counts = dict.fromkeys(CLASSIC_STATES, 0)
        for group in classic:
            state = group.state.value.lower()
            counts[state] = counts.get(state, 0) + 1
        for state, n in counts.items():
            classic_states.add_metric([state], n)
        rebalances = GaugeMetricFamily(PREFIX + "consumer_group_rebalance_count", "Consumer group rebalances.",
                                       value=consumer.rebalance_count)  # fmt: skip
        rebalance_time = GaugeMetricFamily(PREFIX + "consumer_group_rebalance_time_ms_total",
                                           "Time consumer group rebalances took.",
                                           value=consumer.rebalance_time_ms_total)  # fmt: skip
        classic_rebalances = GaugeMetricFamily(PREFIX + "classic_group_completed_rebalance_count",
                                               "Classic group rebalances completed.",
                                               value=getattr(c, "rebalance_count", 0))  # fmt: skip
        classic_time = GaugeMetricFamily(PREFIX + "classic_group_rebalance_time_ms_total",
                                         "Time classic group rebalances took.",
                                         value=getattr(c, "rebalance_time_ms_total", 0.0))  # fmt: skip
        return [by_protocol, consumer_states, classic_states, rebalances, rebalance_time, classic_rebalances,
                classic_time]  # fmt: skip
