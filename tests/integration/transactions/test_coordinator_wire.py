"""The transaction coordinator over the wire, on one broker: FindCoordinator key type 1, InitProducerId
(epochs, KIP-360, fencing), AddPartitionsToTxn (and its verify_only form), EndTxn, DescribeTransactions,
ListTransactions, timeouts and the expiration of ids; each checked against the coordinator's answers and the
records it wrote to ``__transaction_state``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from tests.integration.broker._wire import Wire
from tests.integration.transactions._txn import (
    add_partitions,
    call_until,
    describe,
    end_txn,
    find_txn_coordinator,
    init_pid,
    state_records,
    wait_for_state,
)

from rill.errors import ErrorCode
from rill.protocol import ApiKey

FAST = {
    "transaction.state.log.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100",
}


def _topic(bootstrap: str, partitions: int = 2) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    return name


@pytest.fixture
def wire(rill_broker) -> Iterator[Wire]:
    w = Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        yield w
    finally:
        w.close()


def _high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw-reader"})
    try:
        return [c.get_watermark_offsets(CkTopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        c.close()


@pytest.mark.rill_broker_config(**FAST)
def test_find_coordinator_creates_the_state_topic(rill_broker, wire: Wire) -> None:
    resp = wire.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx-a", "tx-b", ""]})
    a, b, empty = resp["coordinators"]
    assert (a["error_code"], a["node_id"], a["port"]) == (0, 0, rill_broker.port)
    assert (b["error_code"], b["node_id"]) == (0, 0)
    assert empty["error_code"] == ErrorCode.INVALID_REQUEST
    old = wire.call(ApiKey.FIND_COORDINATOR, 1, {"key": "tx-a", "key_type": 1})
    assert (old["error_code"], old["node_id"]) == (0, 0)
    admin = AdminClient({"bootstrap.servers": rill_broker.bootstrap_servers})
    md = admin.list_topics("__transaction_state", timeout=10).topics["__transaction_state"]
    assert len(md.partitions) == 3
    resource = ConfigResource("topic", "__transaction_state")
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["min.insync.replicas"].value == "1"


@pytest.mark.rill_broker_config(**FAST)
def test_refused_init_producer_id_writes_nothing(rill_broker, wire: Wire) -> None:
    find_txn_coordinator(wire, "tx-refused")
    for timeout in (0, 900001):
        assert init_pid(wire, "tx-refused", timeout_ms=timeout)["error_code"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert describe(wire, "tx-refused")["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert init_pid(wire, "")["error_code"] == ErrorCode.INVALID_REQUEST
    ok = init_pid(wire, "tx-other")
    assert ok["error_code"] == 0
    assert state_records(rill_broker.bootstrap_servers, "tx-refused") == []
    (record,) = state_records(rill_broker.bootstrap_servers, "tx-other")
    assert record is not None and (record.producer_id, record.producer_epoch, record.state.display) == (
        ok["producer_id"], 0, "Empty",
    )  # fmt: skip


@pytest.mark.rill_broker_config(**FAST)
def test_epochs_kip_360_and_fencing(wire: Wire) -> None:
    find_txn_coordinator(wire, "tx-epochs")
    first = init_pid(wire, "tx-epochs")
    pid = first["producer_id"]
    assert (first["error_code"], first["producer_epoch"]) == (0, 0)
    again = init_pid(wire, "tx-epochs")  # a new instance: the epoch goes up, the old instance is fenced
    assert (again["producer_id"], again["producer_epoch"]) == (pid, 1)
    # KIP-360 (v3+): the producer names its id and current epoch to have it bumped
    bumped = init_pid(wire, "tx-epochs", pid=pid, epoch=1)
    assert (bumped["error_code"], bumped["producer_id"], bumped["producer_epoch"]) == (0, pid, 2)
    retry = init_pid(wire, "tx-epochs", pid=pid, epoch=1)  # a retry of that call: the same epoch
    assert (retry["error_code"], retry["producer_epoch"]) == (0, 2)
    assert init_pid(wire, "tx-epochs", pid=pid, epoch=0)["error_code"] == ErrorCode.PRODUCER_FENCED
    assert init_pid(wire, "tx-epochs", pid=pid, epoch=0, version=3)["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert init_pid(wire, "tx-epochs", pid=pid + 999, epoch=2)["error_code"] == ErrorCode.PRODUCER_FENCED
    assert describe(wire, "tx-epochs")["producer_epoch"] == 2


@pytest.mark.rill_broker_config(**FAST)
def test_add_partitions_describe_list_and_verify(rill_broker, wire: Wire) -> None:
    topic = _topic(rill_broker.bootstrap_servers, 3)
    find_txn_coordinator(wire, "tx-add")
    r = init_pid(wire, "tx-add")
    pid, epoch = r["producer_id"], r["producer_epoch"]
    # one partition that does not exist fails the whole request, and nothing is added
    errors = add_partitions(wire, "tx-add", pid, epoch, topic, [0, 7])
    assert errors == {0: ErrorCode.OPERATION_NOT_ATTEMPTED, 7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert describe(wire, "tx-add")["transaction_state"] == "Empty"
    assert add_partitions(wire, "tx-add", pid, epoch + 1, topic, [0]) == {0: ErrorCode.PRODUCER_FENCED}
    assert add_partitions(wire, "tx-add", pid, epoch + 1, topic, [0], version=1) == {
        0: ErrorCode.INVALID_PRODUCER_EPOCH
    }
    assert add_partitions(wire, "tx-add", pid + 1, epoch, topic, [0]) == {0: ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    started = int(time.time() * 1000)
    assert add_partitions(wire, "tx-add", pid, epoch, topic, [0, 1]) == {0: 0, 1: 0}
    d = describe(wire, "tx-add")
    assert (d["error_code"], d["transaction_state"], d["producer_id"], d["producer_epoch"]) == (0, "Ongoing", pid, 0)
    assert [(t["topic"], sorted(t["partitions"])) for t in d["topics"]] == [(topic, [0, 1])]
    assert abs(d["transaction_start_time_ms"] - started) < 5000 and d["transaction_timeout_ms"] == 60000

    listed = wire.call(ApiKey.LIST_TRANSACTIONS, 1, {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": [],
                                                     "duration_filter": -1})  # fmt: skip
    assert listed["error_code"] == 0 and listed["unknown_state_filters"] == ["Bogus"]
    assert [(s["transactional_id"], s["producer_id"], s["transaction_state"]) for s in listed["transaction_states"]] \
        == [("tx-add", pid, "Ongoing")]  # fmt: skip
    none = wire.call(ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": ["Empty"], "producer_id_filters": [pid]})
    assert none["transaction_states"] == []
    young = wire.call(ApiKey.LIST_TRANSACTIONS, 1, {"state_filters": [], "producer_id_filters": [],
                                                    "duration_filter": 3_600_000})  # fmt: skip
    assert young["transaction_states"] == []

    # KIP-890's check, as a partition leader asks it: partitions in the transaction pass, others do not
    verify = wire.call(ApiKey.ADD_PARTITIONS_TO_TXN, 4, {"transactions": [
        {"transactional_id": "tx-add", "producer_id": pid, "producer_epoch": epoch, "verify_only": True,
         "topics": [{"name": topic, "partitions": [1, 2]}]},
        {"transactional_id": "tx-add", "producer_id": pid, "producer_epoch": epoch + 1, "verify_only": True,
         "topics": [{"name": topic, "partitions": [1]}]},
    ]})  # fmt: skip
    first, fenced = verify["results_by_transaction"]
    results = first["topic_results"][0]["results_by_partition"]
    assert {p["partition_index"]: p["partition_error_code"] for p in results} == {1: 0, 2: ErrorCode.INVALID_TXN_STATE}
    assert fenced["topic_results"][0]["results_by_partition"][0]["partition_error_code"] == ErrorCode.PRODUCER_FENCED
    d = describe(wire, "tx-add")
    assert [(t["topic"], sorted(t["partitions"])) for t in d["topics"]] == [(topic, [0, 1])]  # verify added nothing
    states = [r.state.display for r in state_records(rill_broker.bootstrap_servers, "tx-add") if r is not None]
    assert states == ["Empty", "Ongoing"]


@pytest.mark.rill_broker_config(**FAST)
def test_end_txn_refusals(wire: Wire) -> None:
    find_txn_coordinator(wire, "tx-end")
    r = init_pid(wire, "tx-end")
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert end_txn(wire, "tx-end", pid, epoch, True) == ErrorCode.INVALID_TXN_STATE  # nothing open
    assert end_txn(wire, "tx-end", pid + 1, epoch, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert end_txn(wire, "tx-end", pid, epoch + 1, False) == ErrorCode.PRODUCER_FENCED
    assert end_txn(wire, "tx-end", pid, epoch + 1, False, version=1) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert end_txn(wire, "tx-unknown", pid, epoch, False) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert describe(wire, "tx-end")["transaction_state"] == "Empty"


@pytest.mark.rill_broker_config(**FAST)
def test_commit_and_abort_write_markers_then_complete(rill_broker, wire: Wire) -> None:
    bootstrap = rill_broker.bootstrap_servers
    topic = _topic(bootstrap, 2)
    find_txn_coordinator(wire, "tx-commit")
    r = init_pid(wire, "tx-commit")
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert add_partitions(wire, "tx-commit", pid, epoch, topic, [0, 1]) == {0: 0, 1: 0}
    assert end_txn(wire, "tx-commit", pid, epoch, True) == 0
    wait_for_state(wire, "tx-commit", "CompleteCommit")
    assert _high_watermarks(bootstrap, topic, 2) == [1, 1]  # one commit marker on each partition
    assert end_txn(wire, "tx-commit", pid, epoch, True) == 0  # a retry of the commit: answered as done
    assert end_txn(wire, "tx-commit", pid, epoch, False) == ErrorCode.INVALID_TXN_STATE
    assert add_partitions(wire, "tx-commit", pid, epoch, topic, [1]) == {1: 0}
    assert end_txn(wire, "tx-commit", pid, epoch, False) == 0
    d = wait_for_state(wire, "tx-commit", "CompleteAbort")
    assert d["topics"] == [] and d["producer_epoch"] == epoch
    assert _high_watermarks(bootstrap, topic, 2) == [1, 2]
    states = [(s.state.display, sorted(p.partition for p in s.partitions))
              for s in state_records(bootstrap, "tx-commit") if s is not None]  # fmt: skip
    assert states == [("Empty", []), ("Ongoing", [0, 1]), ("PrepareCommit", [0, 1]), ("CompleteCommit", []),
                      ("Ongoing", [1]), ("PrepareAbort", [1]), ("CompleteAbort", [])]  # fmt: skip


@pytest.mark.rill_broker_config(**FAST)
def test_a_new_instance_aborts_the_open_transaction_first(rill_broker, wire: Wire) -> None:
    bootstrap = rill_broker.bootstrap_servers
    topic = _topic(bootstrap, 1)
    find_txn_coordinator(wire, "tx-zombie")
    r = init_pid(wire, "tx-zombie")
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert add_partitions(wire, "tx-zombie", pid, epoch, topic, [0]) == {0: 0}
    body = {"transactional_id": "tx-zombie", "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1}
    first = wire.call(ApiKey.INIT_PRODUCER_ID, 4, body)
    assert first["error_code"] == ErrorCode.CONCURRENT_TRANSACTIONS  # the open transaction is being aborted
    new = call_until(wire, ApiKey.INIT_PRODUCER_ID, 4, body)
    assert (new["error_code"], new["producer_id"], new["producer_epoch"]) == (0, pid, epoch + 2)
    assert end_txn(wire, "tx-zombie", pid, epoch, True) == ErrorCode.PRODUCER_FENCED  # the zombie
    assert _high_watermarks(bootstrap, topic, 1) == [1]  # its abort marker
    states = [(s.state.display, s.producer_epoch) for s in state_records(bootstrap, "tx-zombie") if s is not None]
    assert states == [("Empty", 0), ("Ongoing", 0), ("PrepareAbort", 1), ("CompleteAbort", 1), ("Empty", 2)]


@pytest.mark.rill_broker_config(**FAST)
def test_a_transaction_past_its_timeout_is_aborted(rill_broker, wire: Wire) -> None:
    bootstrap = rill_broker.bootstrap_servers
    topic = _topic(bootstrap, 1)
    find_txn_coordinator(wire, "tx-slow")
    r = init_pid(wire, "tx-slow", timeout_ms=500)
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert add_partitions(wire, "tx-slow", pid, epoch, topic, [0]) == {0: 0}
    d = wait_for_state(wire, "tx-slow", "CompleteAbort", timeout_s=10)
    assert d["producer_epoch"] == epoch + 1  # the producer is fenced
    assert end_txn(wire, "tx-slow", pid, epoch, True) == ErrorCode.PRODUCER_FENCED
    assert _high_watermarks(bootstrap, topic, 1) == [1]


@pytest.mark.rill_broker_config(**{**FAST, "transactional.id.expiration.ms": "300",
                                   "transaction.remove.expired.transaction.cleanup.interval.ms": "100"})  # fmt: skip
def test_idle_ids_expire_with_a_tombstone(rill_broker, wire: Wire) -> None:
    find_txn_coordinator(wire, "tx-idle")
    assert init_pid(wire, "tx-idle")["error_code"] == 0
    deadline = time.monotonic() + 10
    while describe(wire, "tx-idle")["error_code"] != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
        assert time.monotonic() < deadline, "the idle id was not removed"
        time.sleep(0.05)
    records = state_records(rill_broker.bootstrap_servers, "tx-idle")
    assert records[-1] is None and len(records) >= 2
    again = init_pid(wire, "tx-idle")  # a new producer id, from epoch 0
    assert (again["error_code"], again["producer_epoch"]) == (0, 0)


def test_coordinator_metrics() -> None:
    import socket

    from tests.integration.test_metrics import scrape, value

    import rill.testing

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with rill.testing.broker({**FAST, "metrics.port": str(port)}) as b:
        topic = _topic(b.bootstrap_servers, 1)
        w = Wire(b.bootstrap_servers, timeout=30)
        try:
            find_txn_coordinator(w, "tx-m")
            r = init_pid(w, "tx-m")
            for commit in (True, False, True):
                assert add_partitions(w, "tx-m", r["producer_id"], r["producer_epoch"], topic, [0]) == {0: 0}
                assert end_txn(w, "tx-m", r["producer_id"], r["producer_epoch"], commit) == 0
                wait_for_state(w, "tx-m", "CompleteCommit" if commit else "CompleteAbort")
        finally:
            w.close()
        samples = scrape(port)
    assert value(samples, "rill_transactions_completed_total", outcome="committed") == 2
    assert value(samples, "rill_transactions_completed_total", outcome="aborted") == 1
    assert value(samples, "rill_transaction_coordinator_transactional_ids") == 1
    assert ("kafka_server_transaction_coordinator_metrics_partition_load_time_max", ()) in samples


def _produce_txn(w: Wire, txn_id: str, pid: int, epoch: int, topic: str, partition: int, seq: int) -> int:
    from rill.records.builder import build_batch
    from rill.records.record import Record

    batch = build_batch([Record(0, int(time.time() * 1000), None, b"v")], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=True)  # fmt: skip
    resp = w.call(ApiKey.PRODUCE, 9, {"transactional_id": txn_id, "acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})  # fmt: skip
    return int(resp["responses"][0]["partition_responses"][0]["error_code"])


@pytest.mark.rill_broker_config(**FAST)
def test_a_transactional_write_to_a_partition_not_in_the_transaction_is_refused(rill_broker, wire: Wire) -> None:
    """KIP-890: the partition leader asks the coordinator; only partitions added to the transaction take
    transactional batches, unless transaction.partition.verification.enable is turned off (dynamically)."""
    bootstrap = rill_broker.bootstrap_servers
    topic = _topic(bootstrap, 2)
    find_txn_coordinator(wire, "tx-verify")
    r = init_pid(wire, "tx-verify")
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert add_partitions(wire, "tx-verify", pid, epoch, topic, [0]) == {0: 0}
    assert _produce_txn(wire, "tx-verify", pid, epoch, topic, 0, 0) == 0
    assert _produce_txn(wire, "tx-verify", pid, epoch, topic, 1, 0) == ErrorCode.INVALID_TXN_STATE
    assert _produce_txn(wire, "tx-verify", pid, epoch + 1, topic, 1, 0) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert _high_watermarks(bootstrap, topic, 2)[1] == 0  # nothing was written
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("transaction.partition.verification.enable", "false",
                    incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    admin.incremental_alter_configs([resource])[resource].result(10)
    assert _produce_txn(wire, "tx-verify", pid, epoch, topic, 1, 0) == 0


@pytest.mark.rill_broker_config(**FAST)
def test_the_markers_of_a_deleted_topic_are_dropped(rill_broker, wire: Wire) -> None:
    bootstrap = rill_broker.bootstrap_servers
    gone, kept = _topic(bootstrap, 1), _topic(bootstrap, 1)
    find_txn_coordinator(wire, "tx-deleted")
    r = init_pid(wire, "tx-deleted")
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert add_partitions(wire, "tx-deleted", pid, epoch, gone, [0]) == {0: 0}
    assert add_partitions(wire, "tx-deleted", pid, epoch, kept, [0]) == {0: 0}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([gone])[gone].result(10)
    assert end_txn(wire, "tx-deleted", pid, epoch, True) == 0
    wait_for_state(wire, "tx-deleted", "CompleteCommit")
    assert _high_watermarks(bootstrap, kept, 1) == [1]
