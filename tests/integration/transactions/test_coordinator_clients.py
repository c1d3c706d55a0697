"""confluent-kafka's transactional producer against the transaction coordinator on one broker: commit, abort,
a new instance fencing the old one, and ``send_offsets_to_transaction`` with a consumer group (the offsets
become visible only at commit, also after a restart)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.broker._wire import Wire
from tests.integration.transactions._txn import describe, state_records

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey

CONFIGS = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
}


def _topic(bootstrap: str, partitions: int = 2) -> str:
    name = f"txc-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    return name


def _producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **extra})


def _read(bootstrap: str, topic: str, partitions: int, isolation: str, expected: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.auto.commit": False})  # fmt: skip
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(out) < expected:
        msg = c.poll(0.2)
        if msg is not None and not msg.error():
            out.append(msg.value())
    c.close()
    return out


@pytest.mark.rill_broker_config(**CONFIGS)
def test_commit_and_abort(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    topic = _topic(bootstrap)
    p = _producer(bootstrap, "ck-commit")
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, f"a{i}".encode(), partition=i % 2)
    p.flush(10)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"c-last", partition=0)
    p.commit_transaction(30)
    committed = _read(bootstrap, topic, 2, "read_committed", 11)
    assert sorted(committed) == sorted([f"c{i}".encode() for i in range(10)] + [b"c-last"])
    everything = _read(bootstrap, topic, 2, "read_uncommitted", 17)
    assert len(everything) == 17  # the aborted records are in the log, with their markers
    states = [s.state.display for s in state_records(bootstrap, "ck-commit") if s is not None]
    assert states[0] == "Empty" and states.count("CompleteCommit") == 2 and states.count("CompleteAbort") == 1
    assert states[-1] == "CompleteCommit"


@pytest.mark.rill_broker_config(**CONFIGS)
def test_a_new_instance_fences_the_old_one(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    topic = _topic(bootstrap)
    old = _producer(bootstrap, "ck-fence")
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(topic, b"zombie", partition=0)
    old.flush(10)
    new = _producer(bootstrap, "ck-fence")
    new.init_transactions(30)  # aborts the old instance's open transaction and bumps the epoch
    with pytest.raises(KafkaException) as e:
        old.produce(topic, b"zombie-2", partition=1)
        old.commit_transaction(30)
    err = e.value.args[0]
    assert err.fatal() and err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                          KafkaError.INVALID_PRODUCER_EPOCH)  # fmt: skip
    new.begin_transaction()
    new.produce(topic, b"fresh", partition=0)
    new.commit_transaction(30)
    assert _read(bootstrap, topic, 2, "read_committed", 1) == [b"fresh"]
    w = Wire(bootstrap)
    try:
        d = describe(w, "ck-fence")
    finally:
        w.close()
    assert d["transaction_state"] == "CompleteCommit" and d["producer_epoch"] == 2


def _offset_fetch(bootstrap: str, group: str, topic: str, require_stable: bool) -> tuple[int, int]:
    """(error code, committed offset) of partition 0 with OffsetFetch v7."""
    w = Wire(bootstrap)
    try:
        coordinator = w.call(ApiKey.FIND_COORDINATOR, 2, {"key": group, "key_type": 0})
        assert coordinator["error_code"] == 0
        resp = w.call(ApiKey.OFFSET_FETCH, 7, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                                               "require_stable": require_stable})  # fmt: skip
    finally:
        w.close()
    (t,) = resp["topics"]
    (p,) = t["partitions"]
    return p["error_code"], p["committed_offset"]


def test_send_offsets_to_transaction_shows_them_only_at_commit() -> None:
    with rill.testing.broker(CONFIGS, subprocess=False) as b:
        bootstrap = b.bootstrap_servers
        source, sink = _topic(bootstrap, 1), _topic(bootstrap, 1)
        src = Producer({"bootstrap.servers": bootstrap})
        for i in range(20):
            src.produce(source, f"in-{i}".encode(), partition=0)
        src.flush(10)
        group = f"eos-{uuid.uuid4().hex[:6]}"
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed"})  # fmt: skip
        consumer.assign([TopicPartition(source, 0, 0)])
        seen = 0
        deadline = time.monotonic() + 10
        while seen < 20 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                seen += 1
        assert seen == 20
        p = _producer(bootstrap, "ck-offsets")
        p.init_transactions(30)

        # an aborted transaction's offsets are never visible
        p.begin_transaction()
        p.produce(sink, b"out-aborted", partition=0)
        p.send_offsets_to_transaction([TopicPartition(source, 0, 5)], consumer.consumer_group_metadata(), 30)
        p.abort_transaction(30)
        assert _offset_fetch(bootstrap, group, source, False) == (0, -1)

        p.begin_transaction()
        p.produce(sink, b"out", partition=0)
        p.send_offsets_to_transaction([TopicPartition(source, 0, 20)], consumer.consumer_group_metadata(), 30)
        p.flush(10)
        # pending until the commit: not shown, and UNSTABLE_OFFSET_COMMIT for a client that asks for stable offsets
        assert _offset_fetch(bootstrap, group, source, False) == (0, -1)
        assert _offset_fetch(bootstrap, group, source, True)[0] == ErrorCode.UNSTABLE_OFFSET_COMMIT
        p.commit_transaction(30)
        deadline = time.monotonic() + 10
        while _offset_fetch(bootstrap, group, source, True) != (0, 20):
            assert time.monotonic() < deadline, "the committed offsets did not become visible"
            time.sleep(0.05)
        (tp,) = consumer.committed([TopicPartition(source, 0)], timeout=10)
        assert tp.offset == 20
        consumer.close()

        # a transaction left open when the broker restarts: its offsets stay pending after the replay
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(source, 0, 7)], Consumer({"bootstrap.servers": bootstrap,
                                      "group.id": group}).consumer_group_metadata(), 30)  # fmt: skip
        b.restart()
        assert _offset_fetch(b.bootstrap_servers, group, source, False) == (0, 20)
        assert _offset_fetch(b.bootstrap_servers, group, source, True)[0] == ErrorCode.UNSTABLE_OFFSET_COMMIT
