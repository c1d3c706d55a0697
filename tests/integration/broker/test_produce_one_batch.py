"""Produce v3+ carries exactly one record batch per partition, as in Kafka: a partition whose records hold more
is refused with INVALID_RECORD and nothing of it is written, so no second batch slips past the checks made on
the first (a transactional batch behind a plain one opened a transaction no coordinator knew, without the
transactional id's WRITE ACL or KIP-890 verification, and held the last stable offset for good). The rest of
Kafka's check of a partition's records: magic 2 (INVALID_RECORD), no zstd before v7
(UNSUPPORTED_COMPRESSION_TYPE)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from tests.integration.broker._wire import Wire

from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.records.builder import build_batch
from rill.records.compression import ZSTD
from rill.records.record import Record

pytestmark = pytest.mark.timeout(120)

TS = 1_700_000_000_000
MADE_UP_PID = 987_654


def _batch(values: list[bytes], **producer: Any) -> bytes:
    return build_batch([Record(0, TS + i, None, v) for i, v in enumerate(values)], **producer)


def _produce(w: Wire, topic: str | uuid.UUID, parts: dict[int, bytes], *, version: int = 9,
             txn_id: str | None = None) -> dict:  # fmt: skip
    """Produce ``parts`` to ``topic`` (a name, or from v13 on, an id)."""
    named = {"topic_id": topic} if isinstance(topic, uuid.UUID) else {"name": topic}
    body = {
        "transactional_id": txn_id,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{**named, "partition_data": [{"index": i, "records": r} for i, r in parts.items()]}],
    }
    (topic_resp,) = w.call(ApiKey.PRODUCE, version, body)["responses"]
    return {p["index"]: p for p in topic_resp["partition_responses"]}


def _create(w: Wire, topic: str, partitions: int) -> uuid.UUID:
    body = {
        "topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                    "configs": []}],
        "timeout_ms": 5000,
        "validate_only": False,
    }  # fmt: skip
    (created,) = w.call(ApiKey.CREATE_TOPICS, 7, body)["topics"]
    assert created["error_code"] == 0
    return uuid.UUID(str(created["topic_id"]))


def _offsets(w: Wire, topic: str, partition: int, isolation: int) -> int:
    """The partition's end offset seen by a consumer of ``isolation``: the high watermark (0) or the last
    stable offset (1)."""
    body = {
        "replica_id": -1,
        "isolation_level": isolation,
        "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}],
    }
    (p,) = w.call(ApiKey.LIST_OFFSETS, 5, body)["topics"][0]["partitions"]
    assert p["error_code"] == 0
    return int(p["offset"])


@pytest.fixture
def wire(rill_broker: Any) -> Iterator[Wire]:
    w = Wire(rill_broker.bootstrap_servers)
    yield w
    w.close()


@pytest.mark.parametrize("version", [3, 9, 13])
def test_two_batches_in_a_partition_are_refused_and_nothing_is_written(wire: Wire, version: int) -> None:
    topic = f"two-batches-v{version}"
    topic_id = _create(wire, topic, 2)
    two = _batch([b"a"]) + _batch([b"b"])
    resp = _produce(wire, topic_id if version >= 13 else topic, {0: two, 1: _batch([b"alone"])}, version=version)
    assert resp[0]["error_code"] == ErrorCode.INVALID_RECORD
    if version >= 8:  # the versions with an error message
        assert "exactly one record batch" in resp[0]["error_message"]
    assert resp[1]["error_code"] == 0  # only the partition with two batches is refused
    assert _offsets(wire, topic, 0, 0) == 0 and _offsets(wire, topic, 1, 0) == 1


def test_a_transactional_batch_behind_a_plain_one_opens_no_transaction(rill_broker: Any, wire: Wire) -> None:
    """The issue's case: a plain batch, then a transactional batch of a producer id no coordinator gave out, in
    one partition of a Produce without a transactional id. Refused; the last stable offset follows the high
    watermark, and a read_committed consumer reads what is produced next."""
    topic = "smuggled-txn"
    _create(wire, topic, 1)
    smuggled = _batch([b"plain"]) + _batch(
        [b"in a transaction nobody knows"], producer_id=MADE_UP_PID, producer_epoch=0, base_sequence=0,
        is_transactional=True,
    )  # fmt: skip
    for txn_id in (None, "made-up-txn"):
        resp = _produce(wire, topic, {0: smuggled}, txn_id=txn_id)
        assert resp[0]["error_code"] == ErrorCode.INVALID_RECORD, resp
    # and the other order: a transactional batch first, then a plain one
    reversed_ = _batch([b"t"], producer_id=MADE_UP_PID, producer_epoch=0, base_sequence=0, is_transactional=True)
    resp = _produce(wire, topic, {0: reversed_ + _batch([b"p"])}, txn_id="made-up-txn")
    assert resp[0]["error_code"] == ErrorCode.INVALID_RECORD
    assert _produce(wire, topic, {0: _batch([b"after"])})[0]["error_code"] == 0
    assert _offsets(wire, topic, 0, 0) == 1
    assert _offsets(wire, topic, 0, 1) == 1  # the last stable offset is not held back

    consumer = Consumer({"bootstrap.servers": rill_broker.bootstrap_servers, "group.id": "rc",
                         "isolation.level": "read_committed", "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        deadline = time.monotonic() + 20
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error():
                msg = None
        assert msg is not None and msg.value() == b"after"
    finally:
        consumer.close()


def test_bytes_after_the_batch_are_refused(wire: Wire) -> None:
    """Anything after the first batch is not a second batch Produce may carry: refused as well, whereas a first
    batch that claims more bytes than there are is a corrupt batch (CORRUPT_MESSAGE), as before."""
    _create(wire, "trailing", 1)
    one = _batch([b"x"])
    assert _produce(wire, "trailing", {0: one + bytes(20)})[0]["error_code"] == ErrorCode.INVALID_RECORD
    assert _produce(wire, "trailing", {0: one[:-1]})[0]["error_code"] == ErrorCode.CORRUPT_MESSAGE
    assert _produce(wire, "trailing", {0: one})[0]["error_code"] == 0
    assert _offsets(wire, "trailing", 0, 0) == 1


def test_a_batch_of_another_magic_and_zstd_before_v7_are_refused(wire: Wire) -> None:
    _create(wire, "magic", 1)
    old = bytearray(_batch([b"x"]))
    old[16] = 1  # magic 1 (the CRC covers no byte before the attributes)
    resp = _produce(wire, "magic", {0: bytes(old)})
    assert resp[0]["error_code"] == ErrorCode.INVALID_RECORD and "magic version 2" in resp[0]["error_message"]
    zstd = build_batch([Record(0, TS, None, b"z" * 100)], compression=ZSTD)
    for version in (3, 6):
        assert _produce(wire, "magic", {0: zstd}, version=version)[0]["error_code"] == (
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        )
    assert _offsets(wire, "magic", 0, 0) == 0
    assert _produce(wire, "magic", {0: zstd}, version=7)[0]["error_code"] == 0
    assert _offsets(wire, "magic", 0, 0) == 1
