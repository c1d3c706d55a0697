"""Transactional batches produced over a real socket, ended by markers, read by real consumers: read_committed
sees only committed records (and stops at an open transaction), read_uncommitted sees every data record, and
neither sees a control record."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.broker._wire import Wire

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
    with rill.testing.broker() as b:
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
        finally:
            wire.close()

        committed, position = _consume(b.bootstrap_servers, "t", "read_committed", 3)
        assert committed == [b"c1", b"c2", b"c3"]
        assert position == 8  # up to the last stable offset
        everything, position = _consume(b.bootstrap_servers, "t", "read_uncommitted", 6)
        assert everything == [b"c1", b"c2", b"a1", b"c3", b"a2", b"open"]
        assert position == 9
