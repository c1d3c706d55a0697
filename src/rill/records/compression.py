"""Compression codecs of record batches, by the id in bits 0-2 of the batch attributes.

    0 none
    1 gzip    RFC 1952 gzip members (zlib); decoding also accepts zlib streams and several members
    2 snappy  Java clients write the xerial framing:
                  8 bytes magic  82 'S' 'N' 'A' 'P' 'P' 'Y' 00
                  int32 version (1), int32 minimum compatible version (1)
                  then blocks of: int32 compressed length, raw snappy block
              librdkafka and others may write one raw snappy block; both are decoded. Rill writes xerial.
    3 lz4     LZ4 frame format (magic 04 22 4D 18), independent 64 KiB blocks, no content size, as Kafka
              writes it
    4 zstd    zstd frames (content size optional; several frames are concatenated)

Every compressed payload must decompress whole: an empty one, one cut short or one with bytes after
its last frame or member is corrupt (zstd's stream reader stops quietly at the end of its input, so
the frames' block headers are walked to tell a complete stream from a truncated one).
"""

from __future__ import annotations

import struct
import sys
import zlib
from collections.abc import Callable, Iterator

import cramjam
import lz4.frame
import zstandard

from rill.errors import ErrorCode, KafkaError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}

Buffer = bytes | bytearray | memoryview

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")

ZSTD_DEFAULT_LEVEL = 3
LZ4_DEFAULT_LEVEL = 9  # Kafka's default: its fast compressor; any other level takes LZ4 HC at that level
DECOMPRESSED_LIMIT = 64 * 1024 * 1024
"""The broker decompresses at most this much of one producer batch (of one record when it scans
records, of the whole batch when it recompresses), or ``max.message.bytes`` when that is larger:
past it the batch is refused, so that a decompression bomb costs bounded memory."""
_zstd_compressors = {ZSTD_DEFAULT_LEVEL: zstandard.ZstdCompressor(level=ZSTD_DEFAULT_LEVEL)}
_zstd_decompressor = zstandard.ZstdDecompressor()


def _corrupt(codec: int, e: Exception) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, f"cannot decompress {CODEC_NAMES.get(codec, codec)}: {e}")


def _gzip_compress(data: Buffer, level: int | None = None) -> bytes:
    c = zlib.compressobj(-1 if level is None else level, zlib.DEFLATED, 31)  # -1: zlib's default, 6
    return c.compress(data) + c.flush()


def _gzip_decompress(data: Buffer) -> bytes:
    return b"".join(_gzip_chunks(data, 0))  # 0: no bound on a piece


def _snappy_compress(data: Buffer, level: int | None = None) -> bytes:  # snappy has no levels
    out = bytearray(_XERIAL_HEADER)
    view = memoryview(data)
    for i in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[i : i + _XERIAL_BLOCK]))
        out += _INT32.pack(len(block))
        out += block
    return bytes(out)


def _snappy_decompress(data: Buffer) -> bytes:
    return b"".join(_snappy_chunks(data, sys.maxsize))


