"""A consume-transform-produce loop (confluent-kafka consumer and transactional producer) that aborts every third
transaction and rewinds to its committed offsets; read_committed consumers of the three Python clients read
every input's output exactly once and never an aborted record, while read_uncommitted shows the aborted ones."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import confluent_kafka as ck
import pytest
from tests.compat._txn import (
    BROKER_CONFIGS,
    committed_offsets,
    create_topic,
    read_all,
    read_committed_aiokafka,
    read_committed_kafka_python,
    txn_producer,
)

pytestmark = pytest.mark.rill_broker_config(BROKER_CONFIGS)

PARTITIONS = 3
N = 1500


def _rewind(consumer: ck.Consumer, topic: str) -> None:
    """Back to the group's committed offsets (the start where none is committed)."""
    for tp in consumer.committed([ck.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=15):
        consumer.seek(ck.TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else 0))


def test_loop_with_aborts_reads_exactly_once(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    create_topic(bootstrap, "ctp-in", PARTITIONS)
    create_topic(bootstrap, "ctp-out", PARTITIONS)
    source = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(N):
        source.produce("ctp-in", f"{i}".encode(), partition=i % PARTITIONS)
    assert source.flush(30) == 0

    group = f"ctp-{uuid.uuid4()}"
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([ck.TopicPartition("ctp-in", p, 0) for p in range(PARTITIONS)])
    producer = txn_producer(bootstrap, f"ctp-loop-{group}")
    producer.init_transactions(30)
    transactions = aborted = 0
    deadline = time.monotonic() + 90
    while sum(committed_offsets(bootstrap, group, "ctp-in", PARTITIONS).values()) < N:
        assert time.monotonic() < deadline, "the loop did not finish in time"
        msgs = [m for m in consumer.consume(200, timeout=0.5) if m.error() is None]
        if not msgs:
            continue
        producer.begin_transaction()
        ends: dict[int, int] = {}
        for m in msgs:
            producer.produce("ctp-out", b"out-" + m.value(), partition=m.partition())
            ends[m.partition()] = m.offset() + 1
        producer.send_offsets_to_transaction(
            [ck.TopicPartition("ctp-in", p, o) for p, o in ends.items()], consumer.consumer_group_metadata(), 30
        )
        transactions += 1
        if transactions % 3 == 0:
            producer.flush(30)  # in the log, then aborted
            producer.abort_transaction(30)
            aborted += 1
            _rewind(consumer, "ctp-in")
        else:
            producer.commit_transaction(30)
    consumer.close()
    assert aborted >= 1

    expected = Counter(f"out-{i}".encode() for i in range(N))
    by_client = {
        "confluent-kafka": read_all(bootstrap, "ctp-out", PARTITIONS),
        "kafka-python": read_committed_kafka_python(bootstrap, "ctp-out", PARTITIONS),
        "aiokafka": read_committed_aiokafka(bootstrap, "ctp-out", PARTITIONS),
    }
    for client, values in by_client.items():
        got = Counter(values)
        assert got == expected, (client, len(values), sorted((got - expected).items())[:5])
    # The aborted transactions' records are in the log, read_committed skipped them.
    assert len(read_all(bootstrap, "ctp-out", PARTITIONS, committed=False)) > N
