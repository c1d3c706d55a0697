"""Broker CPU per Produce request as a function of how the requests arrive.

    python bench/request_rate.py [--requests N]

Starts a Rill broker (127.0.0.1, temp data dir), creates a one-partition topic and sends one prebuilt
Produce v9 request (acks=1, one zstd batch of 5,000 records of 100 B, about 8.5 KB: what librdkafka sends
at 100 B with zstd) over one connection: five in flight back to back, one at a time back to back, and one at
a time at a paced rate. For each, the broker's user and system CPU per request (``/proc``).
"""

from __future__ import annotations

import argparse
import shutil
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_network import recv_exact
from bench.brokers import BrokerProcess, free_port, rill_spec
from bench.harness import Target, cpu_seconds, create_topic, topic_name
from bench.worker import payloads
from rill.protocol import ApiKey, encode_request
from rill.records.builder import build_batch
from rill.records.compression import ZSTD
from rill.records.record import Record


def produce_frame(topic: str) -> bytes:
    values = payloads(100)
    now = int(time.time() * 1000)
    batch = build_batch([Record(i, now, None, values[i % len(values)], []) for i in range(5000)],
                        compression=ZSTD)
    return bytes(encode_request(ApiKey.PRODUCE, 9, 1, "request-rate", {
        "acks": 1, "timeout_ms": 30000, "transactional_id": None,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}))


def _read_response(sock: socket.socket, buf: bytearray) -> None:
    recv_exact(sock, 4, buf)
    recv_exact(sock, struct.unpack_from(">i", buf)[0], buf)


def run(sock: socket.socket, frame: bytes, pid: int, count: int, in_flight: int,
        gap: float) -> tuple[float, float, float]:
    """(requests/s, user us per request, system us per request)."""
    buf = bytearray(1 << 16)
    user0, sys0 = cpu_seconds(pid)
    start = time.perf_counter()
    sent = done = 0
    while done < count:
        while sent < count and sent - done < in_flight:
            sock.sendall(frame)
            sent += 1
        _read_response(sock, buf)
        done += 1
        if gap:
            time.sleep(gap)
    elapsed = time.perf_counter() - start
    user1, sys1 = cpu_seconds(pid)
    return count / elapsed, (user1 - user0) * 1e6 / count, (sys1 - sys0) * 1e6 / count


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000, help="requests per back-to-back case")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="request-rate-"))
    port = free_port()
    broker = BrokerProcess(rill_spec(port, work / "data"), work / "rill.log")
    target = Target("rill", broker)
    try:
        broker.start()
        assert broker.pid is not None
        topic = topic_name("request-rate")
        create_topic(target, topic, 1)
        frame = produce_frame(topic)
        cases = [("5 in flight, back to back", 5, 0.0, args.requests),
                 ("1 at a time, back to back", 1, 0.0, args.requests),
                 ("1 at a time, 0.5 ms apart", 1, 0.0005, args.requests // 2),
                 ("1 at a time, 5 ms apart", 1, 0.005, args.requests // 5)]
        with socket.create_connection(("127.0.0.1", port)) as sock:
            run(sock, frame, broker.pid, 200, 5, 0.0)  # warm-up
            print(f"{'requests':28} {'req/s':>8} {'user us/req':>12} {'sys us/req':>11}")
            for label, in_flight, gap, count in cases:
                rate, user, system = run(sock, frame, broker.pid, count, in_flight, gap)
                print(f"{label:28} {rate:8,.0f} {user:12,.0f} {system:11,.0f}", flush=True)
    finally:
        target.admin = None  # drop the admin client first so it does not log the broker going away
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
