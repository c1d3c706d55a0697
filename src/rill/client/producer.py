"""A blocking idempotent producer on ``KafkaClient``.

Records are buffered per partition and sent as one v2 batch per partition per ``flush()`` (or when a buffer
reaches ``batch_size`` bytes). The producer takes a producer id and epoch from InitProducerId and numbers
each partition's batches with consecutive sequence numbers, so a batch resent after a lost response is
recognised by the broker as a duplicate and appended once. Only one batch per partition is in flight.

Partitioning follows Kafka's default partitioner: murmur2 of the key modulo the partition count for keyed
records, and a partition that changes per batch (round robin) for records without a key.

As Kafka's producers do (``allow.auto.create.topics=true``), the producer's Metadata requests let the broker
create a topic that does not exist yet, which it does when its ``auto.create.topics.enable`` is true.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from rill.client.client import KafkaClient
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.records.builder import build_batch
from rill.records.record import Record

_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash (seed 0x9747b28c) as a signed 32-bit int, as its Java partitioner computes it."""
    m = 0x5BD1E995
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK32
    for i in range(0, length - length % 4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & _MASK32
        k ^= k >> 24
        k = (k * m) & _MASK32
        h = (h * m) & _MASK32
        h ^= k
    tail = length & ~3
    extra = length % 4
    if extra == 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * m) & _MASK32
    h ^= h >> 13
    h = (h * m) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def default_partition(key: bytes, num_partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


@dataclass(slots=True)
class _Buffer:
    records: list[Record] = field(default_factory=list)
    size: int = 0


@dataclass(frozen=True, slots=True)
class SendResult:
    records: int
    batches: int


class IdempotentProducer:
    """``send()`` records, then ``flush()``; ``close()`` flushes. Raises ``KafkaError`` on a fatal error."""

    transactional_id: str | None = None  # set by the transactional subclass

    def __init__(
        self,
        client: KafkaClient,
        *,
        compression: int = 0,
        batch_size: int = 1 << 20,
        acks: int = -1,
        idempotent: bool = True,
        allow_auto_create_topics: bool = True,
    ) -> None:
        self.client = client
        self.allow_auto_create_topics = allow_auto_create_topics
        self.compression = compression
        self.batch_size = batch_size
        self.acks = -1 if idempotent else acks
        self.producer_id, self.producer_epoch = self._init_producer_id() if idempotent else (-1, -1)
        self._sequences: dict[TopicPartition, int] = {}
        self._buffers: dict[TopicPartition, _Buffer] = {}
        self._partition_counts: dict[str, int] = {}
        self._round_robin = itertools.count()
        self.records_sent = 0
        self.batches_sent = 0

    def _init_producer_id(self) -> tuple[int, int]:
        return self.client.init_producer_id()

    def _before_send(self, tps: list[TopicPartition]) -> None:
        """Runs before buffered batches for ``tps`` are sent (the transactional producer adds them to its
        transaction)."""

    def partition_count(self, topic: str) -> int:
        n = self._partition_counts.get(topic)
        if n is None:
            n = len(self.client.topic(topic, allow_auto_create=self.allow_auto_create_topics).partitions)
            self._partition_counts[topic] = n
        return n

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        n = self.partition_count(topic)
        if partition is None or partition < 0:
            partition = default_partition(key, n) if key is not None else next(self._round_robin) % n
        elif partition >= n:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has no partition {partition}")
        tp = TopicPartition(topic, partition)
        buf = self._buffers.get(tp)
        if buf is None:
            buf = self._buffers[tp] = _Buffer()
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        buf.records.append(Record(len(buf.records), ts, key, value, headers or []))
        buf.size += 24 + (len(key) if key else 0) + (len(value) if value else 0)
        if buf.size >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        """Send every buffered record; returns when all are acknowledged."""
        if not self._buffers:
            return
        self._before_send(list(self._buffers))
        pending: dict[TopicPartition, tuple[bytes, int]] = {}
        for tp, buf in self._buffers.items():
            seq = self._sequences.get(tp, 0)
            batch = build_batch(
                buf.records,
                compression=self.compression,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=seq if self.producer_id >= 0 else -1,
                is_transactional=self.transactional_id is not None,
            )
            pending[tp] = (batch, len(buf.records))
        self._buffers = {}
        deadline = time.monotonic() + self.client.timeout_s
        backoff = 0.05
        while pending:
            results = self.client.produce(
                {tp: b for tp, (b, _) in pending.items()}, acks=self.acks, transactional_id=self.transactional_id
            )
            retry: dict[TopicPartition, tuple[bytes, int]] = {}
            for tp, (batch, count) in pending.items():
                err, _ = results.get(tp, (ErrorCode.NETWORK_EXCEPTION, -1))
                if err in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                    self._sequences[tp] = (self._sequences.get(tp, 0) + count) & 0x7FFFFFFF
                    self.records_sent += count
                    self.batches_sent += 1
                elif err.retriable:
                    retry[tp] = (batch, count)
                else:
                    raise KafkaError(err, f"produce to {tp} failed: {err.name}")
            pending = retry
            if pending:
                if time.monotonic() > deadline:
                    raise KafkaError(
                        ErrorCode.REQUEST_TIMED_OUT, f"produce to {sorted(map(str, pending))} timed out"
                    )
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> IdempotentProducer:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
