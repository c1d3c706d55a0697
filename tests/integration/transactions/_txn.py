"""Helpers of the transaction coordinator tests: calls over a bare connection, and the records of
``__transaction_state`` read back with a real consumer."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from tests.integration.broker._wire import Wire

from rill.coordinator.transaction.transaction_log import decode_key, decode_value
from rill.coordinator.transaction.transaction_metadata import TxnTransitMetadata
from rill.errors import ErrorCode
from rill.protocol import ApiKey

STATE_TOPIC = "__transaction_state"


def find_txn_coordinator(w: Wire, txn_id: str, timeout_s: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        resp = w.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [txn_id]})
        (c,) = resp["coordinators"]
        if c["error_code"] == 0 or time.monotonic() > deadline:
            return dict(c)
        time.sleep(0.1)


def call_until(w: Wire, api: int, version: int, body: dict[str, Any], field: str = "error_code",
               retry: tuple[int, ...] = (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                         ErrorCode.COORDINATOR_NOT_AVAILABLE),
               timeout_s: float = 15.0) -> dict[str, Any]:  # fmt: skip
    """Call until the answer is not one of the retriable coordinator errors (as clients retry them)."""
    deadline = time.monotonic() + timeout_s
    while True:
        resp = w.call(api, version, body)
        if resp[field] not in retry or time.monotonic() > deadline:
            return resp
        time.sleep(0.05)


def init_pid(w: Wire, txn_id: str, timeout_ms: int = 60000, pid: int = -1, epoch: int = -1,
             version: int = 4) -> dict[str, Any]:  # fmt: skip
    body = {"transactional_id": txn_id, "transaction_timeout_ms": timeout_ms, "producer_id": pid,
            "producer_epoch": epoch}  # fmt: skip
    return call_until(w, ApiKey.INIT_PRODUCER_ID, version, body)


def add_partitions(w: Wire, txn_id: str, pid: int, epoch: int, topic: str, partitions: list[int],
                   version: int = 3) -> dict[int, int]:  # fmt: skip
    body = {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": partitions}]}  # fmt: skip
    resp = w.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, body)
    return {p["partition_index"]: p["partition_error_code"] for t in resp["results_by_topic_v3_and_below"]
            for p in t["results_by_partition"]}  # fmt: skip


def end_txn(w: Wire, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    body = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "committed": commit}
    return int(w.call(ApiKey.END_TXN, version, body)["error_code"])


def describe(w: Wire, txn_id: str) -> dict[str, Any]:
    (state,) = w.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})["transaction_states"]
    return dict(state)


def wait_for_state(w: Wire, txn_id: str, state: str, timeout_s: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        d = describe(w, txn_id)
        if d["transaction_state"] == state:
            return d
        if time.monotonic() > deadline:
            raise AssertionError(f"{txn_id} did not reach {state}: {d}")
        time.sleep(0.05)


def state_records(bootstrap: str, txn_id: str, timeout_s: float = 10.0) -> list[TxnTransitMetadata | None]:
    """Every record of ``txn_id`` in ``__transaction_state``, in log order (None for a tombstone)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "isolation.level": "read_uncommitted"})  # fmt: skip
    try:
        md = c.list_topics(STATE_TOPIC, timeout=timeout_s).topics[STATE_TOPIC]
        found: list[TxnTransitMetadata | None] = []
        for p in sorted(md.partitions):
            low, high = c.get_watermark_offsets(TopicPartition(STATE_TOPIC, p), timeout=timeout_s)
            if high <= low:
                continue
            c.assign([TopicPartition(STATE_TOPIC, p, low)])
            pos = low
            deadline = time.monotonic() + timeout_s
            while pos < high and time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is None or msg.error():
                    continue
                pos = msg.offset() + 1
                if decode_key(msg.key()) == txn_id:
                    found.append(None if msg.value() is None else decode_value(msg.value()))
        return found
    finally:
        c.close()
