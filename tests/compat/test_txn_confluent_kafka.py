"""confluent-kafka's (librdkafka 2.16) transactional producer against a Rill broker: commit, abort, abort then
retry then commit, offsets sent to the transaction, zombie fencing; read_committed consumers see committed
records only."""

from __future__ import annotations

import uuid

import confluent_kafka as ck
import pytest
from tests.compat._txn import (
    BROKER_CONFIGS,
    committed_offsets,
    create_topic,
    end_offsets,
    read_all,
    read_partition,
    txn_producer,
)

pytestmark = pytest.mark.rill_broker_config(BROKER_CONFIGS)


def _values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


def test_commit_makes_records_visible_to_read_committed(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    create_topic(bootstrap, "tx-commit", 3)
    p = txn_producer(bootstrap, "tx-commit-app")
    p.init_transactions(30)
    p.begin_transaction()
    values = _values("c", 300)
    for i, v in enumerate(values):
        p.produce("tx-commit", v, partition=i % 3)
    p.flush(30)
    # Flushed but not committed: in the log, past the last stable offset.
    assert read_partition(bootstrap, "tx-commit", 0, committed=True) == []
    assert len(read_partition(bootstrap, "tx-commit", 0, committed=False)) == 100
    assert end_offsets(bootstrap, "tx-commit", 0, committed=True) == 0
    p.commit_transaction(30)
    got = read_all(bootstrap, "tx-commit", 3)
    assert sorted(got) == sorted(values)
    # 100 records and a commit marker per partition; the marker is not a record a consumer sees.
    assert end_offsets(bootstrap, "tx-commit", 0, committed=False) == 101
    assert end_offsets(bootstrap, "tx-commit", 0, committed=True) == 101


def test_abort_hides_records_from_read_committed(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    create_topic(bootstrap, "tx-abort", 2)
    p = txn_producer(bootstrap, "tx-abort-app")
    p.init_transactions(30)
    p.begin_transaction()
    for i, v in enumerate(_values("a", 200)):
        p.produce("tx-abort", v, partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    assert read_all(bootstrap, "tx-abort", 2, committed=True) == []
    # The aborted records are in the log: read_uncommitted returns them.
    assert len(read_all(bootstrap, "tx-abort", 2, committed=False)) == 200


def test_abort_then_retry_then_commit(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    create_topic(bootstrap, "tx-retry", 2)
    p = txn_producer(bootstrap, "tx-retry-app")
    p.init_transactions(30)
    committed: list[bytes] = []
    for attempt in range(3):
        p.begin_transaction()
        batch = _values(f"try{attempt}", 50)
        for i, v in enumerate(batch):
            p.produce("tx-retry", v, partition=i % 2)
        if attempt < 2:
            p.flush(30)  # sent, then aborted (unsent messages would only be purged)
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            committed = batch
    # A second committed transaction after the aborted ones, interleaved in the same partitions.
    p.begin_transaction()
    extra = _values("more", 10)
    for i, v in enumerate(extra):
        p.produce("tx-retry", v, partition=i % 2)
    p.commit_transaction(30)
    got = read_all(bootstrap, "tx-retry", 2, committed=True)
    assert sorted(got) == sorted(committed + extra)
    # Order within a partition is kept and no aborted record shows.
    p0 = read_partition(bootstrap, "tx-retry", 0)
    assert p0 == [v for i, v in enumerate(committed) if i % 2 == 0] + [v for i, v in enumerate(extra) if i % 2 == 0]
    assert len(read_all(bootstrap, "tx-retry", 2, committed=False)) == 160


def test_send_offsets_to_transaction(rill_broker) -> None:
    """Consume-transform-produce: the input offsets are committed with the output, or not at all."""
    bootstrap = rill_broker.bootstrap_servers
    create_topic(bootstrap, "tx-in", 2)
    create_topic(bootstrap, "tx-out", 2)
    plain = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(40):
        plain.produce("tx-in", f"in-{i}".encode(), partition=i % 2)
    assert plain.flush(15) == 0
    group = f"ctp-{uuid.uuid4()}"
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([ck.TopicPartition("tx-in", 0, 0), ck.TopicPartition("tx-in", 1, 0)])
    msgs = []
    while len(msgs) < 40:
        msgs.extend(m for m in consumer.consume(40, timeout=1.0) if m.error() is None)
    p = txn_producer(bootstrap, "ctp-app")
    p.init_transactions(30)

    def run(commit: bool) -> None:
        p.begin_transaction()
        for m in msgs:
            p.produce("tx-out", m.value().upper(), partition=m.partition())
        offsets = [ck.TopicPartition("tx-in", part, 20) for part in (0, 1)]
        p.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)

    run(commit=False)
    assert committed_offsets(bootstrap, group, "tx-in", 2) == {0: ck.OFFSET_INVALID, 1: ck.OFFSET_INVALID}
    assert read_all(bootstrap, "tx-out", 2) == []
    run(commit=True)
    assert committed_offsets(bootstrap, group, "tx-in", 2) == {0: 20, 1: 20}
    assert sorted(read_all(bootstrap, "tx-out", 2)) == sorted(f"IN-{i}".encode() for i in range(40))
    consumer.close()


def test_second_instance_fences_the_first(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    create_topic(bootstrap, "tx-fence", 1)
    first = txn_producer(bootstrap, "fence-app")
    first.init_transactions(30)
    first.begin_transaction()
    first.produce("tx-fence", b"zombie", partition=0)
    first.flush(30)
    # The second instance's InitProducerId bumps the epoch and aborts the first one's open transaction.
    second = txn_producer(bootstrap, "fence-app")
    second.init_transactions(30)
    second.begin_transaction()
    second.produce("tx-fence", b"live", partition=0)
    second.commit_transaction(30)
    with pytest.raises(ck.KafkaException) as ei:
        first.produce("tx-fence", b"zombie-2", partition=0)
        first.commit_transaction(30)
    err = ei.value.args[0]
    assert err.fatal() or err.code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED), err
    assert read_partition(bootstrap, "tx-fence", 0) == [b"live"]
    assert read_partition(bootstrap, "tx-fence", 0, committed=False).count(b"zombie") == 1
