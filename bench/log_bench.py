"""Storage benchmark: Log.append and Log.read (sent with os.sendfile) beside raw os.write and
os.sendfile on the same disk in the same run, and crash recovery of an unflushed tail.

    python bench/log_bench.py [--quick] [--dir DIR] [--total-mib N] [--repeat N] [--slices N]

Each ratio printed is the median over the repeats of that repeat's own ratio (its append and raw
write share interleaved slices); the per-repeat ratios follow on the next line.

Appends ``--total-mib`` (1024) in 1 MiB and in 16 KiB batches and compares with ``os.write`` of
the same chunks into a fresh file, the two interleaved in ``--slices`` (16) alternating slices so
that drift of the machine's page cache and writeback hits both alike; then reads the log back
through ``Log.read`` regions sent with ``os.sendfile`` to a loopback socket drained by a thread,
beside ``os.sendfile`` of the raw file to another, interleaved the same way.
Then a child process appends the same amount without flushing and is killed with SIGKILL; the
time to reopen (recover) the log is reported. ``--quick`` uses 128 MiB and one repeat.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rill.log.log import Log
from rill.log.log_config import LogConfig
from rill.records.builder import build_batch
from rill.records.record import Record

MIB = 1024 * 1024


def make_batch(batch_bytes: int) -> tuple[bytes, int]:
    value_size = 1000
    n = max(1, (batch_bytes - 61) // (value_size + 20))
    records = [Record(0, 1_700_000_000_000 + i, None, os.urandom(16) * (value_size // 16)) for i in range(n)]
    return build_batch(records), n


def rate(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e6


def bench_writes(dir: Path, batch: bytes, total: int, slices: int) -> tuple[float, float, Log]:
    """Raw ``os.write`` of ``batch`` into a fresh file and ``Log.append`` of it into a fresh log,
    ``total`` bytes each, interleaved in ``slices`` alternating slices so that both meet the same
    page-cache and writeback state (the dirty pages of both grow together); returns both rates.
    """
    shutil.rmtree(dir / "bench-0", ignore_errors=True)
    log = Log(dir / "bench-0", LogConfig(max_message_bytes=2 * MIB))
    # A Produce request arrives in a writable buffer (the connection reads into a bytearray), so
    # the log patches the base offset and epoch in place; a read-only copy would take the slower
    # copied-header path that only in-process callers use.
    view = memoryview(bytearray(batch))
    fd = os.open(dir / "raw.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    per_slice = max(len(batch), total // slices // len(batch) * len(batch))
    raw_time = append_time = 0.0
    written = appended = 0
    try:
        while appended < total:
            goal = min(total, appended + per_slice)
            start = time.perf_counter()
            while written < goal:
                written += os.write(fd, batch)
            raw_time += time.perf_counter() - start
            start = time.perf_counter()
            while appended < goal:
                log.append(view, leader_epoch=0, now_ms=1_700_000_000_000)
                appended += len(batch)
            append_time += time.perf_counter() - start
    finally:
        os.close(fd)
    return rate(written, raw_time), rate(appended, append_time), log


def _sink() -> tuple[socket.socket, Callable[[], int]]:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    conn, _ = server.accept()
    server.close()
    received = [0]

    def drain() -> None:
        buf = bytearray(4 * MIB)
        while True:
            n = conn.recv_into(buf)
            if n == 0:
                break
            received[0] += n
        conn.close()

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()

    def finish() -> int:
        client.shutdown(socket.SHUT_WR)
        thread.join()
        client.close()
        return received[0]

    return client, finish


def _sendfile_all(sock: socket.socket, fd: int, position: int, length: int) -> None:
    out = sock.fileno()
    while length > 0:
        n = os.sendfile(out, fd, position, length)
        position += n
        length -= n


def bench_reads(dir: Path, log: Log, fetch_bytes: int, batch_size: int, records_per_batch: int,
                slices: int) -> tuple[float, float]:
    """``os.sendfile`` of the raw file and ``Log.read`` regions sent with ``os.sendfile``, each to its own
    loopback socket drained by a thread, ``fetch_bytes`` per call, interleaved in ``slices``
    alternating slices (as the writes are); returns (raw rate, log read rate)."""
    path = dir / "raw.bin"
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    raw_sock, raw_finish = _sink()
    log_sock, log_finish = _sink()
    per_slice = max(fetch_bytes, size // slices)
    raw_pos = sent = offset = 0
    raw_time = read_time = 0.0
    leo = log.log_end_offset
    try:
        while raw_pos < size or offset < leo:
            goal = min(size, raw_pos + per_slice)
            start = time.perf_counter()
            while raw_pos < goal:
                n = min(fetch_bytes, goal - raw_pos)
                _sendfile_all(raw_sock, fd, raw_pos, n)
                raw_pos += n
            raw_time += time.perf_counter() - start
            start = time.perf_counter()
            while offset < leo and (sent < goal or raw_pos >= size):
                info = log.read(offset, fetch_bytes)
                for region in info.regions:
                    _sendfile_all(log_sock, region.fd, region.position, region.length)
                sent += info.size
                offset += info.size // batch_size * records_per_batch
            read_time += time.perf_counter() - start
    finally:
        os.close(fd)
    assert raw_finish() == size and log_finish() == sent == log.size_bytes
    return rate(size, raw_time), rate(sent, read_time)


CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from log_bench import make_batch
from rill.log.log import Log
from rill.log.log_config import LogConfig
batch, _ = make_batch(1024 * 1024)
log = Log(Path(sys.argv[1]), LogConfig(max_message_bytes=2 * 1024 * 1024))
total = int(sys.argv[2])
done = 0
while done < total:
    log.append(batch, leader_epoch=0)
    done += len(batch)
print("DONE", flush=True)
import time
time.sleep(60)
"""


