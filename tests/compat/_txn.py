"""Helpers for the transaction tests: broker configs, topics, and reading a partition to its end with each
isolation level."""

from __future__ import annotations

import time
import uuid
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

# A small __transaction_state so the single test broker creates it quickly; short timeouts so a test that
# leaves a transaction open sees the coordinator abort it soon.
BROKER_CONFIGS = {
    "transaction.state.log.num.partitions": "5",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.min.session.timeout.ms": "500",
}


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def txn_producer(bootstrap: str, transactional_id: str, **extra: Any) -> ck.Producer:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id,
        "linger.ms": 5,
        "transaction.timeout.ms": 30000,
    }
    conf.update(extra)
    return ck.Producer(conf)


def read_partition(
    bootstrap: str, topic: str, partition: int = 0, *, committed: bool = True, timeout: float = 30.0
) -> list[bytes]:
    """Every value of one partition from offset 0 to its end (the last stable offset with ``committed``, the
    high watermark without), read by confluent-kafka with that isolation level."""
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"txn-read-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    c.assign([ck.TopicPartition(topic, partition, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            if time.monotonic() > deadline:
                raise AssertionError(f"no end of {topic}-{partition} within {timeout}s (got {len(got)})")
            msg = c.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == ck.KafkaError._PARTITION_EOF:
                    return got
                raise AssertionError(err)
            got.append(msg.value())
    finally:
        c.close()


def read_all(bootstrap: str, topic: str, partitions: int, *, committed: bool = True) -> list[bytes]:
    out: list[bytes] = []
    for p in range(partitions):
        out.extend(read_partition(bootstrap, topic, p, committed=committed))
    return out


def end_offsets(bootstrap: str, topic: str, partition: int = 0, *, committed: bool) -> int:
    """The partition's end as ListOffsets answers it: the LSO with ``committed``, else the high watermark."""
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"txn-end-{uuid.uuid4()}",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    try:
        _, high = c.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=10)
        return int(high)
    finally:
        c.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = c.committed([ck.TopicPartition(topic, p) for p in range(partitions)], timeout=15)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def read_committed_kafka_python(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """kafka-python's read_committed consumer, from the start of each partition to its last stable offset."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    tps = [KpTopicPartition(topic, p) for p in range(partitions)]
    got: list[bytes] = []
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(tps)  # the LSO for a read_committed consumer
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise AssertionError(f"kafka-python did not reach {ends} of {topic} (got {len(got)})")
            for msgs in consumer.poll(timeout_ms=200).values():
                got.extend(m.value for m in msgs)
    finally:
        consumer.close()
    return got


async def _aiokafka_read_committed(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [AioTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)  # the LSO for a read_committed consumer
        got: list[bytes] = []
        async with asyncio.timeout(30):
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                for msgs in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(m.value for m in msgs)
        return got
    finally:
        await consumer.stop()


def read_committed_aiokafka(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """aiokafka's read_committed consumer, from the start of each partition to its last stable offset."""
    import asyncio

    return asyncio.run(_aiokafka_read_committed(bootstrap, topic, partitions))
