"""`python -m bench`: run the benchmark suite (Rill beside Tansu beside the machine's raw limits)."""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import Settings
from bench.report import render_limits, render_table, to_json, write_json
from bench.suite import machine, run_suite
from bench.workloads import Workload, catalogue

SETTINGS_REPORTED = ("quick", "rounds", "produce_seconds", "prefill_bytes", "latency_seconds",
                     "restart_bytes")


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="short runs, one A/B pair (under 3 minutes)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="workloads to run: a name, a prefix (produce, consume-10k) or a glob; repeatable, "
                         "comma-separated")
    ap.add_argument("--json", type=Path, metavar="PATH", help="write all runs and medians as JSON")
    ap.add_argument("--list", action="store_true", help="list workload names and exit")
    ap.add_argument("--rounds", type=int, help="A/B pairs per workload (default 3, quick 1)")
    ap.add_argument("--targets", default="rill,tansu", help="brokers to run: rill,tansu (default both)")
    ap.add_argument("--seconds", type=float, help="duration of each throughput run")
    ap.add_argument("--no-limits", action="store_true", help="skip measuring the raw limits")
    ap.add_argument("--workdir", type=Path, help="where broker data and logs go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory afterwards")
    ap.add_argument("--profile", type=Path, metavar="DIR",
                    help="sample the Rill broker with py-spy during every Rill run: collapsed stacks and a "
                         "summary of where the time goes, into DIR")
    ap.add_argument("--prefill-mib", type=int, default=None,
                    help="MiB written before each consume run (default 512, quick 128)")
    return ap.parse_args(argv)


def select(workloads: list[Workload], patterns: list[str], quick: bool) -> list[Workload]:
    names = [p.strip() for arg in patterns for p in arg.split(",") if p.strip()]
    if not names:
        return [w for w in workloads if w.in_quick or not quick]
    chosen = []
    for w in workloads:
        if any(fnmatch.fnmatch(w.name, n) or w.name == n or w.name.startswith(n + "-") for n in names):
            chosen.append(w)
    return chosen


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    quick: bool = args.quick
    restart_bytes = (256 if quick else 1024) << 20
    workloads = select(catalogue(restart_bytes), args.only, quick)
    if args.list:
        for w in workloads:
            print(f"{w.name:28} {', '.join(m.label for m in w.metrics)}")
        return 0
    if not workloads:
        print(f"no workload matches {args.only}; see --list", file=sys.stderr)
        return 2
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if unknown := set(targets) - {"rill", "tansu"}:
        print(f"unknown targets {sorted(unknown)}", file=sys.stderr)
        return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rill-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    settings = Settings(
        quick=quick,
        rounds=args.rounds or (1 if quick else 3),
        produce_seconds=args.seconds or (1.0 if quick else 5.0),
        prefill_bytes=(args.prefill_mib or (128 if quick else 512)) << 20,
        latency_seconds=2.0 if quick else 10.0,
        flush_seconds=10.0 if quick else 60.0,
        restart_bytes=restart_bytes,
        workdir=workdir,
        profile_dir=args.profile,
    )
    # SIGTERM unwinds like Ctrl-C so every broker and worker is stopped by the `finally` blocks.
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.monotonic()
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    try:
        rows, limits = run_suite(workloads, settings, targets, not args.no_limits, log)
    except KeyboardInterrupt:
        log("interrupted; brokers stopped")
        return 130
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.monotonic() - started
    command = "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv)
    meta = {"date": date, "command": command.strip(), "machine": machine(), "seconds": elapsed,
            "settings": {k: getattr(settings, k) for k in SETTINGS_REPORTED}}
    print(f"Rill benchmark suite, {date}, {machine()['cores']} cores, `{meta['command']}` "
          f"({settings.rounds} A/B round(s), medians), {elapsed:.0f}s")
    print(f"Raw limits: {render_limits(limits)}")
    print()
    print(render_table(rows, limits))
    if args.json:
        write_json(args.json, to_json(rows, limits, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
