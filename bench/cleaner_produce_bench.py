"""What the log cleaner costs producers: produce throughput on one topic while the broker cleans another,
with no cleaning, the cleaner unthrottled, and throttled by ``log.cleaner.io.max.bytes.per.second``.

    python bench/cleaner_produce_bench.py [--mib N] [--keys N] [--seconds S] [--rounds N]
                                          [--throttle BYTES_PER_S ...] [--size N] [--dir DIR]

Builds once a data directory holding a compacted topic ``table`` of ``--mib`` (256) MiB of updates of
``--keys`` (10,000) keys (100-byte values, 16 MiB segments, written by confluent-kafka with the cleaner
off, so all of it is dirty) and an empty topic ``other`` (1 partition). Each case starts a broker
(``python -m rill broker``, its own process) on a fresh copy of that directory and at once a producer process
(``bench.worker produce``: confluent-kafka, ``--size`` (1,024) byte records, acks=1, linger.ms=5) that
writes to ``other`` for ``--seconds`` (5) s:

- ``none``: ``log.cleaner.enable=false``;
- ``unthrottled``: the cleaner at its default rate (no limit);
- ``throttled X``: ``log.cleaner.io.max.bytes.per.second=X`` for each ``--throttle`` (5,000,000).

The cases alternate within each of ``--rounds`` (3) rounds, so all of them meet the same machine; the
median of each is printed beside the no-cleaning case, with how long the broker's cleaning of ``table``
took (from its ``log-cleaner:`` line; when it ended before the producer did, the window was only partly
under cleaning and the line says so).
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import run_worker

MIB = 1024 * 1024
_CLEANED = re.compile(r"log-cleaner: cleaned table-0: .* ([0-9.]+) s \(([0-9.]+) MB/s\)")


def build_template(data_dir: Path, mib: int, keys: int) -> None:
    """The data directory every case starts from: ``table`` all dirty, ``other`` empty."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    import rill.testing

    overrides = {"log.cleaner.enable": "false", "num.partitions": "1"}
    with rill.testing.broker(overrides, subprocess=True, data_dir=data_dir) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        configs = {"cleanup.policy": "compact", "segment.bytes": str(16 * MIB)}
        for future in admin.create_topics([NewTopic("table", 1, config=configs), NewTopic("other", 1)]).values():
            future.result(30)
        producer = Producer(
            {"bootstrap.servers": b.bootstrap_servers, "linger.ms": 20, "batch.size": 1 << 20, "acks": "1"}
        )
        rng = random.Random(1)
        values = [rng.randbytes(100) for _ in range(64)]
        key_names = [b"key-%d" % i for i in range(keys)]
        total = mib * MIB
        written = 0
        i = 0
        while written < total:
            try:
                producer.produce("table", values[i % 64], key_names[rng.randrange(keys)])
            except BufferError:
                producer.poll(0.01)
                continue
            written += 110
            i += 1
            if i % 10_000 == 0:
                producer.poll(0)
        assert producer.flush(120) == 0
        b.stop()


def run_case(
    template: Path, work: Path, name: str, cleaner: dict[str, str], args: argparse.Namespace
) -> dict[str, Any]:
    import rill.testing

    data_dir = work / name.replace(" ", "-")
    shutil.rmtree(data_dir, ignore_errors=True)
    shutil.copytree(template, data_dir)
    log_path = data_dir / "broker.log"
    before = log_path.stat().st_size if log_path.exists() else 0
    b = rill.testing.TestBroker(cleaner | {"log.cleaner.backoff.ms": "1000"}, subprocess=True, data_dir=data_dir)
    b.start()
    try:
        params = {"bootstrap": b.bootstrap_servers, "topic": "other", "size": args.size, "seconds": args.seconds,
                  "acks": "1", "linger_ms": 5}  # fmt: skip
        result = run_worker("produce", params, timeout=args.seconds + 120)
        finished = log_path.read_bytes()[before:].decode(errors="replace")
        cleaned = _CLEANED.search(finished)
    finally:
        b.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    if result.get("errors"):
        raise RuntimeError(f"{name}: producer errors {result['errors']}")
    return {
        "mb_s": result["bytes"] / result["seconds"] / 1e6,
        "clean_s": float(cleaned.group(1)) if cleaned else None,
        "clean_mb_s": float(cleaned.group(2)) if cleaned else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--throttle", type=float, action="append", default=None)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    throttles = args.throttle or [5_000_000.0]
    cases: list[tuple[str, dict[str, str]]] = [
        ("none", {"log.cleaner.enable": "false"}),
        ("unthrottled", {}),
    ] + [(f"throttled {t / 1e6:g} MB/s", {"log.cleaner.io.max.bytes.per.second": str(t)}) for t in throttles]
    work = Path(tempfile.mkdtemp(prefix="cleaner-produce-bench-", dir=args.dir))
    try:
        template = work / "template"
        started = time.monotonic()
        build_template(template, args.mib, args.keys)
        print(f"template: {args.mib} MiB of table written in {time.monotonic() - started:.1f} s", flush=True)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in cases}
        for r in range(args.rounds):
            for name, cleaner in cases:
                out = run_case(template, work, name, cleaner, args)
                runs[name].append(out)
                clean = (
                    "no cleaning"
                    if out["clean_s"] is None
                    else f"cleaning ended after {out['clean_s']:.1f} s at {out['clean_mb_s']:.1f} MB/s"
                )
                if name != "none" and out["clean_s"] is None:
                    clean = f"cleaning still running at the window's end (> {args.seconds:g} s)"
                print(f"round {r + 1}: {name}: produce {out['mb_s']:.1f} MB/s; {clean}", flush=True)
        base = statistics.median(o["mb_s"] for o in runs["none"])
        print(f"\nmedian of {args.rounds} rounds, {args.size}-byte records for {args.seconds:g} s:")
        for name, _ in cases:
            mb_s = statistics.median(o["mb_s"] for o in runs[name])
            print(f"  {name:<22} {mb_s:8.1f} MB/s  {mb_s / base:5.2f}x  (cost {base - mb_s:6.1f} MB/s)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
