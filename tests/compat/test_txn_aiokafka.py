"""aiokafka 0.14's transactional producer and read_committed consumer against a Rill broker."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from tests.compat._txn import BROKER_CONFIGS, committed_offsets, create_topic, read_all, read_committed_aiokafka

pytestmark = pytest.mark.rill_broker_config(BROKER_CONFIGS)


async def _commit_abort(bootstrap: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-tx-app", linger_ms=5)
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(100):
                await producer.send("aio-tx", f"kept-{i}".encode(), partition=i % 2)
        with pytest.raises(RuntimeError):
            async with producer.transaction():
                for i in range(100):
                    await producer.send("aio-tx", f"aborted-{i}".encode(), partition=i % 2)
                await producer.flush()
                raise RuntimeError("abort")  # the context manager aborts the transaction
        await producer.begin_transaction()
        await producer.send("aio-tx", b"last", partition=0)
        await producer.commit_transaction()
    finally:
        await producer.stop()


def test_commit_and_abort(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    create_topic(bootstrap, "aio-tx", 2)
    asyncio.run(_commit_abort(bootstrap))
    got = read_committed_aiokafka(bootstrap, "aio-tx", 2)
    assert sorted(got) == sorted([f"kept-{i}".encode() for i in range(100)] + [b"last"])
    assert len(read_all(bootstrap, "aio-tx", 2, committed=False)) == 201
    assert len(read_all(bootstrap, "aio-tx", 2)) == 101


async def _offsets_and_fencing(bootstrap: str, group: str) -> None:
    first = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-ctp-app")
    await first.start()
    second = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-ctp-app")
    try:
        async with first.transaction():
            for i in range(10):
                await first.send("aio-out", f"out-{i}".encode(), partition=0)
            await first.send_offsets_to_transaction({TopicPartition("aio-in", 0): 10}, group)
        await first.begin_transaction()
        await first.send("aio-out", b"zombie", partition=0)
        await first.flush()
        await second.start()  # InitProducerId: fences the first instance
        with pytest.raises(KafkaError):
            await first.commit_transaction()
        async with second.transaction():
            await second.send("aio-out", b"live", partition=0)
    finally:
        await second.stop()
        await first.stop()


def test_send_offsets_and_fencing(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    create_topic(bootstrap, "aio-in", 1)
    create_topic(bootstrap, "aio-out", 1)
    group = f"aio-ctp-{uuid.uuid4()}"
    asyncio.run(_offsets_and_fencing(bootstrap, group))
    assert committed_offsets(bootstrap, group, "aio-in", 1) == {0: 10}
    out = read_all(bootstrap, "aio-out", 1)
    assert out == [f"out-{i}".encode() for i in range(10)] + [b"live"]
