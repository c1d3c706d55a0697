"""Client quotas in a ZooKeeper cluster: written through one broker as Kafka 2.x writes them
(``/config/clients/<client-id>``), in effect on every broker within 2 s, removed the same way."""

from __future__ import annotations

import json
import time

import pytest
from tests.cluster._helpers import create_topic
from tests.integration.broker._wire import Wire
from tests.integration.quotas._quota_clients import alter_quotas

from rill.protocol import ApiKey
from rill.records.builder import build_batch
from rill.records.record import Record
from rill.testing.cluster import TestCluster

pytestmark = [pytest.mark.slow, pytest.mark.timing, pytest.mark.timeout(120)]

CLIENT = "wire-test"


def _quotas_on(c: TestCluster, broker_id: int) -> list[dict[str, float]]:
    w = Wire(c.broker(broker_id).bootstrap_servers)
    try:
        body = {"components": [{"entity_type": "client-id", "match_type": 0, "match": CLIENT}], "strict": True}
        r = w.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, body)
    finally:
        w.close()
    return [{v["key"]: v["value"] for v in e["values"]} for e in r["entries"]]


def _wait_everywhere(c: TestCluster, expected: list[dict[str, float]]) -> float:
    start = time.monotonic()
    pending = set(c.brokers)
    while pending and time.monotonic() - start < 10:
        pending = {b for b in pending if _quotas_on(c, b) != expected}
        time.sleep(0.02)
    assert not pending, f"brokers {sorted(pending)} do not show {expected}"
    return time.monotonic() - start


def test_a_quota_written_through_one_broker_applies_on_every_broker(rill3: TestCluster) -> None:
    create_topic(rill3, "cq", partitions=3, replication_factor=1)
    alter_quotas(rill3.broker(0).bootstrap_servers, {"client-id": CLIENT}, {"producer_byte_rate": 16_000.0})
    assert _wait_everywhere(rill3, [{"producer_byte_rate": 16_000.0}]) < 2.0
    stored = json.loads(rill3._zk_get(f"/config/clients/{CLIENT}") or b"{}")
    assert stored == {"version": 1, "config": {"producer_byte_rate": "16000"}}

    # a produce to a partition another broker leads is throttled there
    partition = next(p for p in range(3) if rill3.leader("cq", p) != 0)
    w = Wire(rill3.broker(rill3.leader("cq", partition)).bootstrap_servers)
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": "cq", "partition_data": [{"index": partition, "records": build_batch(
            [Record(0, 1_700_000_000_000, b"k", b"v" * 200_000, [])])}]}]}  # fmt: skip
    assert w.call(ApiKey.PRODUCE, 9, body)["throttle_time_ms"] > 0
    w.close()

    alter_quotas(rill3.broker(2).bootstrap_servers, {"client-id": CLIENT}, {"producer_byte_rate": None})
    assert _wait_everywhere(rill3, []) < 2.0
