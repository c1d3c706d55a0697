"""The inter-broker connection's frame reader: however the transport splits the bytes, every frame arrives whole
and in order, and a refused header stops the reading of its frame."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from rill.cluster.frame_protocol import FrameProtocol


def _feed(protocol: FrameProtocol, data: bytes, cuts: list[int]) -> None:
    """Hand ``data`` to the protocol as a transport would, in reads of at most the sizes in ``cuts``."""
    pos, i = 0, 0
    while pos < len(data):
        buf = protocol.get_buffer(-1)
        want = cuts[i % len(cuts)] if cuts else len(data)
        n = min(len(buf), want, len(data) - pos)
        buf[:n] = data[pos : pos + n]
        protocol.buffer_updated(n)
        pos += n
        i += 1


@given(st.lists(st.binary(max_size=300), max_size=6), st.lists(st.integers(1, 97), max_size=8))
def test_frames_arrive_whole_whatever_the_reads(bodies: list[bytes], cuts: list[int]) -> None:
    got: list[tuple[int, bytes]] = []
    protocol = FrameProtocol(lambda size, corr: size - 4, lambda corr, frame: got.append((corr, bytes(frame))),
                             lambda exc: None)  # fmt: skip
    data = b"".join(struct.pack(">ii", len(b) + 4, i) + b for i, b in enumerate(bodies))
    _feed(protocol, data, cuts)
    assert got == list(enumerate(bodies))


def test_a_refused_frame_is_not_read() -> None:
    headers: list[tuple[int, int]] = []
    frames: list[bytes] = []
    protocol = FrameProtocol(lambda size, corr: (headers.append((size, corr)), -1)[1],
                             lambda corr, frame: frames.append(bytes(frame)), lambda exc: None)  # fmt: skip
    protocol.buffer_updated(0)
    buf = protocol.get_buffer(-1)
    assert len(buf) == 8  # only the size and correlation id are taken before the frame is accepted
    buf[:8] = struct.pack(">ii", 1 << 30, 5)
    protocol.buffer_updated(8)
    assert headers == [(1 << 30, 5)] and frames == []
