"""librdkafka (confluent-kafka) pushes its metrics (``enable.metrics.push``, on by default) when the broker offers
a subscription, and they show on the broker's Prometheus endpoint; with no subscription it asks and pushes
nothing."""

from __future__ import annotations

import subprocess
import sys
import time

import confluent_kafka
import pytest
from tests.integration.telemetry._telemetry import free_port, pushed, scrape, wait_for

import rill.testing

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def _requests(port: int, request: str) -> float:
    return scrape(port).get(("kafka_network_requestmetrics_requests_total", (("request", request),)), 0.0)


def test_producer_and_consumer_metrics_on_the_prometheus_endpoint() -> None:
    port = free_port()
    with rill.testing.broker({"metrics.port": str(port), "group.initial.rebalance.delay.ms": "0"}) as b:
        bs = b.bootstrap_servers
        r = subprocess.run([sys.executable, "-m", "rill", "configs", "--bootstrap-server", bs, "--alter",
                            "--entity-type", "client-metrics", "--entity-name", "librdkafka", "--add-config",
                            "metrics=[org.apache.kafka.producer.,org.apache.kafka.consumer.],interval.ms=500,"
                            "match=[client_software_name=confluent-kafka-python|librdkafka]"],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        assert r.returncode == 0, r.stderr
        producer = confluent_kafka.Producer({"bootstrap.servers": bs, "client.id": "tel-producer"})
        consumer = confluent_kafka.Consumer({"bootstrap.servers": bs, "group.id": "tel", "client.id": "tel-consumer",
                                             "auto.offset.reset": "earliest"})  # fmt: skip
        consumer.subscribe(["telemetry"])
        try:
            def step() -> None:
                producer.produce("telemetry", b"v")
                producer.poll(0)
                consumer.poll(0.1)

            def both() -> dict[str, set[str]] | None:
                names = {name for name, _ in pushed(scrape(port))}
                kinds = {k: {n for n in names if n.startswith(f"org_apache_kafka_{k}_")}
                         for k in ("producer", "consumer")}  # fmt: skip
                return kinds if all(kinds.values()) else None

            kinds = wait_for("the producer's and the consumer's pushed metrics", both, 90, step)
            assert "org_apache_kafka_producer_node_request_latency_avg" in kinds["producer"]
            assert any(n.startswith("org_apache_kafka_consumer_") for n in kinds["consumer"])
            samples = pushed(scrape(port))
            instances = {dict(labels)["client_instance_id"] for _, labels in samples}
            assert len(instances) == 2  # one client instance each
            assert ("node_id", "0") in {kv for _, labels in samples for kv in labels}
            assert _requests(port, "PushTelemetry") >= 2
        finally:
            consumer.close()
            producer.flush(10)


def test_without_a_subscription_no_push_arrives() -> None:
    port = free_port()
    with rill.testing.broker({"metrics.port": str(port)}) as b:
        producer = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers})
        delivered: list[object] = []
        producer.produce("no-telemetry", b"v", on_delivery=lambda err, msg: delivered.append(err))
        wait_for("the subscription asked for", lambda: _requests(port, "GetTelemetrySubscriptions") >= 1, 60,
                 lambda: producer.poll(0.1))  # fmt: skip
        wait_for("the delivery", lambda: delivered, 60, lambda: producer.poll(0.1))
        # A client offered a subscription pushes at once after asking (the first push of an interval is taken
        # right after the answer); this one was offered none, so within a few seconds nothing comes.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            producer.poll(0.1)
        assert _requests(port, "PushTelemetry") == 0
        assert pushed(scrape(port)) == {}
        producer.flush(10)
