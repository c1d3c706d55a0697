"""The ``__transaction_state`` record layouts (Kafka's TransactionLogKey v0, TransactionLogValue v0 and v1)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rill.common import TopicPartition
from rill.coordinator.transaction.transaction_log import (
    CorruptRecord,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from rill.coordinator.transaction.transaction_metadata import TransactionState, TxnTransitMetadata


def _transit(**kw: object) -> TxnTransitMetadata:
    base: dict[str, object] = dict(
        producer_id=1234, previous_producer_id=-1, producer_epoch=5, last_producer_epoch=-1, txn_timeout_ms=60000,
        state=TransactionState.ONGOING, partitions=frozenset({TopicPartition("b", 1), TopicPartition("a", 0),
        TopicPartition("b", 0)}), txn_start_ms=1700000000000, txn_last_update_ms=1700000000500,
    )  # fmt: skip
    base.update(kw)
    return TxnTransitMetadata(**base)  # type: ignore[arg-type]


def test_key_layout() -> None:
    assert encode_key("tx-é") == b"\x00\x00\x00\x05tx-\xc3\xa9"
    assert decode_key(encode_key("tx-é")) == "tx-é"
    assert decode_key(b"\x00\x01\x00\x01x") is None  # a key version this broker does not know


def test_value_v0_layout_byte_for_byte() -> None:
    want = (
        struct.pack(">hqhib", 0, 1234, 5, 60000, 1)
        + struct.pack(">i", 2)
        + struct.pack(">h", 1) + b"a" + struct.pack(">ii", 1, 0)
        + struct.pack(">h", 1) + b"b" + struct.pack(">iii", 2, 0, 1)
        + struct.pack(">qq", 1700000000500, 1700000000000)
    )  # fmt: skip
    assert encode_value(_transit()) == want
    back = decode_value(want)
    assert back == _transit()


def test_value_v1_flexible_with_tagged_fields() -> None:
    # version 1: compact string and arrays, a tag buffer per partition entry, then tags 0 (previous producer id)
    # and 2 (client transaction version) at the end
    body = (
        struct.pack(">hqhib", 1, 99, 0, 1000, 4)
        + bytes([2])  # one topic (length + 1)
        + bytes([2]) + b"t" + bytes([2]) + struct.pack(">i", 3) + bytes([0])
        + struct.pack(">qq", 20, 10)
        + bytes([2]) + bytes([0, 8]) + struct.pack(">q", 42) + bytes([2, 2]) + struct.pack(">h", 2)
    )  # fmt: skip
    v = decode_value(body)
    assert (v.producer_id, v.producer_epoch, v.txn_timeout_ms) == (99, 0, 1000)
    assert v.state == TransactionState.COMPLETE_COMMIT
    assert v.partitions == {TopicPartition("t", 3)}
    assert (v.txn_last_update_ms, v.txn_start_ms, v.previous_producer_id) == (20, 10, 42)


def test_garbage_is_refused_as_corrupt() -> None:
    with pytest.raises(CorruptRecord):
        decode_value(b"\x00\x00\x01")
    with pytest.raises(CorruptRecord):
        decode_value(struct.pack(">hqhib", 0, 1, 0, 1, 9) + b"\x00" * 20)  # state 9 does not exist
    with pytest.raises(CorruptRecord):
        decode_value(struct.pack(">h", 7) + b"\x00" * 30)


@given(
    st.integers(0, 2**63 - 1),
    st.integers(0, 32767),
    st.integers(1, 2**31 - 1),
    st.sampled_from(list(TransactionState)),
    st.frozensets(st.builds(TopicPartition, st.text(min_size=1, max_size=20), st.integers(0, 10000)), max_size=20),
    st.integers(-1, 2**62),
    st.integers(-1, 2**62),
)
def test_values_round_trip(
    pid: int, epoch: int, timeout: int, state: TransactionState, parts: frozenset[TopicPartition], start: int, last: int
) -> None:
    t = _transit(producer_id=pid, producer_epoch=epoch, txn_timeout_ms=timeout, state=state, partitions=parts,
                 txn_start_ms=start, txn_last_update_ms=last)  # fmt: skip
    assert decode_value(encode_value(t)) == t
