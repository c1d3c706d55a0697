"""Confluent's framing of serialized values."""

from __future__ import annotations

import pytest

from rill.registry import wire


def test_frame_layout() -> None:
    framed = wire.encode(258, b"payload")
    assert framed == b"\x00\x00\x00\x01\x02payload"
    assert wire.decode(framed) == (258, b"payload")
    assert wire.decode(wire.encode(2**31 - 1, b"")) == (2**31 - 1, b"")


@pytest.mark.parametrize("data", [b"", b"\x00\x00\x00\x01", b"\x01\x00\x00\x00\x01x"])
def test_refuses_what_is_not_a_frame(data: bytes) -> None:
    with pytest.raises(wire.WireFormatError):
        wire.decode(data)


@pytest.mark.parametrize("schema_id", [-1, 2**31])
def test_refuses_ids_out_of_range(schema_id: int) -> None:
    with pytest.raises(wire.WireFormatError):
        wire.encode(schema_id, b"")
