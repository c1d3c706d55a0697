"""Consumer groups with kafka-python 3.0.12, aiokafka 0.14 and kcat (librdkafka 2.0.2): partitions split across
members, every record consumed once with commits after processing."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
from collections import Counter

import pytest
from tests.compat._groups import BROKER_CONFIGS, create_topic, produce

import rill.testing

PARTITIONS = 6


@pytest.fixture
def broker():
    with rill.testing.broker(BROKER_CONFIGS) as b:
        yield b


@pytest.mark.timeout(90)
def test_kafka_python_group(broker) -> None:
    from kafka import KafkaConsumer

    bs = broker.bootstrap_servers
    create_topic(bs, "kp", PARTITIONS)
    sent = produce(bs, "kp", 120, PARTITIONS)
    consumers = [
        KafkaConsumer(
            "kp",
            bootstrap_servers=bs,
            group_id="kp-group",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=300,
        )
        for _ in range(3)
    ]
    received: Counter[bytes] = Counter()
    lock = threading.Lock()
    done = threading.Event()

    # One thread per consumer, as applications run them: kafka-python 3.0.12 sends a fresh JoinGroup when
    # its previous one completed while no poll() was waiting for it, so consumers taking turns in one
    # thread make the leader rejoin after every rebalance (a new rebalance each time, seen under load).
    def run(c: KafkaConsumer) -> None:
        while not done.is_set():
            for records in c.poll(timeout_ms=200).values():
                with lock:
                    for r in records:
                        received[r.value] += 1
                c.commit()

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in consumers]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            owned = [{tp.partition for tp in c.assignment()} for c in consumers]
            with lock:
                total = sum(received.values())
            if total >= len(sent) and all(owned) and sum(map(len, owned)) == PARTITIONS:
                break
            time.sleep(0.05)
        done.set()
        for t in threads:
            t.join(10)
        owned = [{tp.partition for tp in c.assignment()} for c in consumers]
        assert sorted(p for o in owned for p in o) == list(range(PARTITIONS)), owned
        assert set(received) == set(sent) and all(n == 1 for n in received.values())
    finally:
        done.set()
        for c in consumers:
            c.close()


@pytest.mark.timeout(90)
def test_aiokafka_group(broker) -> None:
    from aiokafka import AIOKafkaConsumer

    bs = broker.bootstrap_servers
    create_topic(bs, "aio", PARTITIONS)
    sent = produce(bs, "aio", 120, PARTITIONS)

    async def run() -> tuple[Counter[bytes], list[set[int]]]:
        consumers = [
            AIOKafkaConsumer(
                "aio",
                bootstrap_servers=bs,
                group_id="aio-group",
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                session_timeout_ms=6000,
                heartbeat_interval_ms=300,
            )
            for _ in range(3)
        ]
        received: Counter[bytes] = Counter()
        for c in consumers:
            await c.start()
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for c in consumers:
                    batches = await c.getmany(timeout_ms=50)
                    for records in batches.values():
                        for r in records:
                            received[r.value] += 1
                    if batches:
                        await c.commit()
                owned = [{tp.partition for tp in c.assignment()} for c in consumers]
                if sum(received.values()) >= len(sent) and all(owned) and sum(map(len, owned)) == PARTITIONS:
                    break
            return received, [{tp.partition for tp in c.assignment()} for c in consumers]
        finally:
            for c in consumers:
                await c.stop()

    received, owned = asyncio.run(run())
    assert sorted(p for o in owned for p in o) == list(range(PARTITIONS)), owned
    assert set(received) == set(sent) and all(n == 1 for n in received.values())


@pytest.mark.timeout(60)
def test_kcat_balanced_consumer(broker) -> None:
    assert shutil.which("kcat"), "kcat is not installed (the README's test command installs it)"
    import confluent_kafka as ck

    bs = broker.bootstrap_servers
    create_topic(bs, "kc", 3)
    sent = produce(bs, "kc", 30, 3)
    out = subprocess.run(
        ["kcat", "-b", bs, "-G", "kc-group", "-X", "auto.offset.reset=earliest", "-c", "30", "-q", "-f", "%s\n", "kc"],
        capture_output=True,
        timeout=40,
        check=True,
    )
    assert sorted(out.stdout.split()) == sorted(sent)
    # kcat commits as it goes (auto commit): the group's offsets reach the end of every partition.
    probe = ck.Consumer({"bootstrap.servers": bs, "group.id": "kc-group"})
    try:
        deadline = time.monotonic() + 10
        while True:
            committed = probe.committed([ck.TopicPartition("kc", p) for p in range(3)], timeout=10)
            if sum(max(tp.offset, 0) for tp in committed) == 30 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert sum(max(tp.offset, 0) for tp in committed) == 30
    finally:
        probe.close()
