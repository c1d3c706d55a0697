"""Codec micro-benchmarks: decode a Produce request carrying a 16 KiB batch, encode a Fetch response around
a 1 MiB file region, and decode records of a batch.

    python bench/codec_bench.py
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable

from rill.common import FileRegion
from rill.protocol import ApiKey, decode_request, decode_request_header, encode_request, encode_response
from rill.records.builder import build_batch
from rill.records.record import Record, decode_batch_records


def bench(name: str, fn: Callable[[], object], n: int) -> float:
    for _ in range(min(n, 1000)):
        fn()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    print(f"{name:<58} {best * 1e6:8.2f} us")
    return best


def main() -> None:
    print(f"python {platform.python_version()} on {platform.machine()}, best of 5 runs")
    records = [Record(0, 1_700_000_000_000 + i, b"key-%d" % i, bytes(150), []) for i in range(100)]
    batch = build_batch(records)
    big = build_batch([Record(0, 1_700_000_000_000, None, bytes(16 * 1024 - 80), [])])
    assert 16 * 1024 - 100 < len(big) <= 16 * 1024
    for version in (7, 9, 10):
        frame = encode_request(ApiKey.PRODUCE, version, 1, "bench", {
            "acks": -1, "timeout_ms": 30000,
            "topic_data": [{"name": "bench-topic", "partition_data": [{"index": 0, "records": big}]}]})
        view = memoryview(frame)[4:]

        def decode(view: memoryview = view, version: int = version) -> object:
            header, pos = decode_request_header(view)
            return decode_request(header.api_key, header.api_version, view, pos)

        bench(f"Produce v{version} request, 16 KiB batch: header + body decode", decode, 20000)

    region = FileRegion(fd=5, position=0, length=1 << 20)
    for version in (11, 12, 16):
        topic: dict[str, object] = {"topic": "bench-topic", "partitions": [
            {"partition_index": 0, "high_watermark": 1000, "last_stable_offset": 1000, "log_start_offset": 0,
             "records": region}]}
        if version >= 13:
            topic["topic_id"] = b"\x07" * 16
        body = {"responses": [topic]}

        def encode(body: dict[str, object] = body, version: int = version) -> object:
            return encode_response(ApiKey.FETCH, version, 42, body)

        bench(f"Fetch v{version} response around a 1 MiB FileRegion: encode", encode, 20000)

    t = bench("decode_batch_records, 100 records of 150 B (uncompressed)",
              lambda: decode_batch_records(batch), 2000)
    print(f"{'':<58} {100 / t / 1e6:8.2f} M records/s")


if __name__ == "__main__":
    main()
