"""Real Kafka clients against a 3-broker Rill cluster: topics with replication factor 3 and
min.insync.replicas=2, produced with acks=all (idempotent where the client has it) and read back."""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from tests.cluster._helpers import create_topic, read_all

from rill.testing.cluster import TestCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _produce_confluent(c: TestCluster, topic: str, n: int, prefix: str = "v") -> None:
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5})  # fmt: skip
    for i in range(n):
        producer.produce(topic, key=str(i).encode(), value=f"{prefix}{i}".encode(),
                         on_delivery=lambda err, _m: errors.append(err) if err else None)  # fmt: skip
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []


def test_confluent_idempotent_acks_all_round_trip(rill3: TestCluster) -> None:
    create_topic(rill3, "cc-confluent")
    _produce_confluent(rill3, "cc-confluent", 1000)
    got = read_all(rill3, "cc-confluent", 3, 1000)
    values = sorted(int(v[1:]) for records in got.values() for _k, v in records)
    assert values == list(range(1000))
    for records in got.values():  # each partition in the order produced
        ordered = [int(v[1:]) for _k, v in records]
        assert ordered == sorted(ordered)


def test_kafka_python_acks_all_round_trip(rill3: TestCluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    create_topic(rill3, "cc-kafka-python")
    producer = KafkaProducer(bootstrap_servers=rill3.bootstrap_servers.split(","), acks="all", retries=5)
    futures = [producer.send("cc-kafka-python", key=b"k%d" % (i % 7), value=b"kp%d" % i) for i in range(300)]
    for f in futures:
        f.get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=rill3.bootstrap_servers.split(","), consumer_timeout_ms=5000)
    consumer.assign([KTP("cc-kafka-python", p) for p in range(3)])
    consumer.seek_to_beginning()
    values = {m.value for m in consumer}
    consumer.close()
    assert values == {b"kp%d" % i for i in range(300)}


def test_aiokafka_idempotent_round_trip(rill3: TestCluster) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    create_topic(rill3, "cc-aiokafka")

    async def main() -> set[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=rill3.bootstrap_servers, acks="all", enable_idempotence=True)
        await producer.start()
        try:
            for i in range(300):
                await producer.send("cc-aiokafka", key=b"k%d" % i, value=b"ai%d" % i)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("cc-aiokafka", bootstrap_servers=rill3.bootstrap_servers,
                                    auto_offset_reset="earliest", group_id="cc-aiokafka-group")  # fmt: skip
        await consumer.start()
        seen: set[bytes] = set()
        try:
            deadline = time.monotonic() + 30
            while len(seen) < 300 and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=1000)
                for records in batches.values():
                    seen.update(r.value for r in records if r.value is not None)
        finally:
            await consumer.stop()
        return seen

    assert asyncio.run(main()) == {b"ai%d" % i for i in range(300)}


def test_kcat_produce_and_consume(rill3: TestCluster) -> None:
    create_topic(rill3, "cc-kcat")
    lines = "".join(f"kc{i}\n" for i in range(200))
    subprocess.run(["kcat", "-b", rill3.bootstrap_servers, "-P", "-t", "cc-kcat", "-X", "acks=all",
                    "-X", "enable.idempotence=true"], input=lines.encode(), check=True, timeout=60)  # fmt: skip
    out = subprocess.run(["kcat", "-b", rill3.bootstrap_servers, "-C", "-t", "cc-kcat", "-e", "-q", "-f", "%s\n"],
                         capture_output=True, check=True, timeout=60)  # fmt: skip
    assert sorted(out.stdout.decode().split()) == sorted(f"kc{i}" for i in range(200))
    listing = subprocess.run(["kcat", "-b", rill3.bootstrap_servers, "-L", "-t", "cc-kcat"],
                             capture_output=True, check=True, timeout=60).stdout.decode()  # fmt: skip
    assert "3 brokers:" in listing
    assert listing.count("replicas: ") == 3


def test_consumer_group_commits_and_resumes(rill3: TestCluster) -> None:
    create_topic(rill3, "cc-group")
    _produce_confluent(rill3, "cc-group", 600)
    conf = {"bootstrap.servers": rill3.bootstrap_servers, "group.id": "cc-group-1", "auto.offset.reset": "earliest",
            "enable.auto.commit": False}  # fmt: skip

    def consume(count: int) -> list[bytes]:
        consumer = Consumer(conf)
        consumer.subscribe(["cc-group"])
        seen: list[bytes] = []
        deadline = time.monotonic() + 40
        try:
            while len(seen) < count and time.monotonic() < deadline:
                msg = consumer.poll(1.0)
                if msg is None or msg.error():
                    continue
                seen.append(msg.value())
                if len(seen) % 50 == 0 or len(seen) == count:
                    consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        return seen

    first = consume(300)
    assert len(first) == 300
    second = consume(300)
    assert len(second) == 300
    assert set(first) | set(second) == {b"v%d" % i for i in range(600)}
    assert not set(first) & set(second)
    probe = Consumer(conf)
    committed = probe.committed([TopicPartition("cc-group", p) for p in range(3)], timeout=10)
    probe.close()
    assert sum(tp.offset for tp in committed) == 600
