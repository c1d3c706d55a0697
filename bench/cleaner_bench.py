"""Log cleaner benchmark: one cleaning of a compacted log, in MB/s of the dirty log read.

    python bench/cleaner_bench.py [--quick] [--dir DIR] [--mib N] [--keys N] [--value-bytes N] [--codec N]

Appends ``--mib`` (256) of batches of 100 records, each an update of one of ``--keys`` (10,000) keys with a
``--value-bytes`` (100) value, compressed with ``--codec`` (0: none; 4: zstd), into a log of 64 MiB segments,
then cleans it once in the calling thread (``LogCleaner.clean_now``: the key map, the rewrite and the
swap) and prints the rate (bytes of the dirty section read over the cleaning's time), the bytes written
and the records removed. ``--quick``: 32 MiB.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from rill.log.cleaner_offset_map import OffsetMap, slots_for
from rill.log.log import Log
from rill.log.log_cleaner_manager import CleanerConfig, LogCleaner
from rill.log.log_config import LogConfig
from rill.records.builder import build_batch
from rill.records.record import Record

MIB = 1024 * 1024


def fill(log: Log, total: int, keys: int, value_bytes: int, codec: int) -> int:
    rng = random.Random(1)
    now = time.time_ns() // 1_000_000
    written = 0
    payload = os.urandom(value_bytes)
    while written < total:
        records = [Record(0, now, b"key-%d" % rng.randrange(keys), payload) for _ in range(100)]
        batch = build_batch(records, compression=codec)
        log.append(batch, leader_epoch=0, now_ms=now)
        written += len(batch)
    log.roll(now_ms=now)
    log.high_watermark = log.log_end_offset
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--codec", type=int, default=0)
    args = parser.parse_args()
    total = (32 if args.quick else args.mib) * MIB
    base = Path(tempfile.mkdtemp(prefix="cleaner-bench-", dir=args.dir))
    try:
        config = LogConfig(segment_bytes=64 * MIB, cleanup_policy="compact", file_delete_delay_ms=0)
        log = Log(base / "bench-0", config)
        written = fill(log, total, args.keys, args.value_bytes, args.codec)
        segments = log.num_segments
        cleaner = LogCleaner(CleanerConfig())
        offset_map = OffsetMap(slots_for(CleanerConfig().dedupe_buffer_size, 0.9))
        started = time.monotonic()
        result = cleaner.clean_now(log, offset_map)
        seconds = time.monotonic() - started
        assert result is not None
        print(
            f"cleaned {written / MIB:.0f} MiB ({segments} segments, {args.keys} keys, codec {args.codec}) in"
            f" {seconds:.2f} s: {result.bytes_read / seconds / 1e6:.1f} MB/s read"
            f" ({result.records_read / seconds / 1e3:.0f}k records/s), {result.bytes_written / MIB:.2f}"
            f" MiB written, {result.records_removed} of {result.records_read} records removed,"
            f" {log.num_segments} segments left"
        )
        log.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