def bench_recovery(dir: Path, total: int) -> tuple[float, int, int]:
    target = dir / "crash-0"
    shutil.rmtree(target, ignore_errors=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(target), str(total), str(Path(__file__).parent)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert line.startswith("DONE"), line
    start = time.perf_counter()
    log = Log(target, LogConfig(max_message_bytes=2 * MIB), had_clean_shutdown=False, recovery_point=0)
    elapsed = time.perf_counter() - start
    size, leo = log.size_bytes, log.log_end_offset
    log.close()
    shutil.rmtree(target, ignore_errors=True)
    return elapsed, size, leo


def _percents(ratios: list[float]) -> str:
    return " ".join(f"{x:.0%}" for x in ratios)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="128 MiB, one repeat")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--total-mib", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--slices", type=int, default=16, help="alternating raw/append slices per run")
    args = parser.parse_args(argv)
    total = (args.total_mib or (128 if args.quick else 1024)) * MIB
    repeat = args.repeat or (1 if args.quick else 3)
    base = Path(tempfile.mkdtemp(prefix="log-bench-", dir=args.dir))
    print(f"writing {total // MIB} MiB per run under {base}, median of {repeat}")
    try:
        for label, batch_bytes in (("1 MiB", MIB), ("16 KiB", 16 * 1024)):
            batch, n = make_batch(batch_bytes)
            raw_w, app, raw_s, rd = [], [], [], []
            for _ in range(repeat):
                raw_mbps, mbps, log = bench_writes(base, batch, total, args.slices)
                raw_w.append(raw_mbps)
                app.append(mbps)
                raw_rate, read_rate = bench_reads(base, log, MIB, len(batch), n, args.slices)
                raw_s.append(raw_rate)
                rd.append(read_rate)
                (base / "raw.bin").unlink()
                log.close()
                shutil.rmtree(base / "bench-0", ignore_errors=True)
            w, a, s, r = (statistics.median(x) for x in (raw_w, app, raw_s, rd))
            # Each ratio is the median of the repeats' own ratios: a repeat's append and raw write share
            # interleaved slices, while the medians of the rates may come from different repeats (one
            # into new page-cache pages, another into reused ones, see docs/PERFORMANCE.md).
            write_ratios = [x / y for x, y in zip(app, raw_w, strict=True)]
            read_ratios = [x / y for x, y in zip(rd, raw_s, strict=True)]
            print(
                f"{label:>6} batches: append {a:8.0f} MB/s vs raw os.write {w:8.0f} MB/s "
                f"({statistics.median(write_ratios):5.0%}) | read+sendfile {r:8.0f} MB/s vs raw os.sendfile "
                f"{s:8.0f} MB/s ({statistics.median(read_ratios):5.0%})"
            )
            if repeat > 1:
                print(f"{'':>6}   per repeat: append/write {_percents(write_ratios)}, read/sendfile "
                      f"{_percents(read_ratios)}")
        elapsed, size, leo = bench_recovery(base, total)
        print(f"recovery after SIGKILL: {size // MIB} MiB unflushed, {leo} records, reopened in {elapsed:.2f} s")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
