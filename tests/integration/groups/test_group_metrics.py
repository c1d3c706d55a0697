"""The group coordinator's metrics with Kafka's names, for a classic and a consumer group side by side."""

from __future__ import annotations

import socket
import time
import urllib.request

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

import rill.testing

PREFIX = "kafka_server_group_coordinator_metrics_"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}  # fmt: skip


def test_group_counts_and_rebalances_of_both_protocols() -> None:
    port = _free_port()
    configs = {"metrics.port": str(port), "group.consumer.heartbeat.interval.ms": "300",
               "group.consumer.min.heartbeat.interval.ms": "100", "group.initial.rebalance.delay.ms": "0"}  # fmt: skip
    with rill.testing.broker(configs) as b:
        bs = b.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("metrics-groups", 2, 1)])["metrics-groups"].result(30)
        consumers = []
        for group, protocol in (("m-new", "consumer"), ("m-old", "classic")):
            c = confluent_kafka.Consumer({"bootstrap.servers": bs, "group.id": group, "group.protocol": protocol})
            c.subscribe(["metrics-groups"])
            consumers.append(c)
        try:
            deadline = time.monotonic() + 30
            while True:
                for c in consumers:
                    c.poll(0.1)
                s = _scrape(port)
                if (
                    s.get((PREFIX + "consumer_group_count", (("state", "stable"),))) == 1
                    and s.get((PREFIX + "classic_group_count", (("state", "stable"),))) == 1
                ):
                    break
                assert time.monotonic() < deadline, s
            assert s[(PREFIX + "group_count", (("protocol", "consumer"),))] == 1
            assert s[(PREFIX + "group_count", (("protocol", "classic"),))] == 1
            assert s[(PREFIX + "consumer_group_rebalance_count", ())] >= 1
            assert s[(PREFIX + "classic_group_completed_rebalance_count", ())] >= 1
            assert s[(PREFIX + "consumer_group_rebalance_time_ms_total", ())] > 0
        finally:
            for c in consumers:
                c.close()
