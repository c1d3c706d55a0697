"""While a ``__transaction_state`` partition loads, its ids answer COORDINATOR_LOAD_IN_PROGRESS (clients retry),
other requests are served, and once loaded the latest record of each id is its state."""

from __future__ import annotations

import time

import pytest
from tests.integration._internal_log import append_as_coordinator
from tests.integration.broker._wire import Wire
from tests.integration.transactions._txn import describe, find_txn_coordinator

import rill.testing
from rill.common import TopicPartition
from rill.coordinator.group.group_metadata_manager import partition_for
from rill.coordinator.transaction.transaction_log import encode_key, encode_value
from rill.coordinator.transaction.transaction_metadata import TransactionState, TxnTransitMetadata
from rill.errors import ErrorCode
from rill.protocol import ApiKey

RECORDS = 150_000


@pytest.mark.slow
def test_a_loading_partition_answers_load_in_progress() -> None:
    with rill.testing.broker({"transaction.state.log.num.partitions": "3"}) as b:
        w = Wire(b.bootstrap_servers)
        find_txn_coordinator(w, "tx-load")
        w.close()
        partition = partition_for("tx-load", 3)
        key = encode_key("tx-load")
        now = int(time.time() * 1000)
        values = [
            encode_value(TxnTransitMetadata(77, -1, epoch % 30000, -1, 60000, TransactionState.EMPTY, frozenset(), -1,
                                            now))
            for epoch in range(RECORDS)
        ]  # fmt: skip
        append_as_coordinator(b, TopicPartition("__transaction_state", partition), [(key, v) for v in values])
        b.restart()
        w = Wire(b.bootstrap_servers, timeout=30)
        try:
            answers = []
            started = time.monotonic()
            while time.monotonic() - started < 60:
                d = describe(w, "tx-load")
                answers.append(d["error_code"])
                # the broker serves other requests meanwhile
                assert w.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                       "client_software_version": "1"})["error_code"] == 0  # fmt: skip
                if d["error_code"] == 0:
                    break
            loaded_after = time.monotonic() - started
        finally:
            w.close()
    assert answers[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert answers[-1] == 0 and d["producer_epoch"] == (RECORDS - 1) % 30000 and d["producer_id"] == 77
    print(f"{RECORDS} records loaded in about {loaded_after:.2f} s")
