"""Transactional offsets over the wire, on one broker: a TxnOffsetCommit is verified with the transaction
coordinator (KIP-890) and refused outside the producer's ongoing transaction; a transaction's offsets never
replace a newer plain commit, nor come back after their group was deleted, in memory as after a restart; and a
produce whose transaction ends while it is being verified does not open a transaction that nothing would close."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.broker._wire import Wire
from tests.integration.transactions._txn import (
    add_partitions,
    call_until,
    end_txn,
    find_txn_coordinator,
    init_pid,
    wait_for_state,
)

from rill.coordinator.group.group_metadata_manager import partition_for
from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.records.builder import build_batch
from rill.records.record import Record

pytestmark = [pytest.mark.timeout(120), pytest.mark.rill_broker_config(**{
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
})]  # fmt: skip


def _topic(bootstrap: str, partitions: int = 2) -> str:
    name = f"to-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    return name


@pytest.fixture
def wire(rill_broker: Any) -> Iterator[Wire]:
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        yield w
    finally:
        w.close()


def _group_coordinator(w: Wire, group: str) -> None:
    """FindCoordinator for the group (creates ``__consumer_offsets``), until it answers."""
    deadline = time.monotonic() + 15
    while True:
        (c,) = w.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})["coordinators"]
        if c["error_code"] == 0:
            return
        assert time.monotonic() < deadline, c
        time.sleep(0.1)


def _add_offsets(w: Wire, txn_id: str, pid: int, epoch: int, group: str) -> int:
    body = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "group_id": group}
    return int(call_until(w, ApiKey.ADD_OFFSETS_TO_TXN, 3, body)["error_code"])


def _txn_offset_commit(w: Wire, txn_id: str, group: str, pid: int, epoch: int, topic: str,
                       offsets: dict[int, int]) -> dict[int, int]:  # fmt: skip
    body = {"transactional_id": txn_id, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_metadata": ""} for p, o in offsets.items()
            ]}]}  # fmt: skip
    resp = w.call(ApiKey.TXN_OFFSET_COMMIT, 3, body)
    return {p["partition_index"]: p["error_code"] for t in resp["topics"] for p in t["partitions"]}


def _offset_commit(w: Wire, group: str, topic: str, offsets: dict[int, int]) -> dict[int, int]:
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_metadata": ""} for p, o in offsets.items()
            ]}]}  # fmt: skip
    resp = w.call(ApiKey.OFFSET_COMMIT, 8, body)
    return {p["partition_index"]: p["error_code"] for t in resp["topics"] for p in t["partitions"]}


def _offset_fetch(w: Wire, group: str, topic: str, partitions: list[int],
                  require_stable: bool = False) -> dict[int, tuple[int, int]]:  # fmt: skip
    """partition -> (committed offset, error code)."""
    body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": partitions}],
            "require_stable": require_stable}  # fmt: skip
    resp = w.call(ApiKey.OFFSET_FETCH, 7, body)
    return {p["partition_index"]: (p["committed_offset"], p["error_code"]) for t in resp["topics"]
            for p in t["partitions"]}  # fmt: skip


def _stable_offsets(w: Wire, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
    """The committed offsets once no transaction holds any of them (OffsetFetch with require_stable)."""
    deadline = time.monotonic() + 15
    while True:
        got = _offset_fetch(w, group, topic, partitions, require_stable=True)
        if all(code == 0 for _, code in got.values()):
            return {p: offset for p, (offset, _) in got.items()}
        assert time.monotonic() < deadline, got
        time.sleep(0.05)


def _stable_offsets_after_restart(rill_broker: Any, group: str, topic: str) -> dict[int, int]:
    """Partition 0's committed offset once the broker restarted and replayed ``__consumer_offsets``."""
    rill_broker.restart()
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        _group_coordinator(w, group)
        return _stable_offsets(w, group, topic, [0])
    finally:
        w.close()


