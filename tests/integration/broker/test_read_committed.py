"""Transactional batches produced over a real socket, ended by markers, read by real consumers: read_committed
sees only committed records (and stops at an open transaction), read_uncommitted sees every data record, and
neither sees a control record."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.broker._wire import Wire
from tests.integration.test_metrics import _free_port, scrape, value

import rill.testing
from rill.common import TopicPartition as TP
from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.records.builder import build_batch
from rill.records.record import Record

pytestmark = pytest.mark.timeout(120)


def _on_loop(b: rill.testing.TestBroker, coro: Awaitable[Any]) -> Any:
    loop = b.broker._background.get_loop()
    return asyncio.run_coroutine_threadsafe(coro, loop).result(20)  # type: ignore[arg-type]


def _produce(wire: Wire, topic: str, pid: int, seq: int, values: list[bytes], *, txn_id: str | None) -> Any:
    records = [Record(0, 1_700_000_000_000, None, v) for v in values]
    batch = build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)
    body = {
        "transactional_id": txn_id,
        "acks": -1,
        "timeout_ms": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }
    return wire.call(ApiKey.PRODUCE, 9, body)["responses"][0]["partition_responses"][0]


def _consume(bootstrap: str, topic: str, isolation: str, expect_at_least: int) -> tuple[list[bytes], int]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        idle = 0
        while idle < 6:
            msg = consumer.poll(0.5)
            if msg is None:
                idle += 1 if len(values) >= expect_at_least else 0
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
        position = consumer.position([TopicPartition(topic, 0)])[0].offset
    finally:
        consumer.close()
    return values, position


def test_read_committed_sees_committed_records_only() -> None:
    metrics_port = _free_port()
    # transactional batches written without a coordinator (no AddPartitionsToTxn): KIP-890's check is off
    overrides = {"metrics.port": str(metrics_port), "transaction.partition.verification.enable": "false"}
    with rill.testing.broker(overrides) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.create_topics([NewTopic("t", 1)])["t"].result(10)
        rm = b.broker.replica_manager
        asked: list[tuple[str, int, int, TP]] = []

        async def verifier(txn_id: str, pid: int, epoch: int, tp: TP) -> ErrorCode:
            asked.append((txn_id, pid, epoch, tp))
            return ErrorCode.INVALID_TXN_STATE if txn_id == "refused" else ErrorCode.NO_ERROR

        rm.txn_verifier = verifier
        wire = Wire(b.bootstrap_servers)
        try:
            # a transactional batch without a transactional id, and one the verifier refuses: nothing appended
            assert _produce(wire, "t", 1, 0, [b"x"], txn_id=None)["error_code"] == (
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            )
            assert _produce(wire, "t", 1, 0, [b"x"], txn_id="refused")["error_code"] == ErrorCode.INVALID_TXN_STATE
            assert _produce(wire, "t", 1, 0, [b"c1", b"c2"], txn_id="a")["base_offset"] == 0
            assert _produce(wire, "t", 2, 0, [b"a1"], txn_id="b")["base_offset"] == 2
            assert _produce(wire, "t", 1, 2, [b"c3"], txn_id="a")["base_offset"] == 3  # no second verification
            assert [a[:3] for a in asked] == [("refused", 1, 0), ("a", 1, 0), ("b", 2, 0)]
            assert _on_loop(b, rm.append_txn_marker(TP("t", 0), 2, 0, 0, False)) is ErrorCode.NO_ERROR  # 4
            assert _on_loop(b, rm.append_txn_marker(TP("t", 0), 1, 0, 0, True)) is ErrorCode.NO_ERROR  # 5
            assert _produce(wire, "t", 2, 1, [b"a2"], txn_id="b")["base_offset"] == 6
            assert _on_loop(b, rm.append_txn_marker(TP("t", 0), 2, 0, 0, False)) is ErrorCode.NO_ERROR  # 7
            assert _produce(wire, "t", 3, 0, [b"open"], txn_id="c")["base_offset"] == 8  # stays open
            # ListOffsets latest: the high watermark, or with read_committed the last stable offset
            req = {"replica_id": -1, "isolation_level": 1,
                   "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}  # fmt: skip
            assert wire.call(ApiKey.LIST_OFFSETS, 5, req)["topics"][0]["partitions"][0]["offset"] == 8
            req["isolation_level"] = 0
            assert wire.call(ApiKey.LIST_OFFSETS, 5, req)["topics"][0]["partitions"][0]["offset"] == 9
            lag = value(scrape(metrics_port), "kafka_cluster_partition_laststableoffsetlag", topic="t", partition="0")
            assert lag == 1  # the open transaction holds one record back
        finally:
            wire.close()

        committed, position = _consume(b.bootstrap_servers, "t", "read_committed", 3)
        assert committed == [b"c1", b"c2", b"c3"]
        assert position == 8  # up to the last stable offset
        everything, position = _consume(b.bootstrap_servers, "t", "read_uncommitted", 6)
        assert everything == [b"c1", b"c2", b"a1", b"c3", b"a2", b"open"]
        assert position == 9


def _markers(wire: Wire, version: int, *markers: tuple[int, int, bool, int, str, list[int]]) -> list[Any]:
    body = {
        "markers": [
            {
                "producer_id": pid,
                "producer_epoch": epoch,
                "transaction_result": commit,
                "coordinator_epoch": coordinator_epoch,
                "topics": [{"name": topic, "partition_indexes": parts}],
            }
            for pid, epoch, commit, coordinator_epoch, topic, parts in markers
        ]
    }
    return [
        {(t["name"], p["partition_index"]): p["error_code"] for t in m["topics"] for p in t["partitions"]}
        for m in wire.call(ApiKey.WRITE_TXN_MARKERS, version, body)["markers"]
    ]


def _producers(wire: Wire, topic: str, parts: list[int]) -> list[Any]:
    body = {"topics": [{"name": topic, "partition_indexes": parts}]}
    return wire.call(ApiKey.DESCRIBE_PRODUCERS, 0, body)["topics"][0]["partitions"]


@pytest.mark.parametrize("version", [0, 1])
def test_write_txn_markers_and_describe_producers_over_the_wire(version: int) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    # transactional batches written without a coordinator (no AddPartitionsToTxn): KIP-890's check is off
    with rill.testing.broker({"transaction.partition.verification.enable": "false"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.create_topics([NewTopic("w", 2)])["w"].result(10)
        wire = Wire(b.bootstrap_servers)
        try:
            assert _produce(wire, "w", 5, 0, [b"keep"], txn_id="x")["error_code"] == 0
            assert _produce(wire, "w", 6, 0, [b"drop"], txn_id="y")["error_code"] == 0
            producers = _producers(wire, "w", [0, 1, 7])
            assert [p["error_code"] for p in producers] == [0, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
            assert [(a["producer_id"], a["producer_epoch"], a["last_sequence"], a["current_txn_start_offset"])
                    for a in producers[0]["active_producers"]] == [(5, 0, 0, 0), (6, 0, 0, 1)]  # fmt: skip
            assert producers[1]["active_producers"] == []
            results = _markers(wire, version, (5, 0, True, 3, "w", [0, 1]), (6, 0, False, 3, "w", [0, 9]))
            assert results == [
                {("w", 0): 0, ("w", 1): 0},
                {("w", 0): 0, ("w", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
            ]
            # a stale coordinator epoch and an old producer epoch are refused per partition
            assert _markers(wire, version, (5, 0, True, 2, "w", [0])) == [
                {("w", 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}
            ]
            active = {a["producer_id"]: a for a in _producers(wire, "w", [0])[0]["active_producers"]}
            assert active[5]["coordinator_epoch"] == 3 and active[5]["current_txn_start_offset"] == -1
            assert active[6]["current_txn_start_offset"] == -1 and active[6]["last_timestamp"] > 1_700_000_000_000
        finally:
            wire.close()

        consumer = KafkaConsumer(bootstrap_servers=b.bootstrap_servers, isolation_level="read_committed",
                                 enable_auto_commit=False, consumer_timeout_ms=3000)  # fmt: skip
        try:
            consumer.assign([KTP("w", 0)])
            consumer.seek(KTP("w", 0), 0)
            assert [m.value for m in consumer] == [b"keep"]
        finally:
            consumer.close()


def test_aiokafka_read_committed() -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    with rill.testing.broker({"transaction.partition.verification.enable": "false"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.create_topics([NewTopic("ai", 1)])["ai"].result(10)
        rm = b.broker.replica_manager
        wire = Wire(b.bootstrap_servers)
        try:
            _produce(wire, "ai", 1, 0, [b"drop1", b"drop2"], txn_id="a")
            _produce(wire, "ai", 2, 0, [b"keep1"], txn_id="b")
            assert _on_loop(b, rm.append_txn_marker(TP("ai", 0), 1, 0, 0, False)) is ErrorCode.NO_ERROR
            _produce(wire, "ai", 2, 1, [b"keep2"], txn_id="b")
            assert _on_loop(b, rm.append_txn_marker(TP("ai", 0), 2, 0, 0, True)) is ErrorCode.NO_ERROR
        finally:
            wire.close()

        async def consume(isolation: str, expected: int) -> list[bytes]:
            consumer = AIOKafkaConsumer(bootstrap_servers=b.bootstrap_servers, isolation_level=isolation,
                                        enable_auto_commit=False, auto_offset_reset="earliest")  # fmt: skip
            await consumer.start()
            try:
                consumer.assign([ATP("ai", 0)])
                out: list[bytes] = []
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    batches = await consumer.getmany(timeout_ms=500)
                    out += [m.value for ms in batches.values() for m in ms if m.value is not None]
                    if len(out) >= expected:
                        await asyncio.sleep(0.5)  # anything more would show now
                        batches = await consumer.getmany(timeout_ms=500)
                        out += [m.value for ms in batches.values() for m in ms if m.value is not None]
                        break
                return out
            finally:
                await consumer.stop()

        assert asyncio.run(consume("read_committed", 2)) == [b"keep1", b"keep2"]
        assert asyncio.run(consume("read_uncommitted", 4)) == [b"drop1", b"drop2", b"keep1", b"keep2"]


@pytest.mark.parametrize("kill", [True, False])
def test_a_restart_keeps_open_and_aborted_transactions(kill: bool) -> None:
    with rill.testing.broker({"transaction.partition.verification.enable": "false"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.create_topics([NewTopic("r", 1)])["r"].result(10)
        rm = b.broker.replica_manager
        wire = Wire(b.bootstrap_servers)
        try:
            _produce(wire, "r", 1, 0, [b"gone"], txn_id="a")  # 0
            _produce(wire, "r", 2, 0, [b"kept"], txn_id="b")  # 1
            assert _on_loop(b, rm.append_txn_marker(TP("r", 0), 1, 0, 0, False)) is ErrorCode.NO_ERROR  # 2
            assert _on_loop(b, rm.append_txn_marker(TP("r", 0), 2, 0, 0, True)) is ErrorCode.NO_ERROR  # 3
            _produce(wire, "r", 3, 0, [b"open"], txn_id="c")  # 4, stays open
        finally:
            wire.close()
        b.restart(kill=kill)
        wire = Wire(b.bootstrap_servers)
        try:
            body = {"topics": [{"name": "r", "partition_indexes": [0]}]}
            part = wire.call(ApiKey.DESCRIBE_PRODUCERS, 0, body)["topics"][0]["partitions"][0]
            assert {p["producer_id"]: p["current_txn_start_offset"] for p in part["active_producers"]} == {
                1: -1,
                2: -1,
                3: 4,
            }
        finally:
            wire.close()
        committed, position = _consume(b.bootstrap_servers, "r", "read_committed", 1)
        assert committed == [b"kept"] and position == 4
        assert _consume(b.bootstrap_servers, "r", "read_uncommitted", 3)[0] == [b"gone", b"kept", b"open"]
