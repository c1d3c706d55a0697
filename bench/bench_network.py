"""Network layer micro-benchmarks: small request round trips and file-region sends.

    python bench/bench_network.py [--loop uvloop|asyncio|both] [--seconds 3]

The server (rill.network.SocketServer with a trivial handler) runs in this process; the client
is a separate process with blocking sockets, so the two do not share an event loop. Prints one
line per measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import struct
import tempfile
import time
from collections.abc import Callable, Sequence

from rill.common import FileRegion
from rill.network import ConnectionInfo, ResponseChunk, SocketServer

REGION = 1024 * 1024


class BenchHandler:
    def __init__(self, fd: int, mode: str) -> None:
        self.fd = fd
        self.mode = mode
        self.small = struct.pack(">i", 96) + b"r" * 96

    async def handle(self, conn: ConnectionInfo, frame: memoryview) -> Sequence[ResponseChunk] | None:
        if bytes(frame[:1]) != b"F":
            return [self.small]
        header = struct.pack(">i", REGION)
        if self.mode == "sendfile":
            return [header, FileRegion(self.fd, 0, REGION)]
        return [header, os.pread(self.fd, REGION, 0)]  # copy path: read into memory, then write

    def may_overlap(self, conn: ConnectionInfo, frame: memoryview) -> bool:
        return False

    def connection_closed(self, conn: ConnectionInfo) -> None:
        pass


def recv_exact(sock: socket.socket, n: int, buf: bytearray) -> None:
    """Read exactly ``n`` bytes into the start of ``buf``."""
    view = memoryview(buf)[:n]
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("closed")
        got += k


def client(port: int, kind: str, depth: int, seconds: float, out: mp.Queue[float]) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = (b"F" if kind == "fetch" else b"S") + b"q" * 95
    req = struct.pack(">i", len(payload)) + payload
    resp_size = 4 + (REGION if kind == "fetch" else 96)
    buf = bytearray(resp_size * depth)
    done = 0
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < deadline:
        sock.sendall(req * depth)
        recv_exact(sock, resp_size * depth, buf)
        done += depth
    out.put(done / (time.perf_counter() - start))
    sock.close()


async def measure(loop_name: str, kind: str, depth: int, seconds: float, mode: str) -> tuple[float, float]:
    with tempfile.TemporaryFile() as f:
        f.write(os.urandom(REGION))
        f.flush()
        server = SocketServer(BenchHandler(f.fileno(), mode), "127.0.0.1", 0)
        _, port = await server.start()
        ctx = mp.get_context("spawn")
        q: mp.Queue[float] = ctx.Queue()
        proc = ctx.Process(target=client, args=(port, kind, depth, seconds, q))
        proc.start()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        rate: float = await asyncio.get_running_loop().run_in_executor(None, q.get)
        cpu_share = (time.process_time() - cpu0) / (time.perf_counter() - t0)
        proc.join()
        await server.stop()
        return rate, cpu_share / rate * 1e6


def run_on(loop_name: str, coro_args: tuple[str, int, float, str]) -> tuple[float, float]:
    factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    if loop_name == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as r:
        return r.run(measure(loop_name, *coro_args))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loop", default="both", choices=["uvloop", "asyncio", "both"])
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    loops = ["uvloop", "asyncio"] if args.loop == "both" else [args.loop]
    for loop_name in loops:
        for depth in (1, 32):
            rate, cpu_us = run_on(loop_name, ("small", depth, args.seconds, "sendfile"))
            print(
                f"{loop_name:8} 100 B requests, depth {depth:2}: {rate / 1000:8.1f} k req/s,"
                f" server CPU {cpu_us:5.1f} us/request"
            )
        for mode in ("sendfile", "copy"):
            rate, cpu_us = run_on(loop_name, ("fetch", 1, args.seconds, mode))
            print(
                f"{loop_name:8} 1 MiB file region, {mode:8}: {rate * REGION / 1e9:6.2f} GB/s,"
                f" server CPU {cpu_us:6.1f} us/MiB"
            )


if __name__ == "__main__":
    main()
