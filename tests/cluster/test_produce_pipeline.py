"""A producer's pipelined acks=all requests on a real cluster: while one waits for the followers, the leader
appends the next Produce of the same connection and answers both in order, once each is committed; any other
request on that connection (here ListOffsets) is handled only after the answers before it, so it sees what they
committed. The followers' fetches go through the test's proxies (``interceptors=True``): held, they keep the
first Produce from committing."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from tests.cluster._raw import connect, create_assigned, list_latest, wait_isr

from rill.protocol import ApiKey, decode_response, encode_request
from rill.records.builder import build_batch
from rill.records.record import Record
from rill.testing.cluster import TestCluster, cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def c() -> Iterator[TestCluster]:
    with cluster(3, interceptors=True, replica_lag_time_max_ms=30000) as running:
        yield running


def _produce_body(topic: str, first: int, n: int) -> dict[str, Any]:
    now = int(time.time() * 1000)
    batch = build_batch([Record(0, now, None, f"v{first + i}".encode()) for i in range(n)])
    return {"transactional_id": None, "acks": -1, "timeout_ms": 60000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}  # fmt: skip


class _Pipeline:
    """A raw client connection that writes several requests before reading any answer."""

    def __init__(self, c: TestCluster, broker: int) -> None:
        host, _, port = c.broker(broker).bootstrap_servers.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.sent: list[tuple[int, int, int]] = []  # (api key, version, correlation id)

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> None:
        corr = len(self.sent) + 1
        self.sock.sendall(encode_request(api_key, version, corr, "pipeline-test", body))
        self.sent.append((api_key, version, corr))

    def answers(self) -> list[dict[str, Any]]:
        out = []
        for api_key, version, corr in self.sent:
            size = struct.unpack(">i", self._read(4))[0]
            got, body = decode_response(api_key, version, self._read(size))
            assert got == corr  # in request order
            out.append(body)
        self.sent.clear()
        return out

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def _partition(answer: dict[str, Any]) -> tuple[int, int]:
    p = answer["responses"][0]["partition_responses"][0]
    return int(p["error_code"]), int(p["base_offset"])


def test_a_pipelined_produce_is_appended_while_the_one_before_waits_for_the_followers(c: TestCluster) -> None:
    create_assigned(c, "pipelined", [0, 1, 2], **{"min.insync.replicas": "2"})
    wait_isr(c, "pipelined", {0, 1, 2})
    # Every fetch the followers send the leader from now on waits in the proxy: the fetch each has parked at the
    # leader brings them the first records, and the next, which would tell the leader they have them, is held.
    held = [c.interceptor(0).hold(ApiKey.FETCH, source=f, times=None) for f in (1, 2)]
    pipe = _Pipeline(c, 0)
    try:
        pipe.send(ApiKey.PRODUCE, 8, _produce_body("pipelined", 0, 3))
        pipe.send(ApiKey.PRODUCE, 8, _produce_body("pipelined", 3, 4))
        with connect(c, 0) as conn:  # the leader's log end (as a follower asks it), not the high watermark
            c.wait_for(lambda: list_latest(conn, "pipelined", replica_id=1) == (0, 7), 30,
                       "the second Produce appended while the first waits")  # fmt: skip
            assert list_latest(conn, "pipelined") == (0, 0)  # nothing committed yet
        for rule in held:
            rule.release()
        assert [_partition(a) for a in pipe.answers()] == [(0, 0), (0, 3)]
    finally:
        pipe.close()
        for rule in held:
            rule.release()


def test_a_request_other_than_produce_waits_for_the_answers_before_it(c: TestCluster) -> None:
    create_assigned(c, "ordered", [0, 1, 2], **{"min.insync.replicas": "2"})
    wait_isr(c, "ordered", {0, 1, 2})
    held = [c.interceptor(0).hold(ApiKey.FETCH, source=f, times=None) for f in (1, 2)]
    pipe = _Pipeline(c, 0)
    try:
        pipe.send(ApiKey.PRODUCE, 8, _produce_body("ordered", 0, 5))
        pipe.send(ApiKey.LIST_OFFSETS, 4, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "ordered", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}
        ]})  # fmt: skip
        with connect(c, 0) as conn:
            c.wait_for(lambda: list_latest(conn, "ordered", replica_id=1) == (0, 5), 30, "the Produce appended")
        time.sleep(0.3)  # the ListOffsets has arrived; it must not be answered from before the commit
        for rule in held:
            rule.release()
        produced, listed = pipe.answers()
        assert _partition(produced) == (0, 0)
        assert listed["topics"][0]["partitions"][0]["offset"] == 5  # the high watermark after the commit
    finally:
        pipe.close()
        for rule in held:
            rule.release()


@pytest.mark.parametrize("idempotent", [False, True])
def test_acks_all_producers_lose_nothing_and_keep_order_through_the_pipeline(c: TestCluster, idempotent: bool) -> None:
    topic = f"pipeline-order-{int(idempotent)}"
    create_assigned(c, topic, [1, 2, 0], **{"min.insync.replicas": "2"})
    wait_isr(c, topic, {0, 1, 2})
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all", "linger.ms": 1,
                         "enable.idempotence": idempotent, "batch.num.messages": 50})  # fmt: skip
    failed: list[str] = []
    count = 20_000
    for i in range(count):
        producer.produce(topic, str(i).encode(), partition=0,
                         on_delivery=lambda err, _m: failed.append(str(err)) if err else None)  # fmt: skip
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert failed == []
    consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": f"g-{topic}",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([KafkaTopicPartition(topic, 0, 0)])
    values: list[int] = []
    deadline = time.monotonic() + 60
    while len(values) < count and time.monotonic() < deadline:
        for m in consumer.consume(1000, 1.0):
            if m.error() is None:
                values.append(int(m.value()))
    consumer.close()
    assert values == list(range(count))
