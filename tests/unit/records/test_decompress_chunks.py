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


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: compression.CODEC_NAMES[c])
@pytest.mark.parametrize("cut", [1, 4, 9, 100, 0.5])
def test_a_truncated_stream_is_corrupt(codec: int, cut: int | float) -> None:
    packed = compress(codec, DATA)
    torn = packed[: int(len(packed) * cut)] if isinstance(cut, float) else packed[: len(packed) - cut]
    with pytest.raises(KafkaError) as e:
        for _ in decompress_chunks(codec, torn, 64 * 1024, 1 << 20):
            pass
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError) as e:
        decompress(codec, torn)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: compression.CODEC_NAMES[c])
def test_no_data_and_trailing_bytes_are_corrupt(codec: int) -> None:
    for bad in (b"", compress(codec, DATA) + b"\x00" * 12):
        with pytest.raises(KafkaError) as e:
            list(decompress_chunks(codec, bad, 64 * 1024, 1 << 20))
        assert e.value.code == ErrorCode.CORRUPT_MESSAGE
        with pytest.raises(KafkaError) as e:
            decompress(codec, bad)
        assert e.value.code == ErrorCode.CORRUPT_MESSAGE


def test_zstd_frames_of_every_shape_are_read_whole() -> None:
    """Frames with and without content size and checksum, several blocks, RLE and raw blocks, a
    skippable frame between two: all read; each cut short is corrupt."""
    parts = [
        zstandard.ZstdCompressor(level=1, write_content_size=False, write_checksum=True).compress(DATA),
        struct.pack("<II", 0x184D2A53, 5) + b"skip!",
        zstandard.ZstdCompressor(level=19, write_content_size=True).compress(b"z" * 300_000),
        zstandard.ZstdCompressor(level=1).compress(os.urandom(200_000)),  # raw blocks
    ]
    whole = b"".join(parts)
    expected = DATA + b"z" * 300_000
    got = b"".join(bytes(p) for p in decompress_chunks(ZSTD, whole, 64 * 1024, 1 << 20))
    assert got[: len(expected)] == expected and len(got) == len(expected) + 200_000
    compression.check_zstd_frames(whole)
    for end in (len(parts[0]) - 1, len(parts[0]) + 3, len(whole) - len(parts[3]) // 2):
        with pytest.raises(ValueError):
            compression.check_zstd_frames(whole[:end])


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
