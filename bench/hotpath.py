"""Produce and consume throughput of one broker process, quick to repeat while tuning the hot path.

`python bench/hotpath.py [--sizes 1k,10k] [--brokers rill,tansu] [--rounds N] [--profile DIR] [--quick]
[--baseline-src DIR] [--base-override KEY=VALUE] [--compression CODEC]`

For each size: a fresh one-partition topic, a producer process (confluent-kafka, acks=1, linger.ms=5,
`--compression`, none by default) producing for `--seconds`, then a consumer process reading everything
back from offset 0 (records already in page cache). Rill and Tansu are started once each and measured
alternately (A/B/A/B), and the medians are printed with their ratio. `--profile DIR` records the Rill broker with py-spy
(collapsed stacks, one file per size and direction) and prints its top frames.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.brokers import BrokerProcess, BrokerSpec, free_port, rill_spec, tansu_spec
from bench.harness import RunFailed, Target, check_errors, cpu_seconds, create_topic, run_worker, topic_name
from bench.profiling import maybe_profile, render, summarize

SIZES = {"100b": 100, "1k": 1024, "10k": 10240}
MB = 1e6


def _mbps(res: dict[str, float]) -> float:
    if res["seconds"] <= 0 or res["messages"] <= 0:
        raise RunFailed("no records moved")
    return res["bytes"] / res["seconds"] / MB


def one_round(target: Target, size: int, seconds: float, profile: Path | None,
              label: str, consumer_conf: dict[str, str],
              compression: str = "none",
              producer_conf: dict[str, str] | None = None) -> tuple[float, float, float, float]:
    """(produce MB/s, consume MB/s, broker CPU us per MB produced, per MB consumed)."""
    topic = topic_name("hotpath")
    create_topic(target, topic, 1)
    assert target.broker is not None and target.broker.pid is not None
    pid = target.broker.pid
    spy = pid if target.name == "rill" else None
    cpu0 = cpu_seconds(pid)
    with maybe_profile(spy, profile / f"{label}-produce.txt" if profile else None):
        prod = run_worker("produce", {"bootstrap": target.bootstrap, "topic": topic, "size": size, "acks": "1",
                                      "compression": compression, "seconds": seconds, "flush_timeout": 60,
                                      "producer_conf": producer_conf or {}},
                          seconds + 90)
    check_errors(prod, "produce")
    cpu1 = cpu_seconds(pid)
    with maybe_profile(spy, profile / f"{label}-consume.txt" if profile else None):
        cons = run_worker("consume", {"bootstrap": target.bootstrap, "topic": topic, "size": size,
                                      "messages": prod["messages"], "seconds": 60,
                                      "consumer_conf": consumer_conf}, 90)
    check_errors(cons, "consume")
    cpu2 = cpu_seconds(pid)
    with contextlib.suppress(Exception):
        target.client().delete_topics([topic], operation_timeout=10, request_timeout=10)[topic].result(15)
    mb_p, mb_c = prod["bytes"] / MB, cons["bytes"] / MB
    if os.environ.get("HOTPATH_SPLIT"):
        print(f"  {target.name} produce user/sys {(cpu1[0] - cpu0[0]) * 1e6 / mb_p:.0f}/"
              f"{(cpu1[1] - cpu0[1]) * 1e6 / mb_p:.0f} us/MB; consume "
              f"{(cpu2[0] - cpu1[0]) * 1e6 / mb_c:.0f}/{(cpu2[1] - cpu1[1]) * 1e6 / mb_c:.0f} us/MB")
    return (_mbps(prod), _mbps(cons), (sum(cpu1) - sum(cpu0)) * 1e6 / mb_p,
            (sum(cpu2) - sum(cpu1)) * 1e6 / mb_c)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100b,1k,10k", help=f"comma-separated, among {', '.join(SIZES)}")
    ap.add_argument("--brokers", default="rill,tansu")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--profile", type=Path)
    ap.add_argument("--baseline-src", type=Path,
                    help="also run a broker 'base' from this source tree (e.g. a git worktree of an older commit)")
    ap.add_argument("--quick", action="store_true", help="one round of 2 s per size")
    ap.add_argument("--compression", default="none", help="the producer's compression.type (none, lz4, zstd, ...)")
    ap.add_argument("--consumer-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="librdkafka setting for the consumer, e.g. fetch.queue.backoff.ms=10 (repeatable)")
    ap.add_argument("--producer-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="librdkafka setting for the producer, e.g. enable.idempotence=true (repeatable)")
    ap.add_argument("--base-override", action="append", default=[], metavar="KEY=VALUE",
                    help="broker setting for the 'base' broker only, e.g. socket.send.buffer.bytes=102400")
    args = ap.parse_args(argv)
    base_overrides = dict(item.split("=", 1) for item in args.base_override)
    if args.quick:
        args.rounds, args.seconds = 1, 2.0
    unknown = [s for s in args.sizes.split(",") if s not in SIZES]
    if unknown:
        ap.error(f"unknown size {', '.join(unknown)}: choose among {', '.join(SIZES)}")
    sizes = [(s, SIZES[s]) for s in args.sizes.split(",")]
    consumer_conf = dict(item.split("=", 1) for item in args.consumer_conf)
    producer_conf = dict(item.split("=", 1) for item in args.producer_conf)
    names = args.brokers.split(",")
    if args.baseline_src and "base" not in names:
        names.insert(1, "base")
    work = Path(tempfile.mkdtemp(prefix="rill-hotpath-"))
    targets: list[Target] = []
    try:
        for name in names:
            port = free_port()
            if name == "tansu":
                spec = tansu_spec(port)
            else:
                spec = rill_spec(port, work / f"data-{name}", base_overrides if name == "base" else None)
                if name == "base":
                    env = ("env", f"PYTHONPATH={args.baseline_src.resolve()}")
                    spec = BrokerSpec("base", env + spec.argv, spec.ready_marker, port, spec.data_dir)
            proc = BrokerProcess(spec, work / f"{name}.log")
            proc.start()
            targets.append(Target(name, proc))
        results: dict[tuple[str, str, str], list[float]] = {}
        for label, size in sizes:
            for rnd in range(args.rounds):
                for t in targets:
                    prof = args.profile if rnd == 0 else None
                    try:
                        p, c, cp, cc = one_round(t, size, args.seconds, prof, label, consumer_conf, args.compression,
                                                   producer_conf)
                    except RunFailed as e:
                        print(f"{t.name} {label}: failed: {e}", flush=True)
                        continue
                    results.setdefault((t.name, label, "produce"), []).append(p)
                    results.setdefault((t.name, label, "consume"), []).append(c)
                    results.setdefault((t.name, label, "produce cpu"), []).append(cp)
                    results.setdefault((t.name, label, "consume cpu"), []).append(cc)
                    print(f"{t.name:6} {label:5} produce {p:8.1f} MB/s ({cp:6.0f} us CPU/MB)"
                          f"  consume {c:8.1f} MB/s ({cc:6.0f} us CPU/MB)", flush=True)
        print("\nmedians (MB/s; broker CPU in us per MB):")
        print(f"{'size':6} {'':12} " + " ".join(f"{n:>8}" for n in names) + f"   {names[0]}/{names[-1]}")
        for label, _ in sizes:
            for d in ("produce", "consume", "produce cpu", "consume cpu"):
                meds = [statistics.median(results.get((n, label, d), [0.0]) or [0.0]) for n in names]
                ratio = f"   {meds[0] / meds[-1]:.2f}x" if len(meds) >= 2 and meds[-1] > 0 else ""
                print(f"{label:6} {d:12} " + " ".join(f"{m:8.1f}" for m in meds) + ratio)
        if args.profile:
            for f in sorted(args.profile.glob("*.txt")):
                print(render(f.name, summarize(f, top=25)))
    finally:
        for t in targets:
            t.admin = None  # drop the admin client first so it does not log the broker going away
            if t.broker is not None:
                t.broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