def _offsets_partition_is_stable(w: Wire, group: str) -> bool:
    """Whether the group's partition of ``__consumer_offsets`` has no open transaction: its last stable offset
    (ListOffsets read_committed) is its high watermark."""
    p = partition_for(group, 3)

    def latest(isolation: int) -> int:
        body = {"replica_id": -1, "isolation_level": isolation, "topics": [{"name": "__consumer_offsets",
                "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}]}]}  # fmt: skip
        (part,) = w.call(ApiKey.LIST_OFFSETS, 5, body)["topics"][0]["partitions"]
        assert part["error_code"] == 0, part
        return int(part["offset"])

    return latest(1) == latest(0)


def _start_txn(w: Wire, txn_id: str, group: str) -> tuple[int, int]:
    _group_coordinator(w, group)
    find_txn_coordinator(w, txn_id)
    r = init_pid(w, txn_id)
    assert r["error_code"] == 0, r
    return r["producer_id"], r["producer_epoch"]


def test_a_txn_offset_commit_outside_its_transaction_is_refused(rill_broker: Any, wire: Wire) -> None:
    """KIP-890 part 1 verifies a TxnOffsetCommit as it verifies a Produce: one sent without AddOffsetsToTxn, or a
    late one after the transaction ended, would open a transaction on ``__consumer_offsets`` that no marker
    closes (its last stable offset stops there) and the producer's next transaction would commit it."""
    topic = _topic(rill_broker.bootstrap_servers)
    group, txn_id = "tov-group", "tov-tx"
    pid, epoch = _start_txn(wire, txn_id, group)
    stray = _txn_offset_commit(wire, txn_id, group, pid, epoch, topic, {0: 100})  # no AddOffsetsToTxn
    stable_after_stray = _offsets_partition_is_stable(wire, group)
    assert _add_offsets(wire, txn_id, pid, epoch, group) == 0
    assert _txn_offset_commit(wire, txn_id, group, pid, epoch, topic, {1: 5}) == {1: 0}
    assert end_txn(wire, txn_id, pid, epoch, True) == 0
    wait_for_state(wire, txn_id, "CompleteCommit")
    committed = _stable_offsets(wire, group, topic, [0, 1])
    late = _txn_offset_commit(wire, txn_id, group, pid, epoch, topic, {0: 7})  # after the transaction ended
    assert stray == {0: ErrorCode.INVALID_TXN_STATE}, (stray, committed)
    assert stable_after_stray
    assert committed == {0: -1, 1: 5}  # the stray offset was not committed with the next transaction
    assert late == {0: ErrorCode.INVALID_TXN_STATE}
    assert _offsets_partition_is_stable(wire, group)
    assert _stable_offsets(wire, group, topic, [0, 1]) == {0: -1, 1: 5}


def test_a_transactions_offsets_do_not_replace_a_newer_commit(rill_broker: Any, wire: Wire) -> None:
    """TxnOffsetCommit at 100, then a plain OffsetCommit at 200, then the COMMIT marker: Kafka keeps the newer by
    log order (200), in memory and after the log is replayed."""
    topic = _topic(rill_broker.bootstrap_servers, 1)
    group, txn_id = "newer-group", "newer-tx"
    pid, epoch = _start_txn(wire, txn_id, group)
    assert _add_offsets(wire, txn_id, pid, epoch, group) == 0
    assert _txn_offset_commit(wire, txn_id, group, pid, epoch, topic, {0: 100}) == {0: 0}
    assert _offset_commit(wire, group, topic, {0: 200}) == {0: 0}
    assert end_txn(wire, txn_id, pid, epoch, True) == 0
    wait_for_state(wire, txn_id, "CompleteCommit")
    in_memory = _stable_offsets(wire, group, topic, [0])
    replayed = _stable_offsets_after_restart(rill_broker, group, topic)
    assert (in_memory, replayed) == ({0: 200}, {0: 200})


def test_a_deleted_groups_transactional_offsets_do_not_come_back(rill_broker: Any, wire: Wire) -> None:
    """A group deleted while a transaction holds offsets of it: the transaction's commit does not bring them back,
    neither in memory nor when ``__consumer_offsets`` is replayed (after a failover or a restart)."""
    topic = _topic(rill_broker.bootstrap_servers, 1)
    group, txn_id = "deleted-group", "deleted-tx"
    pid, epoch = _start_txn(wire, txn_id, group)
    assert _add_offsets(wire, txn_id, pid, epoch, group) == 0
    assert _txn_offset_commit(wire, txn_id, group, pid, epoch, topic, {0: 5}) == {0: 0}
    (result,) = wire.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": [group]})["results"]
    assert result["error_code"] == 0
    assert end_txn(wire, txn_id, pid, epoch, True) == 0
    wait_for_state(wire, txn_id, "CompleteCommit")
    in_memory = _stable_offsets(wire, group, topic, [0])
    replayed = _stable_offsets_after_restart(rill_broker, group, topic)
    assert (in_memory, replayed) == ({0: -1}, {0: -1})


def _produce_txn(w: Wire, txn_id: str, pid: int, epoch: int, topic: str, seq: int, value: bytes) -> int:
    batch = build_batch([Record(0, int(time.time() * 1000), None, value)], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=True)  # fmt: skip
    resp = w.call(ApiKey.PRODUCE, 9, {"transactional_id": txn_id, "acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})  # fmt: skip
    return int(resp["responses"][0]["partition_responses"][0]["error_code"])


def _read_committed(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})  # fmt: skip
    out: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == -191:  # _PARTITION_EOF: read to the last stable offset
                    return out
                continue
            out.append(msg.value())
    finally:
        consumer.close()
    raise AssertionError(f"{topic} not read to its end: {out}")


def test_a_transaction_ending_during_a_produce_verification_is_not_reopened(rill_broker: Any, wire: Wire) -> None:
    """Kafka's VerificationGuard. The partition leader asks the coordinator (here held, as a remote coordinator's
    answer can be late); meanwhile the producer aborts, and the abort marker lands on the partition. The verified
    batch must then be refused: appended, it would open a transaction that no marker closes, and the producer's
    next commit marker would make it visible."""
    bootstrap = rill_broker.bootstrap_servers
    topic = _topic(bootstrap, 1)
    txn_id = "guard-tx"
    find_txn_coordinator(wire, txn_id)
    r = init_pid(wire, txn_id)
    pid, epoch = r["producer_id"], r["producer_epoch"]
    replica_manager = rill_broker.broker.services.replica_manager
    verify = replica_manager.txn_verifier
    asked, answer = threading.Event(), threading.Event()

    async def held(transactional_id: str, producer_id: int, producer_epoch: int, tp: Any) -> ErrorCode:
        code = await verify(transactional_id, producer_id, producer_epoch, tp)  # answered: it is in the transaction
        asked.set()
        await asyncio.to_thread(answer.wait, 30)
        return ErrorCode(code)

    assert add_partitions(wire, txn_id, pid, epoch, topic, [0]) == {0: 0}
    replica_manager.txn_verifier = held
    result: dict[str, int] = {}
    producer = Wire(bootstrap, timeout=30)
    sending = threading.Thread(
        target=lambda: result.update(code=_produce_txn(producer, txn_id, pid, epoch, topic, 0, b"aborted")),
        daemon=True,
    )
    try:
        sending.start()
        assert asked.wait(20)
        replica_manager.txn_verifier = verify
        assert end_txn(wire, txn_id, pid, epoch, False) == 0
        wait_for_state(wire, txn_id, "CompleteAbort")
        answer.set()
        sending.join(30)
    finally:
        answer.set()
        replica_manager.txn_verifier = verify
        producer.close()
    first = result["code"]
    # the producer's next transaction, committed
    assert add_partitions(wire, txn_id, pid, epoch, topic, [0]) == {0: 0}
    assert _produce_txn(wire, txn_id, pid, epoch, topic, 1 if first == 0 else 0, b"committed") == 0
    assert end_txn(wire, txn_id, pid, epoch, True) == 0
    wait_for_state(wire, txn_id, "CompleteCommit")
    assert _read_committed(bootstrap, topic) == [b"committed"], first
    assert first == ErrorCode.INVALID_TXN_STATE
