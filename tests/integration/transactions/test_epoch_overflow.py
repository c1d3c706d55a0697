"""Epoch exhaustion: an id whose epoch reached 32766 gets a new producer id at epoch 0 (Kafka's rotation), for
a new instance and, with KIP-360, for the same producer naming its exhausted epoch (a retry of that call gets
the same answer). The exhausted state is written to ``__transaction_state`` as a record a coordinator would
have written (through the replica manager: clients may not produce there), then loaded by the restarted broker."""

from __future__ import annotations

import time

from tests.integration._internal_log import append_as_coordinator
from tests.integration.broker._wire import Wire
from tests.integration.transactions._txn import describe, find_txn_coordinator, init_pid

import rill.testing
from rill.common import TopicPartition
from rill.coordinator.group.group_metadata_manager import partition_for
from rill.coordinator.transaction.transaction_log import encode_key, encode_value
from rill.coordinator.transaction.transaction_metadata import TransactionState, TxnTransitMetadata
from rill.errors import ErrorCode

OLD_PID = 123_456_789
EXHAUSTED = 32766


def _exhausted(txn_id: str) -> bytes:
    now = int(time.time() * 1000)
    return encode_value(TxnTransitMetadata(OLD_PID, -1, EXHAUSTED, -1, 60000, TransactionState.COMPLETE_COMMIT,
                                           frozenset(), -1, now))  # fmt: skip


def test_an_exhausted_epoch_rotates_the_producer_id() -> None:
    with rill.testing.broker({"transaction.state.log.num.partitions": "3"}) as b:
        w = Wire(b.bootstrap_servers)
        find_txn_coordinator(w, "tx-ov-a")
        w.close()
        for txn_id in ("tx-ov-a", "tx-ov-b"):
            tp = TopicPartition("__transaction_state", partition_for(txn_id, 3))
            append_as_coordinator(b, tp, [(encode_key(txn_id), _exhausted(txn_id))])
        b.restart()  # the coordinator loads the ids from the log

        w = Wire(b.bootstrap_servers, timeout=30)
        try:
            find_txn_coordinator(w, "tx-ov-a")
            assert describe(w, "tx-ov-a")["producer_epoch"] == EXHAUSTED
            fresh = init_pid(w, "tx-ov-a")  # a new instance
            assert fresh["error_code"] == 0 and fresh["producer_id"] != OLD_PID and fresh["producer_epoch"] == 0
            # KIP-360: the producer names its id and exhausted epoch; a retry of the call gets the same answer
            bumped = init_pid(w, "tx-ov-b", pid=OLD_PID, epoch=EXHAUSTED)
            assert bumped["error_code"] == 0 and bumped["producer_id"] not in (OLD_PID, fresh["producer_id"])
            assert bumped["producer_epoch"] == 0
            retry = init_pid(w, "tx-ov-b", pid=OLD_PID, epoch=EXHAUSTED)
            assert (retry["error_code"], retry["producer_id"], retry["producer_epoch"]) == (
                0, bumped["producer_id"], 0,
            )  # fmt: skip
            stale = init_pid(w, "tx-ov-b", pid=OLD_PID, epoch=EXHAUSTED - 5)
            assert stale["error_code"] == ErrorCode.PRODUCER_FENCED
        finally:
            w.close()