def _lz4_compress(data: Buffer, level: int | None = None) -> bytes:
    return bytes(
        lz4.frame.compress(
            data,
            compression_level=0 if level is None or level == LZ4_DEFAULT_LEVEL else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    )


def _lz4_decompress(data: Buffer) -> bytes:
    return b"".join(_lz4_chunks(data, -1))  # -1: no bound on a piece


def _zstd_compress(data: Buffer, level: int | None = None) -> bytes:
    key = ZSTD_DEFAULT_LEVEL if level is None else level
    compressor = _zstd_compressors.get(key)
    if compressor is None:
        compressor = _zstd_compressors[key] = zstandard.ZstdCompressor(level=key)
    return bytes(compressor.compress(data))


def _zstd_decompress(data: Buffer) -> bytes:
    check_zstd_frames(data)
    d = _zstd_decompressor.decompressobj(read_across_frames=True)
    out = d.decompress(data)
    return bytes(out)


_COMPRESS: dict[int, Callable[[Buffer, int | None], bytes]] = {
    GZIP: _gzip_compress,
    SNAPPY: _snappy_compress,
    LZ4: _lz4_compress,
    ZSTD: _zstd_compress,
}
_DECOMPRESS: dict[int, Callable[[Buffer], bytes]] = {
    GZIP: _gzip_decompress,
    SNAPPY: _snappy_decompress,
    LZ4: _lz4_decompress,
    ZSTD: _zstd_decompress,
}


def compress(codec: int, data: Buffer, level: int | None = None) -> bytes:
    """``data`` compressed with ``codec`` at ``level`` (Kafka's ``compression.<codec>.level``;
    None: the codec's default as Kafka sets it)."""
    if codec == NONE:
        return bytes(data)
    fn = _COMPRESS.get(codec)
    if fn is None:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")
    return fn(data, level)


def _snappy_chunks(data: Buffer, limit: int) -> Iterator[Buffer]:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        _check_snappy_length(view, limit)
        yield memoryview(cramjam.snappy.decompress_raw(view))
        return
    pos = 16
    while pos < len(view):
        if pos + 4 > len(view):
            raise ValueError("truncated xerial block length")
        (n,) = _INT32.unpack_from(view, pos)
        pos += 4
        if n < 0 or pos + n > len(view):
            raise ValueError("xerial block runs past the end")
        block = view[pos : pos + n]
        _check_snappy_length(block, limit)
        yield memoryview(cramjam.snappy.decompress_raw(block))
        pos += n


def _check_snappy_length(block: memoryview, limit: int) -> None:
    """A raw snappy block starts with its decompressed length (a varint of up to 5 bytes)."""
    length = shift = 0
    for byte in block[:5]:
        length |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
    if length > limit:
        raise ValueError(f"a snappy block declares {length} bytes, more than the {limit} allowed")


def _gzip_chunks(data: Buffer, chunk: int) -> Iterator[Buffer]:
    rest: Buffer = data
    while rest:
        d = zlib.decompressobj(47)  # gzip or zlib header, auto-detected
        tail: Buffer = rest
        while not d.eof:
            out = d.decompress(tail, chunk)
            tail = d.unconsumed_tail
            if out:
                yield out
            elif not tail and not d.eof:
                raise ValueError("truncated gzip stream")
        rest = d.unused_data


def _lz4_chunks(data: Buffer, chunk: int) -> Iterator[Buffer]:
    rest: Buffer = data
    while rest:
        d = lz4.frame.LZ4FrameDecompressor()
        out = d.decompress(rest, max_length=chunk)
        while True:
            if out:
                yield out
            if d.eof:
                break
            if d.needs_input:
                raise ValueError("truncated lz4 frame")
            out = d.decompress(b"", max_length=chunk)
        rest = d.unused_data


_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE = 0x184D2A50  # to 0x184D2A5F: skippable frames, a 4-byte length and that many bytes
_U32 = struct.Struct("<I")
_BLOCK_HEADER = struct.Struct("<HB")  # 3 bytes, little-endian: last flag, type (2 bits), size (21 bits)
_DICT_ID_BYTES = (0, 1, 2, 4)


def check_zstd_frames(data: Buffer) -> None:
    """ValueError unless ``data`` is whole zstd frames (RFC 8878: magic, frame header, blocks up to
    the one flagged last, optional checksum; or skippable frames) that end exactly where it ends.
    Only the headers are read, one per block: a block holds up to 128 KiB of content."""
    view = memoryview(data).cast("B")
    end = len(view)
    pos = 0
    while pos < end:
        if end - pos < 8:
            raise ValueError(f"truncated zstd frame at byte {pos}")
        (magic,) = _U32.unpack_from(view, pos)
        if magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE:
            (size,) = _U32.unpack_from(view, pos + 4)
            pos += 8 + size
            continue
        if magic != _ZSTD_MAGIC:
            raise ValueError(f"no zstd frame at byte {pos}")
        descriptor = view[pos + 4]
        single_segment = descriptor >> 5 & 1
        content_size_bytes = (single_segment, 2, 4, 8)[descriptor >> 6]
        pos += 5 + (1 - single_segment) + _DICT_ID_BYTES[descriptor & 3] + content_size_bytes
        last = 0
        while not last:
            if end - pos < 3:
                raise ValueError(f"truncated zstd frame at byte {pos}")
            low, high = _BLOCK_HEADER.unpack_from(view, pos)
            header = low | high << 16
            last, kind, size = header & 1, header >> 1 & 3, header >> 3
            if kind == 3:
                raise ValueError(f"reserved zstd block type at byte {pos}")
            pos += 3 + (1 if kind == 1 else size)  # an RLE block holds one byte
        pos += 4 * (descriptor >> 2 & 1)  # the content checksum
    if pos != end:
        raise ValueError("truncated zstd frame")


def _zstd_chunks(data: Buffer, chunk: int) -> Iterator[Buffer]:
    check_zstd_frames(data)
    reader = _zstd_decompressor.stream_reader(data, read_across_frames=True)
    while out := reader.read(chunk):
        yield out


def decompress_chunks(codec: int, data: Buffer, chunk: int, limit: int) -> Iterator[Buffer]:
    """``decompress`` in pieces of at most ``chunk`` bytes (snappy: its blocks, none above ``limit``),
    so that a batch can be read without being held decompressed whole. Malformed input raises
    ``KafkaError(CORRUPT_MESSAGE)``, possibly after some pieces (a truncated zstd stream before any)."""
    try:
        if codec == NONE:
            yield data
        elif not data and codec in _DECOMPRESS:
            raise ValueError("no compressed data")
        elif codec == GZIP:
            yield from _gzip_chunks(data, chunk)
        elif codec == SNAPPY:
            yield from _snappy_chunks(data, limit)
        elif codec == LZ4:
            yield from _lz4_chunks(data, chunk)
        elif codec == ZSTD:
            yield from _zstd_chunks(data, chunk)
        else:
            raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")
    except KafkaError:
        raise
    except Exception as e:  # codec libraries raise assorted types on corrupt input
        raise _corrupt(codec, e) from None


def decompress(codec: int, data: Buffer) -> bytes:
    """Decompress ``data``; malformed input raises ``KafkaError(CORRUPT_MESSAGE)``."""
    if codec == NONE:
        return bytes(data)
    fn = _DECOMPRESS.get(codec)
    if fn is None:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")
    try:
        if not data:
            raise ValueError("no compressed data")
        return fn(data)
    except KafkaError:
        raise
    except Exception as e:  # codec libraries raise assorted types on corrupt input
        raise _corrupt(codec, e) from None
