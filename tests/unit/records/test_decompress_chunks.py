"""Decompression in bounded pieces: the same bytes as a whole decompression, never a piece above the
chunk size, and a clear error for truncated or lying input."""

from __future__ import annotations

import os
import struct

import cramjam
import pytest
import zstandard

from rill.errors import ErrorCode, KafkaError
from rill.records import compression
from rill.records.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress, decompress, decompress_chunks

pytestmark = pytest.mark.timeout(60)

CODECS = [GZIP, SNAPPY, LZ4, ZSTD]
DATA = (os.urandom(3000) + b"a" * 5000) * 60  # 480 KB, partly compressible


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: compression.CODEC_NAMES[c])
def test_pieces_join_to_the_whole(codec: int) -> None:
    packed = compress(codec, DATA)
    pieces = [bytes(p) for p in decompress_chunks(codec, packed, 64 * 1024, 1 << 20)]
    assert b"".join(pieces) == decompress(codec, packed) == DATA
    limit = 64 * 1024 if codec != SNAPPY else 32 * 1024  # snappy: one piece per 32 KiB xerial block
    assert len(pieces) > 1 and max(map(len, pieces)) <= limit


def test_several_gzip_members_and_zstd_frames_are_read_across() -> None:
    two = compress(GZIP, b"first ") + compress(GZIP, b"second")
    assert b"".join(decompress_chunks(GZIP, two, 4, 1 << 20)) == b"first second"
    frames = compress(ZSTD, b"one ") + compress(ZSTD, b"two")
    assert b"".join(bytes(p) for p in decompress_chunks(ZSTD, frames, 4, 1 << 20)) == b"one two"


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: compression.CODEC_NAMES[c])
def test_empty_content_decompresses_to_nothing(codec: int) -> None:
    packed = compress(codec, b"")
    assert decompress(codec, packed) == b""
    assert b"".join(bytes(p) for p in decompress_chunks(codec, packed, 1024, 1 << 20)) == b""


def test_uncompressed_data_is_one_piece() -> None:
    assert list(decompress_chunks(NONE, b"abc", 1, 1)) == [b"abc"]


@pytest.mark.parametrize("codec", [GZIP, LZ4], ids=["gzip", "lz4"])
def test_a_truncated_stream_is_corrupt(codec: int) -> None:
    packed = compress(codec, DATA)
    with pytest.raises(KafkaError) as e:
        for _ in decompress_chunks(codec, packed[: len(packed) // 2], 64 * 1024, 1 << 20):
            pass
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


def test_a_truncated_zstd_stream_yields_less() -> None:
    # zstd's stream reader stops at the end of its input: the record count catches the shortfall.
    packed = compress(ZSTD, DATA)
    got = b"".join(bytes(p) for p in decompress_chunks(ZSTD, packed[: len(packed) // 2], 64 * 1024, 1 << 20))
    assert len(got) < len(DATA) and DATA.startswith(got)


def test_garbage_is_corrupt_for_every_codec() -> None:
    for codec in CODECS:
        with pytest.raises(KafkaError) as e:
            list(decompress_chunks(codec, b"\x00\x01\x02\x03 not compressed at all", 1024, 1 << 20))
        assert e.value.code == ErrorCode.CORRUPT_MESSAGE, codec


def test_a_snappy_block_declaring_more_than_the_limit_is_refused_before_allocating() -> None:
    raw = bytes(cramjam.snappy.compress_raw(b"x" * 100_000))
    assert b"".join(bytes(p) for p in decompress_chunks(SNAPPY, raw, 1024, 100_000)) == b"x" * 100_000
    with pytest.raises(KafkaError) as e:
        list(decompress_chunks(SNAPPY, raw, 1024, 99_999))
    assert "declares 100000 bytes" in e.value.message
    lying = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) + b"\x00" * 8  # a raw block claiming 4 GiB
    xerial = compression.XERIAL_MAGIC + struct.pack(">iii", 1, 1, len(lying)) + lying
    with pytest.raises(KafkaError):
        list(decompress_chunks(SNAPPY, xerial, 1024, 1 << 26))


def test_a_bomb_is_read_one_piece_at_a_time() -> None:
    # 256 MiB of zeros in a few hundred KB of zstd: pieces come out one chunk at a time, so the
    # caller can stop early without ever holding the whole.
    packed = zstandard.ZstdCompressor(level=3).compress(bytes(1 << 28))
    assert len(packed) < 1 << 20
    pieces = decompress_chunks(ZSTD, packed, 256 * 1024, 1 << 20)
    first = next(pieces)
    assert len(first) <= 256 * 1024
    pieces.close()
