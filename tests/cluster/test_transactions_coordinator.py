"""The transaction coordinator on a 3-broker cluster: ``__transaction_state`` replicated (RF 3, min ISR 2),
markers written to partition leaders on other brokers over the wire, and a coordinator failover: the new
leader of the id's ``__transaction_state`` partition loads it, and the open transaction is committed or
aborted, never half visible."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from tests.cluster._helpers import create_topic
from tests.integration.broker._wire import Wire
from tests.integration.transactions._txn import describe, find_txn_coordinator, init_pid

from rill.errors import ErrorCode
from rill.testing.cluster import TestCluster, cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def txn3() -> Iterator[TestCluster]:
    with cluster(brokers=3, min_insync_replicas=2, num_partitions=3, **{
        "transaction.state.log.num.partitions": "3",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    }) as c:  # fmt: skip
        yield c


def _committed(c: TestCluster, topic: str, want: int, timeout: float = 30.0) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": f"rc-{time.monotonic_ns()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg.value())
        end = time.monotonic() + 1.5  # nothing more
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg.value())
    finally:
        consumer.close()
    return out


def _any_broker(c: TestCluster) -> Wire:
    for address in c.bootstrap_servers.split(","):
        try:
            return Wire(address, timeout=30)
        except OSError:
            continue
    raise AssertionError("no broker answers")


def _describe(c: TestCluster, txn_id: str) -> dict:
    w = _any_broker(c)
    try:
        node = find_txn_coordinator(w, txn_id, timeout_s=30)
    finally:
        w.close()
    try:
        w = Wire(f"{node['host']}:{node['port']}", timeout=30)
    except OSError:  # a coordinator just killed, still named until its leadership moves
        return {"coordinator": node["node_id"], "error_code": -1, "transaction_state": ""}
    try:
        return {**describe(w, txn_id), "coordinator": node["node_id"]}
    finally:
        w.close()


def test_markers_reach_leaders_on_other_brokers(txn3: TestCluster) -> None:
    create_topic(txn3, "tc-spread", 3, 3)
    leaders = {txn3.leader("tc-spread", p) for p in range(3)}
    p = Producer({"bootstrap.servers": txn3.bootstrap_servers, "transactional.id": "tc-spread-tx"})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(30):
        p.produce("tc-spread", f"v{i}".encode(), partition=i % 3)
    p.commit_transaction(60)
    got = _committed(txn3, "tc-spread", 30)
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(30))
    assert len(leaders) == 3  # one partition led by each broker: two of them are not the coordinator
    assert all(len(txn3.isr("__transaction_state", q)) == 3 for q in range(3))
    # the brokers that do not lead the id's partition of __transaction_state send the client to the one that does
    coordinator = _describe(txn3, "tc-spread-tx")["coordinator"]
    for broker_id in txn3.brokers:
        if broker_id == coordinator:
            continue
        b = txn3.broker(broker_id)
        w = Wire(f"{b.host}:{b.port}", timeout=30)
        try:
            assert init_pid(w, "tc-spread-tx")["error_code"] == ErrorCode.NOT_COORDINATOR
            assert describe(w, "tc-spread-tx")["error_code"] == ErrorCode.NOT_COORDINATOR
        finally:
            w.close()


def test_the_coordinator_fails_over_and_open_transactions_end_atomically(txn3: TestCluster) -> None:
    """Two open transactions when the coordinator of the first is killed: the first is committed through the
    new coordinator; the second, abandoned by its producer, is aborted at its timeout."""
    create_topic(txn3, "tc-fail", 3, 3)
    txn_id = "tc-fail-tx"
    p = Producer({"bootstrap.servers": txn3.bootstrap_servers, "transactional.id": txn_id,
                  "transaction.timeout.ms": 60000})  # fmt: skip
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(12):
        p.produce("tc-fail", f"f{i}".encode(), partition=i % 3)
    assert p.flush(30) == 0
    abandoned = Producer({"bootstrap.servers": txn3.bootstrap_servers, "transactional.id": "tc-abandoned-tx",
                          "transaction.timeout.ms": 6000})  # fmt: skip
    abandoned.init_transactions(60)
    abandoned.begin_transaction()
    for i in range(6):
        abandoned.produce("tc-fail", f"x{i}".encode(), partition=i % 3)
    assert abandoned.flush(30) == 0
    before = _describe(txn3, txn_id)
    assert before["transaction_state"] == "Ongoing"
    old = before["coordinator"]
    txn3.kill(old)
    try:
        # (the broker that answers FindCoordinator may name the new coordinator a moment before that one has
        # taken the partition over and answers for it: NOT_COORDINATOR meanwhile)
        txn3.wait_for(lambda: (d := _describe(txn3, txn_id))["coordinator"] not in (old, -1) and d["error_code"] == 0,
                      timeout=40, what="a new coordinator for the transactional id")  # fmt: skip
        after = _describe(txn3, txn_id)
        assert after["error_code"] == 0 and after["producer_id"] == before["producer_id"]
        assert after["transaction_state"] == "Ongoing"
        p.commit_transaction(60)
        assert _describe(txn3, txn_id)["transaction_state"] in ("PrepareCommit", "CompleteCommit")
        txn3.wait_for(lambda: _describe(txn3, "tc-abandoned-tx")["transaction_state"] == "CompleteAbort",
                      timeout=40, what="the abort of the abandoned transaction")  # fmt: skip
        assert sorted(_committed(txn3, "tc-fail", 12)) == sorted(f"f{i}".encode() for i in range(12))
        txn3.wait_for(lambda: _describe(txn3, txn_id)["transaction_state"] == "CompleteCommit", timeout=30,
                      what="the completion of the commit")  # fmt: skip
    finally:
        txn3.start(old)
        abandoned.purge()
