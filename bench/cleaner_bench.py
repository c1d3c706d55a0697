"""Log cleaner benchmark: one cleaning of a compacted log, in MB/s of the dirty log read, against the
machine's raw read+write of the same bytes measured in the same run.

    python bench/cleaner_bench.py [--quick] [--dir DIR] [--mib N] [--keys N] [--key-bytes N] [--value-bytes N]
                                  [--records-per-batch N] [--codec N] [--rounds N] [--process]

Appends ``--mib`` (256) of batches of ``--records-per-batch`` (100) records, each an update of one of ``--keys``
(10,000) keys (``key-<n>``, or padded to ``--key-bytes``: 16 or more takes the MD5 digest path) with a
``--value-bytes`` (100) value, compressed with ``--codec`` (0: none; 4: zstd), into a log of 64 MiB segments.
Then, in the calling thread: the raw read+write (each segment file read with 1 MiB ``pread`` calls and
written to a new file of the same directory with ``write`` calls, fsynced, as a cleaning fsyncs its output;
the best of 3), and one cleaning (``LogCleaner.clean_now``: the key map, the rewrite and the swap). Prints
both rates in MB/s of the bytes read (the dirty section, which the cleaning reads twice: for the key map and
for the rewrite; it writes what it keeps), the cleaning's CPU time per MB read, the bytes written and the
records removed. ``--rounds`` repeats
the whole (a fresh log each time). ``--quick``: 32 MiB. ``--process``: a copy of the same log is also
cleaned the broker's way (``LogCleaner.clean_one``: the plan on an event loop, the key map and rewrite in a
cleaning process, rill.log.cleaner_process, the swap on the loop); its rate is given both over the
process's cleaning time and over the whole call (the processes' start included).
"""

from __future__ import annotations

import argparse
import asyncio
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


def fill(log: Log, total: int, args: argparse.Namespace) -> int:
    rng = random.Random(1)
    now = time.time_ns() // 1_000_000
    written = 0
    payload = os.urandom(args.value_bytes)
    keys, codec, width = args.keys, args.codec, args.key_bytes
    while written < total:
        records = [Record(0, now, (b"key-%d" % rng.randrange(keys)).ljust(width, b"-"), payload)
                   for _ in range(args.records_per_batch)]  # fmt: skip
        batch = build_batch(records, compression=codec)
        log.append(batch, leader_epoch=0, now_ms=now)
        written += len(batch)
    log.roll(now_ms=now)
    log.high_watermark = log.log_end_offset
    return written


def raw_read_write(paths: list[Path], repeats: int = 3) -> float:
    """Bytes/s of copying ``paths`` into a new file beside them (1 MiB reads and writes, one fsync at the
    end), the best of ``repeats``."""
    best = 0.0
    total = sum(p.stat().st_size for p in paths)
    target = paths[0].parent / "raw-copy.tmp"
    for _ in range(repeats):
        started = time.monotonic()
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for path in paths:
                fd = os.open(path, os.O_RDONLY)
                try:
                    pos = 0
                    while chunk := os.pread(fd, MIB, pos):
                        os.write(out, chunk)
                        pos += len(chunk)
                finally:
                    os.close(fd)
            os.fsync(out)
        finally:
            os.close(out)
        best = max(best, total / (time.monotonic() - started))
        target.unlink()
    return best


def one_round(base: Path, total: int, args: argparse.Namespace) -> tuple[float, float]:
    """Fill a log, measure the raw read+write of its segments, clean it; (cleaning MB/s, raw MB/s)."""
    config = LogConfig(segment_bytes=64 * MIB, cleanup_policy="compact", file_delete_delay_ms=0)
    log = Log(base / "bench-0", config)
    try:
        written = fill(log, total, args)
        segments = log.num_segments
        raw = raw_read_write([seg.log_path for seg in log.segments[:-1]]) / 1e6
        if args.process:
            log.flush()
            shutil.copytree(log.dir, base / "bench-copy-0")
        cleaner = LogCleaner(CleanerConfig())
        offset_map = OffsetMap(slots_for(CleanerConfig().dedupe_buffer_size, 0.9))
        started, cpu = time.monotonic(), time.process_time()
        result = cleaner.clean_now(log, offset_map)
        seconds, cpu = time.monotonic() - started, time.process_time() - cpu
        assert result is not None
        rate = result.bytes_read / seconds / 1e6
        print(
            f"cleaned {written / MIB:.0f} MiB ({segments} segments, {args.keys} keys, {args.records_per_batch}"
            f" records a batch, codec {args.codec}) in"
            f" {seconds:.2f} s: {rate:.1f} MB/s read ({result.records_read / seconds / 1e3:.0f}k records/s,"
            f" {cpu * 1e3 / (result.bytes_read / 1e6):.2f} ms of CPU per MB),"
            f" {result.bytes_written / MIB:.2f} MiB written, {result.records_removed} of {result.records_read}"
            f" records removed, {log.num_segments} segments left; raw read+write of the same files"
            f" {raw:.0f} MB/s: the cleaning at {100 * rate / raw:.1f}% of it",
            flush=True,
        )
        if args.process:
            clean_in_process(base / "bench-copy-0")
        return rate, raw
    finally:
        log.close()
        shutil.rmtree(base / "bench-0", ignore_errors=True)
        shutil.rmtree(base / "bench-copy-0", ignore_errors=True)


def clean_in_process(copy: Path) -> None:
    """Clean ``copy`` (a copy of the log made before its cleaning) as the broker does, in a cleaning process."""
    config = LogConfig(segment_bytes=64 * MIB, cleanup_policy="compact", file_delete_delay_ms=0)
    log = Log(copy, config)
    log.high_watermark = log.log_end_offset
    cleaner = LogCleaner(CleanerConfig())
    offset_map = OffsetMap(slots_for(CleanerConfig().dedupe_buffer_size, 0.9))
    try:
        started = time.monotonic()
        assert asyncio.run(cleaner.clean_one({log.topic_partition: (log, copy.parent)}, offset_map))
        seconds = time.monotonic() - started
        stats = cleaner.stats.worker(0)
        print(
            f"  the same in a cleaning process: {stats.bytes_read / stats.clean_secs / 1e6:.1f} MB/s read over its"
            f" {stats.clean_secs:.2f} s, {stats.bytes_read / seconds / 1e6:.1f} MB/s over the whole call"
            f" ({seconds:.2f} s, the process's start included), {stats.bytes_written / MIB:.2f} MiB written,"
            f" {log.num_segments} segments left",
            flush=True,
        )
    finally:
        cleaner.stop()
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--key-bytes", type=int, default=0)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--records-per-batch", type=int, default=100)
    parser.add_argument("--codec", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--process", action="store_true")
    args = parser.parse_args()
    total = (32 if args.quick else args.mib) * MIB
    base = Path(tempfile.mkdtemp(prefix="cleaner-bench-", dir=args.dir))
    try:
        rounds = [one_round(base, total, args) for _ in range(args.rounds)]
        if len(rounds) > 1:
            rates = sorted(r for r, _ in rounds)
            raws = sorted(raw for _, raw in rounds)
            print(f"median of {len(rounds)}: cleaning {rates[len(rates) // 2]:.1f} MB/s, raw read+write"
                  f" {raws[len(raws) // 2]:.0f} MB/s")  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
