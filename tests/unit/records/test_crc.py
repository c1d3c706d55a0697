"""The CRC32C every record batch is checked and stamped with (crc32c-rs) agrees with an independent
implementation (the crc32c package) at every length, alignment and starting value: the vector paths
fold large blocks and take separate branches for short and unaligned tails."""

from __future__ import annotations

import os

import crc32c as reference
from crc32c_rs import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from rill.records.batch import ATTRIBUTES_POS, compute_crc, parse_header
from rill.records.builder import build_batch
from rill.records.record import Record


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=5000), skip=st.integers(0, 63), start=st.integers(0, 2**32 - 1))
def test_matches_the_reference_at_any_alignment_and_start(data: bytes, skip: int, start: int) -> None:
    buf = memoryview(bytearray(os.urandom(skip)) + bytearray(data))[skip:]
    assert crc32c(buf) == reference.crc32c(data)
    assert crc32c(buf, start) == reference.crc32c(data, start)


def test_large_buffers_and_known_values() -> None:
    assert crc32c(b"") == 0
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    for size in (1 << 14, (1 << 20) + 3, 5 * (1 << 20) + 17):
        data = os.urandom(size)
        assert crc32c(memoryview(data)[1:]) == reference.crc32c(data[1:])
        half = size // 2
        assert crc32c(data[half:], crc32c(data[:half])) == reference.crc32c(data)


def test_a_built_batch_carries_the_reference_crc() -> None:
    batch = build_batch([Record(i, 1_700_000_000_000 + i, b"k", os.urandom(300)) for i in range(20)])
    header = parse_header(batch)
    assert header.crc == reference.crc32c(batch[ATTRIBUTES_POS:])
    assert compute_crc(batch, 0, header) == header.crc
