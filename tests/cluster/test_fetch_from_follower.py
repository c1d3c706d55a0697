"""Fetch from the closest replica (KIP-392): with ``replica.selector.class`` set to Kafka's rack-aware selector, a
consumer whose ``client.rack`` is a follower's rack is sent by the leader to that follower, which serves it up to
its high watermark and never beyond; without a selector the leader serves every consumer.

Brokers 0, 1 and 2 are in racks a, b and c; the topics are placed on [0, 1, 2], so broker 0 leads them. Which
broker served a consumer is read from the brokers' own metrics: bytes sent to consumers per topic
(``kafka_server_brokertopicmetrics_bytesout_total``, which leaves out replication, as Kafka's BytesOutPerSec)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.broker._wire import Wire

from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.records.batch import iter_batches
from rill.testing.cluster import TestCluster, cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

RACKS = {0: {"broker.rack": "a"}, 1: {"broker.rack": "b"}, 2: {"broker.rack": "c"}}
RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
# The leader is broker 0 (rack a); broker 1 (rack b) is the follower the consumers of rack b are sent to.
LEADER, FOLLOWER, OTHER = 0, 1, 2
FETCH_WAIT_MS = 3000  # a follower's fetch waits this long for data at the leader when nothing comes


@pytest.fixture(scope="module")
def racked() -> Iterator[TestCluster]:
    """Three brokers in racks a, b, c with the rack-aware selector. A follower's fetch waits up to 3 s for data
    (so a high watermark learnt only at the end of that wait shows), and a paused follower stays in the ISR for
    10 s, its ZooKeeper session's longest (so the test that pauses one has time to look while the high watermark
    is held back)."""
    with cluster(3, broker_overrides=RACKS, metrics=True, min_insync_replicas=2,
                 replica_selector_class=RACK_AWARE, replica_fetch_wait_max_ms=FETCH_WAIT_MS,
                 replica_lag_time_max_ms=30000, zookeeper_session_timeout_ms=10000) as c:  # fmt: skip
        yield c


def _create(c: TestCluster, name: str, replicas: list[int] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    topic = NewTopic(name, 1, replica_assignment=[replicas or [LEADER, FOLLOWER, OTHER]])
    admin.create_topics([topic])[name].result(30)
    want = sorted(replicas or [LEADER, FOLLOWER, OTHER])
    c.wait_for(lambda: c.leader(name, 0) == want[0] and sorted(c.isr(name, 0)) == want, 30, f"{name} fully in sync")


def _produce(c: TestCluster, topic: str, values: list[bytes], acks: str = "all") -> None:
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": acks, "linger.ms": 5})
    failed: list[Any] = []
    for v in values:
        producer.produce(topic, v, partition=0, on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert producer.flush(30) == 0
    assert failed == []


def _consumer(c: TestCluster, rack: str, topic: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": f"ffr-{topic}-{time.monotonic()}",
                         "client.rack": rack, "enable.auto.commit": False, "fetch.wait.max.ms": 200,
                         "fetch.error.backoff.ms": 100})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    return consumer


def _poll(consumer: Consumer, want: int, timeout: float) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error() is not None:  # a client-side notice (a broker paused, say): read on
            continue
        assert msg.offset() == len(got)
        got.append(msg.value())
    return got


def _metrics(c: TestCluster, broker: int) -> list[Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{c.metrics_port(broker)}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return [s for f in text_string_to_metric_families(text) for s in f.samples]


def _metric(c: TestCluster, broker: int, name: str, **labels: str) -> float:
    return sum(s.value for s in _metrics(c, broker) if s.name == name and labels.items() <= s.labels.items())


def _bytes_out(c: TestCluster, broker: int, topic: str) -> float:
    return _metric(c, broker, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic)


def _offsets(c: TestCluster, broker: int, topic: str) -> tuple[float, float]:
    """(log end offset, high watermark) of partition 0 on ``broker``."""
    return (_metric(c, broker, "kafka_log_log_logendoffset", topic=topic, partition="0"),
            _metric(c, broker, "kafka_log_log_highwatermark", topic=topic, partition="0"))  # fmt: skip


def _fetch(w: Wire, topic: str, offset: int, rack: str | None = "", version: int = 11, max_wait_ms: int = 0,
           isolation_level: int = 0) -> dict[str, Any]:  # fmt: skip
    body: dict[str, Any] = {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                                    "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
    }  # fmt: skip
    if rack is not None:
        body["rack_id"] = rack
    return dict(w.call(ApiKey.FETCH, version, body)["responses"][0]["partitions"][0])


def _record_count(p: dict[str, Any]) -> int:
    records = p.get("records") or b""
    return sum(h.records_count for _pos, h in iter_batches(memoryview(bytes(records))))


def test_a_consumer_in_a_followers_rack_reads_every_record_from_that_follower(racked: TestCluster) -> None:
    c = racked
    _create(c, "near")
    values = [f"near-{i:05d}".encode() * 10 for i in range(3000)]
    _produce(c, "near", values)
    consumer = _consumer(c, "b", "near")
    try:
        got = _poll(consumer, len(values), 60)
    finally:
        consumer.close()
    assert got == values
    served = {b: _bytes_out(c, b, "near") for b in c.brokers}
    payload = sum(len(v) for v in values)
    # the follower in rack b sent every record; the leader only redirected (no records), broker 2 sent nothing
    assert served[FOLLOWER] >= payload, served
    assert served[LEADER] == 0 and served[OTHER] == 0, served
    assert _metric(c, LEADER, "kafka_server_brokertopicmetrics_replicationbytesout_total") >= 2 * payload


def test_the_leader_names_the_replica_of_the_consumers_rack(racked: TestCluster) -> None:
    c = racked
    _create(c, "pick")
    _create(c, "pair", [LEADER, FOLLOWER])
    _produce(c, "pick", [b"x"] * 10)
    _produce(c, "pair", [b"y"] * 10)
    c.wait_for(lambda: _offsets(c, FOLLOWER, "pick") == (10, 10) and _offsets(c, OTHER, "pick") == (10, 10), 30,
               "the followers holding and knowing every record")  # fmt: skip
    leader = Wire(c.broker(LEADER).bootstrap_servers)
    follower = Wire(c.broker(FOLLOWER).bootstrap_servers)
    other = Wire(c.broker(OTHER).bootstrap_servers)
    try:
        for rack, preferred in (("b", FOLLOWER), ("c", OTHER)):
            p = _fetch(leader, "pick", 0, rack)
            assert (p["error_code"], p["preferred_read_replica"], _record_count(p)) == (0, preferred, 0)
            assert p["high_watermark"] == 10
        # the leader's own rack, no rack, a rack without a replica, a fetch without client metadata: the leader
        for rack, version in (("a", 11), ("", 11), ("elsewhere", 11), (None, 10)):
            p = _fetch(leader, "pick", 0, rack, version)
            assert (p["error_code"], p["preferred_read_replica"], _record_count(p)) == (0, -1, 10), (rack, version)
        # a follower serves a consumer whose fetch carries client metadata (v11+), whatever its rack
        for rack in ("b", "", "a"):
            p = _fetch(follower, "pick", 0, rack)
            assert (p["error_code"], p["preferred_read_replica"], _record_count(p)) == (0, -1, 10)
            p = _fetch(follower, "pick", 4, rack, isolation_level=1)
            assert (p["error_code"], _record_count(p) > 0, p["last_stable_offset"]) == (0, True, 10)
        assert _fetch(follower, "pick", 0, None, 10)["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert _fetch(follower, "pick", 11)["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        # broker 2 holds no replica of "pair": it does not serve it, and names the leader (KIP-951, v12+)
        p = _fetch(other, "pair", 0, "c", 12)
        assert p["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert p["current_leader"]["leader_id"] == LEADER
        # a consumer in rack c is not sent to broker 2 for "pair" either: it is not a replica there
        p = _fetch(leader, "pair", 0, "c")
        assert (p["error_code"], p["preferred_read_replica"], _record_count(p)) == (0, -1, 10)
        # ListOffsets stays with the leader
        lo = {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "pick", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}  # fmt: skip
        resp = follower.call(ApiKey.LIST_OFFSETS, 4, lo)
        assert resp["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    finally:
        for w in (leader, follower, other):
            w.close()


def test_a_follower_serves_nothing_above_its_high_watermark(racked: TestCluster) -> None:
    """Broker 2 paused (still in the ISR): records produced with acks=1 reach the leader and the follower in rack
    b, but are not committed. The consumer reading from that follower gets none of them until broker 2 is back
    and they are; fetching them from the follower answers OFFSET_NOT_AVAILABLE meanwhile."""
    c = racked
    _create(c, "held")
    committed = [f"c-{i}".encode() for i in range(200)]
    pending = [f"p-{i}".encode() for i in range(100)]
    _produce(c, "held", committed)
    consumer = _consumer(c, "b", "held")
    follower = Wire(c.broker(FOLLOWER).bootstrap_servers)
    try:
        got = _poll(consumer, len(committed), 30)
        assert got == committed
        assert _bytes_out(c, FOLLOWER, "held") > 0 and _bytes_out(c, LEADER, "held") == 0
        c.pause(OTHER)
        paused = time.monotonic()
        try:
            _produce(c, "held", pending, acks="1")
            c.wait_for(lambda: _offsets(c, FOLLOWER, "held") == (300, 200), 20,
                       "the follower holding the uncommitted records, its high watermark at 200")  # fmt: skip
            assert _offsets(c, LEADER, "held") == (300, 200)
            end = time.monotonic() + 2.0
            while time.monotonic() < end:
                msg = consumer.poll(0.3)
                assert msg is None or msg.error() is not None, f"read {msg.value()!r} above the high watermark"
            p = _fetch(follower, "held", 200, "b", max_wait_ms=200)
            assert (p["error_code"], _record_count(p), p["high_watermark"]) == (0, 0, 200)
            p = _fetch(follower, "held", 250, "b")
            assert (p["error_code"], p["high_watermark"]) == (ErrorCode.OFFSET_NOT_AVAILABLE, 200)
            assert _fetch(follower, "held", 301, "b")["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
            p = _fetch(follower, "held", 150, "b", isolation_level=1)
            assert (p["error_code"], p["last_stable_offset"]) == (0, 200)
            assert max(h.last_offset for _pos, h in iter_batches(memoryview(bytes(p["records"])))) < 200
            assert OTHER in c.isr("held", 0)  # the high watermark was held back by an in-sync replica throughout
        finally:
            c.resume(OTHER)
            print(f"broker {OTHER} paused for {time.monotonic() - paused:.1f} s")
        rest = _poll_more(consumer, len(pending), 30)
        assert rest == pending  # once committed, the rest comes, from the follower too
    finally:
        consumer.close()
        follower.close()
    assert _bytes_out(c, LEADER, "held") == 0


def _poll_more(consumer: Consumer, want: int, timeout: float) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    return got


def test_a_follower_learns_the_high_watermark_at_once(racked: TestCluster) -> None:
    """A record acknowledged with acks=all is readable from the follower right away: the leader answers a
    follower's waiting fetch when the high watermark moves, instead of at the end of its 3 s wait."""
    c = racked
    _create(c, "prompt")
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all", "linger.ms": 0})
    follower = Wire(c.broker(FOLLOWER).bootstrap_servers)
    delays: list[float] = []
    try:
        for i in range(6):
            producer.produce("prompt", f"v{i}".encode(), partition=0)
            assert producer.flush(30) == 0
            acked = time.monotonic()
            while True:
                p = _fetch(follower, "prompt", i, "b", max_wait_ms=500)
                assert p["error_code"] in (0, ErrorCode.OFFSET_NOT_AVAILABLE), p["error_code"]
                if _record_count(p):
                    break
                assert time.monotonic() - acked < 20, f"record {i} never readable from the follower"
            delays.append(time.monotonic() - acked)
            time.sleep(0.2)
    finally:
        follower.close()
    print(f"acks=all record readable from the follower after {[round(d * 1000) for d in delays]} ms")
    assert max(delays) < FETCH_WAIT_MS / 2000, delays


def test_without_a_selector_the_leader_serves_every_consumer() -> None:
    with cluster(3, broker_overrides=RACKS, metrics=True) as c:
        _create(c, "far")
        values = [f"far-{i}".encode() * 10 for i in range(1000)]
        _produce(c, "far", values)
        consumer = _consumer(c, "b", "far")
        try:
            assert _poll(consumer, len(values), 60) == values
        finally:
            consumer.close()
        served = {b: _bytes_out(c, b, "far") for b in c.brokers}
        assert served[LEADER] >= sum(len(v) for v in values), served
        assert served[FOLLOWER] == 0 and served[OTHER] == 0, served
        leader = Wire(c.broker(LEADER).bootstrap_servers)
        try:
            p = _fetch(leader, "far", 0, "b")
            assert (p["error_code"], p["preferred_read_replica"], _record_count(p) > 0) == (0, -1, True)
        finally:
            leader.close()
