"""A broker killed (SIGKILL) in the middle of a transaction: at restart the coordinator loads its state from
``__transaction_state``, the open transaction is still there with its partitions, and its timeout aborts it
(epoch bumped, abort markers written). A transaction killed between PrepareCommit and CompleteCommit is
completed after the restart."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.broker._wire import Wire
from tests.integration.transactions._txn import (
    add_partitions,
    describe,
    end_txn,
    find_txn_coordinator,
    init_pid,
    wait_for_state,
)

import rill.testing
from rill.errors import ErrorCode

CONFIGS = {
    "transaction.state.log.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}


def _wait_for_coordinator(bootstrap: str, txn_id: str) -> dict:
    """DescribeTransactions once the restarted coordinator has loaded the id's partition."""
    deadline = time.monotonic() + 20
    while True:
        try:
            w = Wire(bootstrap, timeout=10)
        except OSError:
            time.sleep(0.1)
            continue
        try:
            d = describe(w, txn_id)
        finally:
            w.close()
        if d["error_code"] not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                   ErrorCode.NOT_COORDINATOR) or time.monotonic() > deadline:  # fmt: skip
            return d
        time.sleep(0.05)


@pytest.mark.slow
def test_kill_mid_transaction_then_the_timeout_aborts_it() -> None:
    with rill.testing.broker(CONFIGS, subprocess=True) as b:
        bootstrap = b.bootstrap_servers
        topic = f"rs-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(10)
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "rs-open", "transaction.timeout.ms": 4000})
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, f"open-{i}".encode(), partition=i % 2)
        p.flush(10)
        w = Wire(bootstrap)
        before = describe(w, "rs-open")
        w.close()
        assert before["transaction_state"] == "Ongoing"

        b.kill()
        b.start()
        after = _wait_for_coordinator(b.bootstrap_servers, "rs-open")
        assert after["error_code"] == 0
        assert after["transaction_state"] in ("Ongoing", "PrepareAbort", "CompleteAbort")
        assert after["producer_id"] == before["producer_id"]
        w = Wire(b.bootstrap_servers, timeout=30)
        try:
            done = wait_for_state(w, "rs-open", "CompleteAbort", timeout_s=20)
        finally:
            w.close()
        assert done["producer_epoch"] == before["producer_epoch"] + 1
        c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "rs-reader",
                      "isolation.level": "read_committed"})  # fmt: skip
        try:
            # the records and one abort marker per partition; nothing is left open (the LSO is at the end)
            highs = [c.get_watermark_offsets(CkTopicPartition(topic, q), timeout=10)[1] for q in range(2)]
            assert highs == [4, 3]
            c.assign([CkTopicPartition(topic, q, 0) for q in range(2)])
            seen = [m for m in (c.poll(0.3) for _ in range(10)) if m is not None and not m.error()]
            assert seen == []
        finally:
            c.close()
        p.purge()


@pytest.mark.slow
def test_a_prepared_commit_is_completed_after_a_restart() -> None:
    with rill.testing.broker(CONFIGS, subprocess=True) as b:
        bootstrap = b.bootstrap_servers
        topic = f"rc-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
        w = Wire(bootstrap, timeout=30)
        find_txn_coordinator(w, "rc-tx")
        r = init_pid(w, "rc-tx")
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert add_partitions(w, "rc-tx", pid, epoch, topic, [0]) == {0: 0}
        assert end_txn(w, "rc-tx", pid, epoch, True) == 0
        w.close()
        b.kill()  # whether or not the marker and CompleteCommit were written before the kill
        b.start()
        d = _wait_for_coordinator(b.bootstrap_servers, "rc-tx")
        assert d["error_code"] == 0
        w = Wire(b.bootstrap_servers, timeout=30)
        try:
            done = wait_for_state(w, "rc-tx", "CompleteCommit", timeout_s=20)
            assert done["producer_epoch"] == epoch
            assert end_txn(w, "rc-tx", pid, epoch, True) == 0
        finally:
            w.close()
