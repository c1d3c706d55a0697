"""aiokafka 0.14 (ApiVersions v0, Metadata 5, Produce 7, Fetch 11) against a Rill broker."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from tests.compat._data import CODECS, N_RECORDS, make_records


async def _roundtrip(bootstrap: str, topic: str, codec: str) -> None:
    records = make_records(seed="aio" + codec)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        linger_ms=5,
        acks="all",
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic, r.value, key=r.key, partition=0, timestamp_ms=r.timestamp, headers=r.headers
            )
            for r in records
        ]
        metas = await asyncio.gather(*futures)
        assert [m.offset for m in metas] == list(range(N_RECORDS))
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = []
        async with asyncio.timeout(60):
            while len(got) < N_RECORDS:
                batch = await consumer.getmany(tp, timeout_ms=1000, max_records=5000)
                got.extend(batch.get(tp, []))
    finally:
        await consumer.stop()
    for i, (m, r) in enumerate(zip(got, records, strict=True)):
        assert (m.offset, m.key, m.value, m.timestamp) == (i, r.key, r.value, r.timestamp)
        assert list(m.headers) == r.headers


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(rill_broker, codec: str) -> None:
    asyncio.run(_roundtrip(rill_broker.bootstrap_servers, f"aio-{codec}", codec))
