"""Raw limits of this machine, measured in the same run as the workloads.

- `tcp_copy`: bytes/s copied through a loopback TCP connection (1 MiB sends, 1 MiB receives).
- `sendfile`: bytes/s `os.sendfile` moves from a page-cached file in the data directory to a loopback socket.
- `write`: bytes/s of sequential 1 MiB `os.write` calls into a new file in the data directory, right after
  an equal file was deleted, so the page cache reuses memory the kernel freed a moment ago.
- `write_new`: 1 GiB of the same after `NEW_PAGES_SETTLE_S` seconds in which nothing was freed. On a VM
  whose balloon driver reports free memory back to the host (free page reporting), the kernel then fills
  the page cache partly from memory the host must fault in again, as a growing log does; on this machine
  the first 0.5-0.75 GiB still go at the `write` rate and the rest at a tenth of it. Reported for context:
  it is not an upper bound (a broker's log meets its own mix, depending on what was freed just before),
  so produce rows are still compared with `write`.
- `rtt_p99_ms`: 99th percentile round trip of a 1 KiB ping-pong over loopback TCP (a floor for latency rows).

The far end of every socket runs in a forked process (as a broker would), every measurement is repeated
and its median reported; all sockets are on 127.0.0.1.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path

CHUNK = 1 << 20
NEW_PAGES_SETTLE_S = 8.0
NEW_PAGES_BYTES = 1024 * CHUNK  # more than the memory the host keeps mapped after a pause (quick mode too)


def _pair() -> tuple[socket.socket, socket.socket]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as lsock:
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(1)
        client = socket.create_connection(lsock.getsockname(), timeout=30)
        server, _ = lsock.accept()
    server.settimeout(30)
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client, server


def _drain(sock: socket.socket, total: int) -> None:
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    got = 0
    while got < total:
        n = sock.recv_into(view)
        if n == 0:
            return
        got += n
    sock.sendall(b"k")


def _echo(sock: socket.socket, count: int, size: int) -> None:
    for _ in range(count):
        data = b""
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            if not chunk:
                return
            data += chunk
        sock.sendall(data)


def _with_peer(target: Callable[..., None], args: tuple[object, ...],
               body: Callable[[socket.socket], float]) -> float:
    """Run `target(server_socket, *args)` in a forked process while `body(client_socket)` runs here."""
    client, server = _pair()
    proc = multiprocessing.get_context("fork").Process(target=target, args=(server, *args), daemon=True)
    try:
        proc.start()
        server.close()
        return body(client)
    finally:
        client.close()
        server.close()
        proc.join(30)
        if proc.is_alive():
            proc.kill()
            proc.join(5)


def _timed_transfer(total: int, send: Callable[[socket.socket], None]) -> float:
    """Bytes/s for `send` pushing `total` bytes into a loopback socket drained by another process."""

    def body(client: socket.socket) -> float:
        t0 = time.monotonic()
        send(client)
        if client.recv(1) != b"k":
            raise RuntimeError("loopback receiver did not finish")
        return total / (time.monotonic() - t0)

    return _with_peer(_drain, (total,), body)


def tcp_copy(total: int) -> float:
    data = memoryview(os.urandom(CHUNK))

    def send(sock: socket.socket) -> None:
        for _ in range(total // CHUNK):
            sock.sendall(data)

    return _timed_transfer(total // CHUNK * CHUNK, send)


def sendfile(data_dir: Path, total: int) -> float:
    path = data_dir / "limits-sendfile.bin"
    block = os.urandom(CHUNK)
    with path.open("wb") as f:
        for _ in range(total // CHUNK):
            f.write(block)
    size = total // CHUNK * CHUNK
    try:
        with path.open("rb") as src:
            while src.read(CHUNK):  # make sure every page is in the page cache
                pass
            fd = src.fileno()

            def send(sock: socket.socket) -> None:
                sock.setblocking(True)
                offset = 0
                while offset < size:
                    offset += os.sendfile(sock.fileno(), fd, offset, size - offset)

            return _timed_transfer(size, send)
    finally:
        path.unlink(missing_ok=True)


def sequential_write(data_dir: Path, total: int) -> float:
    path = data_dir / "limits-write.bin"
    block = os.urandom(CHUNK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.monotonic()
        for _ in range(total // CHUNK):
            os.write(fd, block)
        return total // CHUNK * CHUNK / (time.monotonic() - t0)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def sequential_write_new_pages(data_dir: Path, total: int = NEW_PAGES_BYTES,
                               settle_s: float = NEW_PAGES_SETTLE_S) -> float:
    """`sequential_write` into memory nothing has freed for `settle_s` seconds (see the module docstring)."""
    time.sleep(settle_s)
    return sequential_write(data_dir, total)


def round_trip_p99_ms(count: int, size: int = 1024) -> float:
    payload = os.urandom(size)

    def body(client: socket.socket) -> float:
        samples = []
        for _ in range(count):
            t0 = time.perf_counter_ns()
            client.sendall(payload)
            got = 0
            while got < size:
                n = len(client.recv(size - got))
                if n == 0:
                    raise RuntimeError("echo peer closed")
                got += n
            samples.append(time.perf_counter_ns() - t0)
        samples.sort()
        return samples[min(len(samples) - 1, int(len(samples) * 0.99))] / 1e6

    return _with_peer(_echo, (count, size), body)


def measure(data_dir: Path, quick: bool, repeats: int = 3) -> dict[str, float]:
    """All limits, each the median of `repeats`; throughputs in bytes/s."""
    data_dir.mkdir(parents=True, exist_ok=True)
    size = (256 if quick else 1024) * CHUNK

    def med(fn: Callable[[], float]) -> float:
        return statistics.median(fn() for _ in range(repeats))

    return {
        "tcp_copy": med(lambda: tcp_copy(size)),
        "sendfile": med(lambda: sendfile(data_dir, size)),
        "write": med(lambda: sequential_write(data_dir, size)),
        "write_new": med(lambda: sequential_write_new_pages(data_dir)),
        "rtt_p99_ms": med(lambda: round_trip_p99_ms(2000 if quick else 10000)),
    }
