"""CPU cost of one request through the broker, without sockets: frame -> dispatcher -> log -> response chunks.

    python bench/request_bench.py [--profile]

Starts a broker in-process (listener on 127.0.0.1:0, temp data dir), creates a one-partition topic, then
times `RequestDispatcher.handle` on prebuilt request frames: Produce v10 (acks=1) with one batch of
100 x 100 B, 16 x 1 KiB and 1 MiB of 10 KiB records, and Fetch v16 of up to 1 MiB from the start of the
partition (the response is 1 MiB of file region, not sent). `--profile` prints cProfile's top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rill.broker import Broker
from rill.config import BrokerConfig
from rill.network.handler import ConnectionInfo
from rill.protocol import ApiKey, encode_request
from rill.records.builder import build_batch
from rill.records.record import Record

TOPIC = "bench-requests"
CONN = ConnectionInfo("bench", "127.0.0.1", 1, "PLAINTEXT")


def produce_frame(count: int, size: int) -> bytes:
    now = int(time.time() * 1000)
    batch = build_batch([Record(i, now, None, bytes(size), []) for i in range(count)])
    frame = encode_request(ApiKey.PRODUCE, 10, 1, "bench", {
        "acks": 1, "timeout_ms": 30000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]})
    return bytes(frame)[4:]


async def timed(name: str, fn: Callable[[], Awaitable[Any]], n: int) -> None:
    for _ in range(min(n // 10, 200)):
        await fn()
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        for _ in range(n):
            await fn()
        best = min(best, (time.process_time() - t0) / n)
    print(f"{name:<48} {best * 1e6:9.1f} us CPU", flush=True)


async def run(profile: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="rill-reqbench-") as tmp:
        config = BrokerConfig.from_properties({
            "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(Path(tmp) / "data")})
        broker = Broker(config)
        await broker.start()
        try:
            assert broker.services is not None
            create = encode_request(ApiKey.CREATE_TOPICS, 5, 1, "bench", {
                "topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 1,
                            "assignments": [], "configs": []}], "timeout_ms": 10000, "validate_only": False})
            dispatcher = broker._server.handler._holder[0]  # type: ignore[union-attr]
            await dispatcher.handle(CONN, memoryview(bytes(create)[4:]))
            cases = [("Produce v10, 100 x 100 B", produce_frame(100, 100), 3000),
                     ("Produce v10, 16 x 1 KiB", produce_frame(16, 1024), 3000),
                     ("Produce v10, 100 x 10 KiB (1 MiB)", produce_frame(100, 10240), 300)]
            prof = cProfile.Profile() if profile else None
            for name, frame, n in cases:
                view = memoryview(bytearray(frame))  # request buffers are writable, as the network makes them

                async def once(view: memoryview = view) -> Any:
                    return await dispatcher.handle(CONN, view)

                if prof:
                    prof.enable()
                await timed(name, once, n)
                if prof:
                    prof.disable()
            state = broker.services.metadata.topic(TOPIC)
            assert state is not None
            topic_id = state.topic_id.bytes
            fetch = encode_request(ApiKey.FETCH, 16, 1, "bench", {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 52428800,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic_id": topic_id, "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                     "log_start_offset": -1, "partition_max_bytes": 1048576}]}],
                "forgotten_topics_data": [], "rack_id": ""})
            fview = memoryview(bytes(fetch)[4:])

            async def fetch_once() -> Any:
                return await dispatcher.handle(CONN, fview)

            if prof:
                prof.enable()
            await timed("Fetch v16, 1 MiB from offset 0", fetch_once, 3000)
            if prof:
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        finally:
            await broker.stop()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args(argv)
    from rill.network.event_loop import run as run_loop

    run_loop(run(args.profile))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
