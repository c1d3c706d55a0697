"""Transaction markers on a replicated partition: the followers replay the markers, so after the leader is
killed the new leader answers the same last stable offset, the same aborted transactions (from its own
transaction index) and the same producers' open transactions, and read_committed consumers see only committed
records."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from tests.cluster._helpers import create_topic
from tests.integration.broker._wire import Wire

from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.records.builder import build_batch
from rill.records.record import Record
from rill.testing.cluster import TestCluster, cluster

pytestmark = [pytest.mark.slow]

TOPIC = "txm"


def _produce(wire: Wire, pid: int, seq: int, values: list[bytes]) -> Any:
    records = [Record(0, int(time.time() * 1000), None, v) for v in values]
    batch = build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)
    body = {"transactional_id": f"t{pid}", "acks": -1, "timeout_ms": 10000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]}  # fmt: skip
    return wire.call(ApiKey.PRODUCE, 9, body)["responses"][0]["partition_responses"][0]


def _marker(wire: Wire, pid: int, commit: bool, coordinator_epoch: int = 1) -> int:
    body = {"markers": [{"producer_id": pid, "producer_epoch": 0, "transaction_result": commit,
                         "coordinator_epoch": coordinator_epoch,
                         "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]}  # fmt: skip
    return int(wire.call(ApiKey.WRITE_TXN_MARKERS, 1, body)["markers"][0]["topics"][0]["partitions"][0]["error_code"])


def _list_offsets(wire: Wire) -> dict[str, Any]:
    body = {"replica_id": -1, "isolation_level": 1,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}  # fmt: skip
    return dict(wire.call(ApiKey.LIST_OFFSETS, 5, body)["topics"][0]["partitions"][0])


def _lso(wire: Wire) -> int:
    part = _list_offsets(wire)
    assert part["error_code"] == 0, part
    return int(part["offset"])


def _fetch_committed(wire: Wire) -> Any:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 1,
            "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "fetch_offset": 0, "log_start_offset": -1,
                                                        "partition_max_bytes": 1 << 20}]}]}  # fmt: skip
    return wire.call(ApiKey.FETCH, 11, body)["responses"][0]["partitions"][0]


def _read_committed(c: TestCluster) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": f"rc-{time.monotonic()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    out: list[bytes] = []
    idle_until = time.monotonic() + 30
    try:
        while time.monotonic() < idle_until:
            msg = consumer.poll(0.5)
            if msg is None:
                if out:
                    idle_until = min(idle_until, time.monotonic() + 2)
                continue
            assert msg.error() is None, msg.error()
            out.append(msg.value())
    finally:
        consumer.close()
    return out


@pytest.mark.timeout(240)
@pytest.fixture
def rill3() -> Iterator[TestCluster]:
    """Three brokers, min.insync.replicas=2; the batches here are transactional without a coordinator (no
    AddPartitionsToTxn), so KIP-890's verification is off."""
    with cluster(brokers=3, min_insync_replicas=2, transaction_partition_verification_enable="false") as c:
        yield c


def test_markers_and_the_last_stable_offset_survive_a_leader_kill(rill3: TestCluster) -> None:
    create_topic(rill3, TOPIC, partitions=1)
    rill3.wait_for(lambda: len(rill3.isr(TOPIC, 0)) == 3, what="the full ISR")
    leader = rill3.leader(TOPIC, 0)
    wire = Wire(rill3.broker(leader).bootstrap_servers, timeout=30)
    try:
        assert _produce(wire, 1, 0, [b"c1", b"c2"])["error_code"] == 0  # 0-1, committed
        assert _produce(wire, 2, 0, [b"a1"])["error_code"] == 0  # 2, aborted
        assert _produce(wire, 1, 2, [b"c3"])["error_code"] == 0  # 3
        assert _marker(wire, 2, False) == ErrorCode.NO_ERROR  # 4
        assert _marker(wire, 1, True) == ErrorCode.NO_ERROR  # 5
        assert _produce(wire, 3, 0, [b"open"])["error_code"] == 0  # 6, stays open
        assert _marker(wire, 1, True, coordinator_epoch=0) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
        assert _lso(wire) == 6
        fetched = _fetch_committed(wire)
        assert fetched["last_stable_offset"] == 6 and fetched["high_watermark"] == 7
        assert fetched["aborted_transactions"] == [{"producer_id": 2, "first_offset": 2}]
    finally:
        wire.close()
    assert _read_committed(rill3) == [b"c1", b"c2", b"c3"]

    rill3.kill(leader)
    try:
        rill3.wait_for(lambda: rill3.leader(TOPIC, 0) not in (-1, leader), timeout=60, what="a new leader")
        new_leader = rill3.leader(TOPIC, 0)
        wire = Wire(rill3.broker(new_leader).bootstrap_servers, timeout=30)
        try:
            deadline = time.monotonic() + 30
            while True:  # the new leader's high watermark catches up with its log end first
                fetched = _fetch_committed(wire)
                # a follower in the ISR answers a consumer's Fetch too (KIP-392); ListOffsets only a leader
                led = _list_offsets(wire)["error_code"] == ErrorCode.NO_ERROR
                done = led and fetched["error_code"] == 0 and fetched["high_watermark"] == 7
                if done or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert fetched["error_code"] == 0 and fetched["high_watermark"] == 7
            assert fetched["last_stable_offset"] == 6  # producer 3's transaction is still open here
            assert fetched["aborted_transactions"] == [{"producer_id": 2, "first_offset": 2}]
            assert _lso(wire) == 6
            body = {"topics": [{"name": TOPIC, "partition_indexes": [0]}]}
            producers = wire.call(ApiKey.DESCRIBE_PRODUCERS, 0, body)["topics"][0]["partitions"][0]
            open_txns = {p["producer_id"]: p["current_txn_start_offset"] for p in producers["active_producers"]}
            assert open_txns == {1: -1, 2: -1, 3: 6}
            # the coordinator epoch each follower saw still fences
            assert _marker(wire, 1, True, coordinator_epoch=0) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
            assert _marker(wire, 3, False) == ErrorCode.NO_ERROR  # ends the open transaction on the new leader
            assert _lso(wire) == 8
        finally:
            wire.close()
        assert _read_committed(rill3) == [b"c1", b"c2", b"c3"]
    finally:
        rill3.start(leader)
        rill3.wait_for(lambda: len(rill3.isr(TOPIC, 0)) == 3, timeout=60, what="the full ISR again")
