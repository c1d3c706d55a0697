"""Cost of the record checks on the produce path.

    python bench/scan_bench.py [--quick]

Prints, for the payloads the suite produces (``bench.worker.payloads``):
- the record scan (``rill.records.scan``), compiled and pure-Python, in ns per record;
- ``log_validator.check_single_batch`` on one 16 KiB batch, and ``Log.append`` of it with the
  segment's descriptor pointed at /dev/null (so the write costs well under a microsecond): the
  Python and C cost of an append above its write;
- reading the records of a compressed 1 MB batch (``scan_batch_records``: decompression in pieces
  plus the scan) beside decompression alone, in us per MB of records, by piece size;
- ``Log.append`` of one compressed batch (16 KiB and 1 MiB of records, lz4 and zstd), write to
  /dev/null: what the records' check costs a compressed produce.
Each figure is the best of several timed loops.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.log_bench import make_batch
from bench.worker import payloads
from rill.log import log_validator
from rill.log.log import Log
from rill.log.log_config import LogConfig
from rill.records import compression, scan
from rill.records.builder import build_batch
from rill.records.record import Record

TS = 1_700_000_000_000


def best(fn: Callable[[], object], loops: int, repeat: int) -> float:
    """Seconds per call: the best of ``repeat`` timings of ``loops`` calls."""
    out = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        out = min(out, (time.perf_counter() - start) / loops)
    return out


def batch_of(size: int, total: int, codec: int = 0) -> tuple[memoryview, int]:
    values = payloads(size)
    count = max(1, total // size)
    records = [Record(0, TS, None, values[i % len(values)]) for i in range(count)]
    return memoryview(build_batch(records, compression=codec)), count


def append_cost(repeat: int) -> float:
    """us per 16 KiB ``Log.append`` above its write (the write goes to /dev/null)."""
    batch, _ = make_batch(16 * 1024)
    view = memoryview(bytearray(batch))
    null = os.open(os.devnull, os.O_WRONLY)
    out = float("inf")
    try:
        for _ in range(repeat):
            work = Path(tempfile.mkdtemp(prefix="scan-bench-"))
            log = Log(work / "t-0", LogConfig(max_message_bytes=2 << 20))
            os.dup2(null, log.segments[-1].fd)
            start = time.perf_counter()
            for _ in range(20_000):
                log.append(view, leader_epoch=0, now_ms=TS)
            out = min(out, (time.perf_counter() - start) / 20_000)
            log.close()
            shutil.rmtree(work)
    finally:
        os.close(null)
    return out * 1e6


def compressed_append_cost(total: int, size: int, codec: int, repeat: int) -> float:
    """us per ``Log.append`` of one batch of ``total`` bytes of ``size`` B records compressed with
    ``codec`` (the write goes to /dev/null)."""
    batch, _ = batch_of(size, total, codec)
    view = memoryview(bytearray(batch))
    loops = max(20, 20_000 * 1024 // total)
    null = os.open(os.devnull, os.O_WRONLY)
    work = Path(tempfile.mkdtemp(prefix="scan-bench-"))
    try:
        log = Log(work / "t-0", LogConfig(max_message_bytes=8 << 20, segment_bytes=1 << 30))
        os.dup2(null, log.segments[-1].fd)
        out = best(lambda: log.append(view, leader_epoch=0, now_ms=TS), loops, repeat)
        log.close()
    finally:
        os.close(null)
        shutil.rmtree(work)
    return out * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args(argv)
    repeat = 3 if args.quick else 7
    print(f"compiled scanner: {scan.ACCELERATED}")
    print("\nrecord scan, ns per record (1 MB of records; the twin on 16 KiB):")
    for size in (100, 1024, 10240):
        batch, count = batch_of(size, 1_000_000)
        body = batch[61:]
        c = best(lambda body=body, count=count: scan.scan_records(body, count, 0), 20, repeat) / count
        small, small_count = batch_of(size, 16 * 1024)
        sbody = small[61:]
        py = best(lambda b=sbody, n=small_count: scan.py_scan_records(b, n, 0), 5, repeat) / small_count
        print(f"  {size:>6} B records: compiled {c * 1e9:7.1f}   pure Python {py * 1e9:9.1f}")

    config = LogConfig()
    batch, _ = make_batch(16 * 1024)
    view = memoryview(bytearray(batch))
    check = best(lambda: log_validator.check_single_batch(view, config), 20_000, repeat)
    print(f"\ncheck_single_batch, one 16 KiB batch (CRC32C included): {check * 1e6:.2f} us")
    print(f"Log.append of it, write to /dev/null: {append_cost(repeat):.2f} us")

    print("\nrecords of a compressed 1 MB batch, us per MB: decompression alone / with the scan")
    for size in (100, 1024, 10240):
        for codec in (compression.LZ4, compression.ZSTD):
            batch, count = batch_of(size, 1_000_000, codec)
            body = batch[61:]
            row = [f"  {size:>6} B {compression.CODEC_NAMES[codec]:>4}"]
            for chunk in (64 << 10, 256 << 10):
                log_validator._SCAN_CHUNK = chunk  # the piece size, for this comparison only
                def decompress(b: memoryview = body, c: int = codec, k: int = chunk) -> object:
                    return list(compression.decompress_chunks(c, b, k, 1 << 26))

                def read(b: memoryview = batch, c: int = codec, n: int = count) -> object:
                    return log_validator.scan_batch_records(b, c, n, config)

                dec, both = best(decompress, 5, repeat), best(read, 5, repeat)
                row.append(f"{chunk >> 10:>3} KiB pieces {dec * 1e6:6.0f} / {both * 1e6:6.0f}")
            print("  ".join(row))

    print("\nLog.append of one compressed batch, write to /dev/null, us:")
    for total in (16 << 10, 1 << 20):
        for size in (100, 1024):
            cells = [f"{compression.CODEC_NAMES[c]} {compressed_append_cost(total, size, c, repeat):8.1f}"
                     for c in (compression.LZ4, compression.ZSTD)]
            print(f"  {total >> 10:>5} KiB of {size:>5} B records: " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
