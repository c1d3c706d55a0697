"""Runs the suite: start the brokers, measure the limits, pair every workload A/B/A/B, stop everything."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench import limits as raw_limits
from bench.brokers import BrokerProcess, BrokerUnavailable, free_port, rill_spec, tansu_spec
from bench.harness import RunFailed, Settings, Target
from bench.profiling import maybe_profile, render, summarize
from bench.report import Row
from bench.workloads import Workload

Log = Callable[[str], None]


def start_target(name: str, workdir: Path, log: Log) -> Target:
    """Start one broker; a broker that cannot start becomes a Target whose rows read n/a."""
    try:
        port = free_port()
        spec = tansu_spec(port) if name == "tansu" else rill_spec(port, workdir / "rill-data")
        broker = BrokerProcess(spec, workdir / f"{name}.log")
        seconds = broker.start()
    except BrokerUnavailable as e:
        log(f"{name} did not start: {e}")
        reason = str(e).replace(sys.executable, "python").split("; ")[0]
        return Target(name, None, unavailable=f"{name} did not start: {reason[:90]}")
    log(f"{name} ready on {broker.bootstrap} in {seconds:.2f}s (pid {broker.pid})")
    return Target(name, broker)


def _profile_path(wl: Workload, target: Target, settings: Settings, rnd: int) -> Path | None:
    """Where py-spy's collapsed stacks of this Rill run go (None: not profiled)."""
    if settings.profile_dir is None or target.name != "rill" or wl.rill_only is not None:
        return None
    return settings.profile_dir / f"{wl.name}-r{rnd + 1}.txt"


def run_suite(workloads: list[Workload], settings: Settings, targets: list[str], measure_limits: bool,
              log: Log) -> tuple[list[Row], dict[str, float]]:
    limits: dict[str, float] = {}
    running: dict[str, Target] = {}
    rows: list[Row] = []
    try:
        if measure_limits:
            limits = _measure_limits(settings, log)
        for name in ("rill", "tansu"):
            if name in targets:
                running[name] = start_target(name, settings.workdir, log)
            else:
                running[name] = Target(name, None, unavailable="not selected")
        for wl in workloads:
            rows += run_workload(wl, running, settings, log)
        if measure_limits and not settings.quick:
            again = _measure_limits(settings, log)
            limits = {k: (limits[k] + again[k]) / 2 for k in limits}
    finally:
        for target in running.values():
            target.admin = None  # drop the admin client first so it does not log the broker going away
            if target.broker is not None:
                target.broker.stop()
    return rows, limits


def _measure_limits(settings: Settings, log: Log) -> dict[str, float]:
    t0 = time.monotonic()
    limits = raw_limits.measure(settings.workdir / "limits", settings.quick)
    log(f"raw limits measured in {time.monotonic() - t0:.1f}s")
    return limits


def run_workload(wl: Workload, running: dict[str, Target], settings: Settings, log: Log) -> list[Row]:
    rows = [Row(wl.name, m) for m in wl.metrics]
    rill, tansu = running["rill"], running["tansu"]
    for row in rows:
        if rill.unavailable is not None:
            row.rill.na = rill.unavailable
        if wl.rill_only is not None:
            row.tansu.na = f"Rill only: {wl.rill_only}"
        elif tansu.unavailable is not None:
            row.tansu.na = tansu.unavailable
    order = [("rill", rill, [r.rill for r in rows]), ("tansu", tansu, [r.tansu for r in rows])]
    t0 = time.monotonic()
    for rnd in range(settings.rounds):
        for name, target, sides in order:
            if sides[0].na is not None:
                continue
            try:
                target.maybe_restart()
                profile = _profile_path(wl, target, settings, rnd)
                with maybe_profile(target.broker.pid if target.broker else None, profile):
                    figures = wl.run(target, settings)
                if profile is not None and profile.exists():
                    text = render(f"{wl.name} round {rnd + 1}", summarize(profile))
                    profile.with_suffix(".summary.txt").write_text(text + "\n")
                    log("\n".join(text.splitlines()[:7]))
            except (RunFailed, BrokerUnavailable) as e:
                reason = str(e)
                if target.broker is not None and not target.broker.alive():
                    reason = f"broker died: {target.broker.tail() or reason}"
                for side in sides:
                    side.failures.append(reason)
                log(f"  {wl.name} round {rnd + 1} {name}: FAILED {reason}")
                continue
            for row, side in zip(rows, sides, strict=True):
                value = figures.get(row.metric.key)
                if isinstance(value, str):
                    side.failures.append(value)
                elif value is not None:
                    side.runs.append(float(value))
            log(f"  {wl.name} round {rnd + 1} {name}: "
                + ", ".join(f"{k}={v:.4g}" if not isinstance(v, str) else f"{k} FAILED {v}"
                            for k, v in figures.items()))
    log(f"{wl.name} done in {time.monotonic() - t0:.1f}s")
    return rows


def machine() -> dict[str, object]:
    return {"cores": os.cpu_count(), "python": sys.version.split()[0], "platform": sys.platform}
