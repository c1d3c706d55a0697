"""``producer.id.expiration.ms`` on a broker: a producer idle that long is forgotten (DescribeProducers no longer
lists it, the snapshots no longer hold it), once after a start and every
``producer.id.expiration.check.interval.ms``; a change of the dynamic value applies without a restart; a producer
with a transaction open is kept."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from tests.integration.broker._wire import Wire
from tests.integration.transactions._txn import add_partitions, find_txn_coordinator, init_pid

from rill.protocol import ApiKey
from rill.records.builder import build_batch
from rill.records.record import Record

pytestmark = pytest.mark.timeout(90)

DAY_MS = 86_400_000


def _produce(w: Wire, topic: str, pid: int, ts: int, *, txn_id: str | None = None, epoch: int = 0) -> None:
    batch = build_batch([Record(0, ts, b"k", b"v")], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                        is_transactional=txn_id is not None)  # fmt: skip
    body = {"transactional_id": txn_id, "acks": -1, "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}  # fmt: skip
    (part,) = w.call(ApiKey.PRODUCE, 9, body)["responses"][0]["partition_responses"]
    assert part["error_code"] == 0, part


def _producers(bootstrap: str, topic: str) -> set[int]:
    w = Wire(bootstrap, timeout=30)
    try:
        body = {"topics": [{"name": topic, "partition_indexes": [0]}]}
        (part,) = w.call(ApiKey.DESCRIBE_PRODUCERS, 0, body)["topics"][0]["partitions"]
        assert part["error_code"] == 0, part
        return {p["producer_id"] for p in part["active_producers"]}
    finally:
        w.close()


def _wait_for(bootstrap: str, topic: str, want: set[int], timeout: float = 20.0) -> set[int]:
    deadline = time.monotonic() + timeout
    while (got := _producers(bootstrap, topic)) != want and time.monotonic() < deadline:
        time.sleep(0.1)
    return got


def test_a_producer_idle_past_the_expiration_is_forgotten_after_a_restart(rill_broker: Any) -> None:
    bootstrap = rill_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("pexp", 1, 1)])["pexp"].result(10)
    now = int(time.time() * 1000)
    w = Wire(bootstrap, timeout=30)
    try:
        _produce(w, "pexp", 5001, now - 2 * DAY_MS)  # idle for two days: past the default day
        _produce(w, "pexp", 5002, now)
    finally:
        w.close()
    assert _producers(bootstrap, "pexp") == {5001, 5002}
    rill_broker.restart()
    assert _wait_for(bootstrap, "pexp", {5002}) == {5002}


@pytest.mark.rill_broker_config(**{"producer.id.expiration.check.interval.ms": "100",
                                   "transaction.state.log.num.partitions": "1"})  # fmt: skip
def test_a_changed_expiration_applies_at_once_and_spares_open_transactions(rill_broker: Any) -> None:
    bootstrap = rill_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("pexp2", 1, 1)])["pexp2"].result(10)
    w = Wire(bootstrap, timeout=30)
    try:
        _produce(w, "pexp2", 6001, int(time.time() * 1000))
        find_txn_coordinator(w, "pexp-tx")
        r = init_pid(w, "pexp-tx")
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert add_partitions(w, "pexp-tx", pid, epoch, "pexp2", [0]) == {0: 0}
        _produce(w, "pexp2", pid, int(time.time() * 1000), txn_id="pexp-tx", epoch=epoch)
    finally:
        w.close()
    assert _producers(bootstrap, "pexp2") == {6001, pid}
    resource = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("producer.id.expiration.ms", "1000", incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    admin.incremental_alter_configs([resource])[resource].result(10)
    assert _wait_for(bootstrap, "pexp2", {pid}) == {pid}  # the idle one goes; the open transaction's stays
    time.sleep(0.5)  # five more checks
    assert _producers(bootstrap, "pexp2") == {pid}
