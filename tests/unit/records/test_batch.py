"""Record batch v2 header: round trip, patchers, framing and corruption."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rill.errors import ErrorCode, KafkaError
from rill.records import batch as b


def raw_batch(
    body: bytes = b"payload",
    *,
    base_offset: int = 0,
    epoch: int = -1,
    attributes: int = 0,
    last_offset_delta: int = 0,
    base_ts: int = 1000,
    max_ts: int = 1005,
    pid: int = -1,
    pepoch: int = -1,
    seq: int = -1,
    count: int = 1,
    magic: int = 2,
) -> bytes:
    """A batch whose records section is opaque bytes (the header code never looks inside)."""
    length = b.BATCH_HEADER_SIZE - b.LOG_OVERHEAD + len(body)
    head = bytearray(
        struct.pack(
            ">qiibIhiqqqhii",
            base_offset,
            length,
            epoch,
            magic,
            0,
            attributes,
            last_offset_delta,
            base_ts,
            max_ts,
            pid,
            pepoch,
            seq,
            count,
        )
    )
    crc = crc32c.crc32c(bytes(head[21:]) + body)
    struct.pack_into(">I", head, 17, crc)
    return bytes(head) + body


def test_parse_header_round_trip() -> None:
    data = raw_batch(
        b"x" * 30,
        base_offset=42,
        epoch=7,
        attributes=0x1B,
        last_offset_delta=4,
        pid=99,
        pepoch=3,
        seq=10,
        count=5,
    )
    h = b.parse_header(data)
    assert (h.base_offset, h.partition_leader_epoch, h.magic, h.records_count) == (42, 7, 2, 5)
    assert h.size == len(data) == h.batch_length + 12
    assert h.compression == 3 and h.timestamp_type == b.TIMESTAMP_LOG_APPEND_TIME and h.is_transactional
    assert not h.is_control
    assert (h.last_offset, h.next_offset) == (46, 47)
    assert h.has_producer_id and h.last_sequence == 14
    assert b.crc_ok(data, 0, h)


def test_sequence_wraps() -> None:
    h = b.parse_header(raw_batch(seq=2**31 - 2, last_offset_delta=3, count=4))
    assert h.last_sequence == 1
    assert b.increment_sequence(5, 3) == 8


def test_patchers_keep_crc_and_rewrite_it_for_log_append_time() -> None:
    data = bytearray(raw_batch(b"abc" * 10, base_ts=5, max_ts=9) * 2)
    size = b.parse_header(data).size
    b.set_base_offset(data, size, 1234)
    b.set_partition_leader_epoch(data, size, 17)
    h = b.parse_header(data, size)
    assert (h.base_offset, h.partition_leader_epoch) == (1234, 17)
    assert b.crc_ok(data, size, h)  # both fields lie outside the CRC
    b.set_log_append_time(data, size, 777)
    h = b.parse_header(data, size)
    assert h.timestamp_type == b.TIMESTAMP_LOG_APPEND_TIME and h.max_timestamp == 777
    assert b.crc_ok(data, size, h)
    assert b.crc_ok(data, 0, b.parse_header(data, 0))  # the neighbour is untouched


def test_split_log_append_time_matches_whole_buffer_version() -> None:
    whole = bytearray(raw_batch(b"q" * 100))
    head = bytearray(whole[: b.BATCH_HEADER_SIZE])
    body = memoryview(bytes(whole[b.BATCH_HEADER_SIZE :]))
    b.set_log_append_time(whole, 0, 4242)
    b.set_log_append_time_split(head, body, 4242)
    assert bytes(head) + bytes(body) == bytes(whole)


def test_iter_batches_positions() -> None:
    one, two = raw_batch(b"a"), raw_batch(b"bbbb", base_offset=1)
    got = list(b.iter_batches(memoryview(one + two)))
    assert [p for p, _ in got] == [0, len(one)]
    assert [h.base_offset for _, h in got] == [0, 1]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d[:-1],  # torn: claims more bytes than present
        lambda d: d[:30],  # header truncated
        lambda d: d[:8] + struct.pack(">i", 3) + d[12:],  # length below the header size
    ],
)
def test_iter_batches_rejects_bad_framing(mutate: object) -> None:
    data = raw_batch(b"z" * 20)
    assert callable(mutate)
    with pytest.raises(b.CorruptRecordError) as e:
        list(b.iter_batches(mutate(data)))
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


def test_iter_batches_rejects_other_magic() -> None:
    with pytest.raises(KafkaError) as e:
        list(b.iter_batches(raw_batch(magic=1)))
    assert e.value.code == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_crc_detects_flipped_bit() -> None:
    data = bytearray(raw_batch(b"hello world"))
    data[-3] ^= 0x10
    assert not b.crc_ok(data, 0, b.parse_header(data))


@given(
    base_offset=st.integers(0, 2**62),
    epoch=st.integers(-1, 2**31 - 1),
    attributes=st.integers(0, 0x3F),
    lod=st.integers(0, 10_000),
    ts=st.integers(-1, 2**50),
    pid=st.integers(-1, 2**62),
    pepoch=st.integers(-1, 2**15 - 1),
    seq=st.integers(-1, 2**31 - 1),
    body=st.binary(max_size=200),
)
def test_header_round_trip_property(
    base_offset: int,
    epoch: int,
    attributes: int,
    lod: int,
    ts: int,
    pid: int,
    pepoch: int,
    seq: int,
    body: bytes,
) -> None:
    data = raw_batch(
        body,
        base_offset=base_offset,
        epoch=epoch,
        attributes=attributes,
        last_offset_delta=lod,
        base_ts=ts,
        max_ts=ts,
        pid=pid,
        pepoch=pepoch,
        seq=seq,
        count=lod + 1,
    )
    h = b.parse_header(data)
    assert (h.base_offset, h.partition_leader_epoch, h.attributes, h.last_offset_delta) == (
        base_offset,
        epoch,
        attributes,
        lod,
    )
    assert (h.max_timestamp, h.producer_id, h.producer_epoch, h.base_sequence) == (ts, pid, pepoch, seq)
    assert b.crc_ok(data, 0, h)
    patched = bytearray(data)
    b.set_base_offset(patched, 0, 5)
    assert b.parse_header(patched).base_offset == 5 and b.crc_ok(patched, 0, b.parse_header(patched))
