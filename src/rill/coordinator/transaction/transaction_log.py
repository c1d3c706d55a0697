"""The records of ``__transaction_state``, in Kafka's layouts (TransactionLogKey / TransactionLogValue).

::

    key   v0   int16 version=0 | string transactionalId
    value v0   int16 version=0 | int64 producerId | int16 producerEpoch | int32 transactionTimeoutMs
               | int8 transactionStatus | nullable array of (string topic, array of int32 partition)
               | int64 transactionLastUpdateTimestampMs | int64 transactionStartTimestampMs
    value v1   the same fields, flexible (compact strings and arrays, tagged fields: 0 previousProducerId,
               1 nextProducerId, 2 clientTransactionVersion)

Strings are int16 length + UTF-8 (compact: unsigned varint length + 1), arrays int32 count (-1 null). Values
are written as v0; both versions are read. A null value (tombstone) removes an expired transactional id. A key
or value that does not parse, or holds values no coordinator writes (a negative producer id or partition, a
timeout of 0), raises ``CorruptRecord``.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Iterable

from rill.common import TopicPartition
from rill.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    TransactionState,
    TxnTransitMetadata,
)

KEY_VERSION = 0
VALUE_VERSION = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_VALUE_HEAD = struct.Struct(">hqhib")


class CorruptRecord(ValueError):
    """A ``__transaction_state`` record that does not parse."""


def _string(s: str) -> bytes:
    data = s.encode()
    return _I16.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def decode_key(key: bytes | memoryview) -> str | None:
    """The transactional id of a key, or None for a key version this broker does not know."""
    data = bytes(key)
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version != 0:
            return None
        (n,) = _I16.unpack_from(data, 2)
        if n < 0 or 4 + n > len(data):
            raise CorruptRecord("bad transactional id length")
        return data[4 : 4 + n].decode()
    except (struct.error, UnicodeDecodeError) as e:
        raise CorruptRecord(str(e)) from e


def _grouped(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    return [(topic, sorted(parts)) for topic, parts in sorted(by_topic.items())]


def encode_value(transit: TxnTransitMetadata) -> bytes:
    """A v0 value. Kafka writes the partitions of transactions in Empty, CompleteCommit and CompleteAbort as
    an empty array."""
    out = bytearray(
        _VALUE_HEAD.pack(
            VALUE_VERSION, transit.producer_id, transit.producer_epoch, transit.txn_timeout_ms, transit.state.id
        )
    )
    topics = _grouped(transit.partitions)
    out += _I32.pack(len(topics))
    for topic, parts in topics:
        out += _string(topic)
        out += _I32.pack(len(parts))
        for p in parts:
            out += _I32.pack(p)
    out += _I64.pack(transit.txn_last_update_ms)
    out += _I64.pack(transit.txn_start_ms)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes, flexible: bool) -> None:
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def take(self, st: struct.Struct) -> int:
        (v,) = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return int(v)

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data):
                raise CorruptRecord("truncated varint")
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise CorruptRecord("varint too long")

    def length(self) -> int:
        """An array length (-1 for null)."""
        return self.uvarint() - 1 if self.flexible else self.take(_I32)

    def string(self) -> str:
        n = self.uvarint() - 1 if self.flexible else self.take(_I16)
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecord("bad string length")
        s = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def tags(self) -> dict[int, bytes]:
        out: dict[int, bytes] = {}
        if not self.flexible:
            return out
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            out[tag] = self.data[self.pos : self.pos + size]
            self.pos += size
        return out


def decode_value(value: bytes | memoryview) -> TxnTransitMetadata:
    """A v0 or v1 value as the state it records."""
    data = bytes(value)
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version not in (0, 1):
            raise CorruptRecord(f"unknown TransactionLogValue version {version}")
        r = _Reader(data, flexible=version >= 1)
        r.pos = 2
        producer_id = r.take(_I64)
        epoch = r.take(_I16)
        timeout = r.take(_I32)
        state = TransactionState.from_id(r.take(struct.Struct(">b")))
        partitions: set[TopicPartition] = set()
        for _ in range(max(r.length(), 0)):
            topic = r.string()
            for _ in range(max(r.length(), 0)):
                partitions.add(TopicPartition(topic, r.take(_I32)))
            r.tags()
        last_update = r.take(_I64)
        start = r.take(_I64)
        tags = r.tags()
    except (struct.error, UnicodeDecodeError, ValueError) as e:
        raise CorruptRecord(str(e)) from e
    # Values no coordinator writes; the state they would load could send markers for producer id -1, say.
    if producer_id < 0 or epoch < NO_PRODUCER_EPOCH or timeout <= 0:
        raise CorruptRecord(f"producer id {producer_id}, epoch {epoch}, timeout {timeout} ms")
    if any(not tp.topic or tp.partition < 0 for tp in partitions):
        raise CorruptRecord(f"partitions {sorted(partitions, key=lambda tp: (tp.topic, tp.partition))}")
    previous = _I64.unpack(tags[0])[0] if len(tags.get(0, b"")) == 8 else -1
    return TxnTransitMetadata(
        producer_id=producer_id,
        previous_producer_id=previous,
        producer_epoch=epoch,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        txn_timeout_ms=timeout,
        state=state,
        partitions=frozenset(partitions),
        txn_start_ms=start,
        txn_last_update_ms=last_update,
    )
