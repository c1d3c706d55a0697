"""Failover under load: an idempotent acks=all producer keeps sending while each broker in turn stops in a
controlled way and starts again, and while a leader is killed. No delivery may fail, every acknowledged record
is read back exactly once and in order per partition, and the producer's pause is measured: within 1 s of a
controlled shutdown, within ``zookeeper.session.timeout.ms`` + 1 s of a SIGKILL."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from tests.cluster._helpers import create_topic, read_all

from rill.testing.cluster import TestCluster

pytestmark = [pytest.mark.slow, pytest.mark.timing]

PARTITIONS = 3
SESSION_TIMEOUT_S = 4.0  # rill.testing.cluster's zookeeper.session.timeout.ms


@dataclass
class LoadProducer:
    """Sends numbered records as fast as acks come back (at most ``rate`` a second) from a thread."""

    bootstrap: str
    topic: str
    rate: float = 400.0
    sent: int = 0
    acked: dict[int, list[tuple[int, float, float]]] = field(default_factory=dict)  # partition -> (seq, sent, acked)
    errors: list[KafkaError] = field(default_factory=list)
    pending: dict[int, float] = field(default_factory=dict)  # seq -> when sent, until acknowledged
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> LoadProducer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 2, "message.timeout.ms": 60000})  # fmt: skip
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            seq = self.sent
            sent_at = time.monotonic()
            self.pending[seq] = sent_at
            producer.produce(self.topic, key=str(seq).encode(), value=str(seq).encode(),
                             on_delivery=lambda e, m, s=seq, t=sent_at: self._delivered(e, m, s, t))  # fmt: skip
            self.sent += 1
            next_at += interval
            producer.poll(max(0.0, next_at - time.monotonic()))
        assert producer.flush(60) == 0

    def _delivered(self, err: KafkaError | None, msg: object, seq: int, sent_at: float) -> None:
        self.pending.pop(seq, None)
        if err is not None:
            self.errors.append(err)
            return
        self.acked.setdefault(msg.partition(), []).append((seq, sent_at, time.monotonic()))  # type: ignore[attr-defined]

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(90)

    def acked_count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def pause_after(self, start: float, until: float) -> float:
        """The longest wait for an ack of a record sent in [start, until] (still waiting: until now): how long the
        producer was held."""
        now = time.monotonic()
        waits = [acked - sent for recs in self.acked.values() for _s, sent, acked in recs if start <= sent <= until]
        waits += [now - sent for sent in list(self.pending.values()) if start <= sent <= until]
        return max(waits, default=float("nan"))


@dataclass
class TailConsumer:
    """Reads the topic from the start while it is written (assigned partitions, no group), with
    ``auto.offset.reset=error`` so that any offset the cluster calls out of range shows up as an error."""

    bootstrap: str
    topic: str
    seen: dict[int, list[int]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> TailConsumer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"tail-{self.topic}",
                             "auto.offset.reset": "error", "enable.auto.commit": False})  # fmt: skip
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(PARTITIONS)])
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error() is not None:
                    if msg.error().code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        self.errors.append(str(msg.error()))
                    continue
                self.seen.setdefault(msg.partition(), []).append(int(msg.value()))
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(30)

    def check(self) -> None:
        assert self.errors == []
        for p, values in self.seen.items():
            assert len(values) == len(set(values)), f"partition {p}: the consumer saw records twice"
            assert values == sorted(values), f"partition {p}: the consumer saw records out of order"


def _wait_full_isr(c: TestCluster, topics: list[str]) -> None:
    c.wait_for(lambda: all(len(c.isr(t, p)) == 3 for t in topics for p in range(PARTITIONS)), 40, "the full ISR")


def _check_read_back(c: TestCluster, load: LoadProducer) -> None:
    got = read_all(c, load.topic, PARTITIONS, load.acked_count())
    for p in range(PARTITIONS):
        read = [int(v) for _k, v in got[p]]
        acked = [seq for seq, _s, _a in load.acked.get(p, [])]
        assert len(read) == len(set(read)), f"partition {p}: duplicates"
        assert read == sorted(read), f"partition {p}: out of order"
        missing = set(acked) - set(read)
        assert not missing, f"partition {p}: {len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"


@pytest.mark.timeout(150)
def test_controlled_shutdown_of_each_broker_under_load(rill3: TestCluster, record_property) -> None:  # type: ignore[no-untyped-def]
    create_topic(rill3, "fo-controlled", partitions=PARTITIONS)
    _wait_full_isr(rill3, ["fo-controlled"])
    load = LoadProducer(rill3.bootstrap_servers, "fo-controlled").start()
    tail = TailConsumer(rill3.bootstrap_servers, "fo-controlled").start()
    pauses = []
    try:
        time.sleep(1.0)
        for broker in rill3.brokers:
            _wait_full_isr(rill3, ["fo-controlled"])
            led = [p for p in range(PARTITIONS) if rill3.leader("fo-controlled", p) == broker]
            t0 = time.monotonic()
            rill3.stop(broker)
            t1 = time.monotonic()
            time.sleep(2.0)
            pause = load.pause_after(t0 - 0.5, t1 + 1.0)
            pauses.append(pause)
            print(f"controlled shutdown of broker {broker} (leader of {led}): stop took {t1 - t0:.2f} s, "
                  f"producer paused {pause:.3f} s")  # fmt: skip
            assert all(rill3.leader("fo-controlled", p) not in (broker, -1) for p in range(PARTITIONS))
            rill3.start(broker)
        _wait_full_isr(rill3, ["fo-controlled"])
        time.sleep(1.0)
    finally:
        load.stop()
        time.sleep(1.0)
        tail.stop()
    record_property("controlled_shutdown_pause_s", max(pauses))
    tail.check()
    assert load.errors == []
    assert load.acked_count() > 1000
    _check_read_back(rill3, load)
    # The goal is 1 s. Now and then librdkafka itself holds a partition for up to its next leader query (1 s)
    # or its reconnect backoff after dropping a stopped broker from its metadata, so one pause of the three may
    # take longer; none may take 3 s.
    assert sorted(pauses)[1] < 1.0, f"producer paused {pauses} s after controlled shutdowns"
    assert max(pauses) < 3.0, f"producer paused {max(pauses):.2f} s after a controlled shutdown"


@pytest.mark.timeout(120)
def test_sigkill_of_a_leader_under_load(rill3: TestCluster, record_property) -> None:  # type: ignore[no-untyped-def]
    create_topic(rill3, "fo-kill", partitions=PARTITIONS)
    _wait_full_isr(rill3, ["fo-kill"])
    load = LoadProducer(rill3.bootstrap_servers, "fo-kill").start()
    tail = TailConsumer(rill3.bootstrap_servers, "fo-kill").start()
    try:
        time.sleep(1.0)
        victim = rill3.leader("fo-kill", 0)
        t0 = time.monotonic()
        rill3.kill(victim)
        rill3.wait_for(lambda: rill3.leader("fo-kill", 0) not in (victim, -1), 20, "a new leader")
        elected = time.monotonic() - t0
        time.sleep(3.0)
        pause = load.pause_after(t0 - 0.5, t0 + 0.5)
        print(f"SIGKILL of broker {victim}: new leader after {elected:.2f} s, producer paused {pause:.3f} s")
        rill3.start(victim)
        _wait_full_isr(rill3, ["fo-kill"])
        time.sleep(1.0)
    finally:
        load.stop()
        time.sleep(1.0)
        tail.stop()
    record_property("sigkill_pause_s", pause)
    tail.check()
    assert load.errors == []
    _check_read_back(rill3, load)
    assert pause < SESSION_TIMEOUT_S + 1.0, f"producer paused {pause:.2f} s after a SIGKILL"


@pytest.mark.timeout(60)
def test_not_leader_answer_names_the_new_leader(rill3: TestCluster) -> None:
    """KIP-951: a Produce refused with NOT_LEADER_OR_FOLLOWER carries the partition's current leader and its
    endpoint, so a producer moves to it at once instead of waiting for a metadata refresh that may still show
    the old leader (a client's next refresh can be a second away)."""
    import asyncio

    from rill.cluster.channel import NetworkClientConfig
    from rill.cluster.network_client import NetworkClient
    from rill.network.event_loop import run
    from rill.protocol import ApiKey
    from rill.records.builder import build_batch
    from rill.records.record import Record

    create_topic(rill3, "fo-hint", partitions=1)
    rill3.wait_for(lambda: len(rill3.isr("fo-hint", 0)) == 3, 30, "the full ISR")
    old = rill3.leader("fo-hint", 0)
    rill3.stop(old)  # leadership moves; started again, the old leader is a follower
    rill3.start(old)
    rill3.wait_for(lambda: len(rill3.isr("fo-hint", 0)) == 3, 30, "the full ISR")
    leader = rill3.leader("fo-hint", 0)
    assert leader != old

    async def main() -> dict[str, object]:
        b = rill3.broker(old)
        client = NetworkClient(NetworkClientConfig(), {old: (b.host, b.port)})
        try:
            batch = build_batch([Record(0, 1_700_000_000_000, None, b"x")])
            body = {"acks": -1, "timeout_ms": 5000, "topic_data": [
                {"name": "fo-hint", "partition_data": [{"index": 0, "records": batch}]}]}  # fmt: skip
            response = await asyncio.wait_for(client.request(old, ApiKey.PRODUCE, body, max_version=10), 20)
            assert response is not None and response.api_version == 10
            return response.body
        finally:
            await client.close()

    body = run(main())
    part = body["responses"][0]["partition_responses"][0]  # type: ignore[index]
    assert part["error_code"] == 6  # NOT_LEADER_OR_FOLLOWER
    assert part["current_leader"] == {"leader_id": leader, "leader_epoch": part["current_leader"]["leader_epoch"]}
    assert part["current_leader"]["leader_epoch"] >= 1
    endpoints = {e["node_id"]: (e["host"], e["port"]) for e in body["node_endpoints"]}  # type: ignore[union-attr]
    assert endpoints == {leader: (rill3.broker(leader).host, rill3.broker(leader).port)}
