"""Results of a suite run: per-row medians, Rill/Tansu ratios, fractions of the raw limits, table and JSON."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.workloads import MB, Metric

LIMIT_NAMES = {"produce": "min(tcp copy, os.write)", "consume": "sendfile", "rtt": "loopback RTT p99"}


@dataclass(slots=True)
class Side:
    """One broker's runs of one metric. `na` set means the broker had no figure at all, and why."""

    runs: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    na: str | None = None

    def median(self) -> float | None:
        return statistics.median(self.runs) if self.runs and self.na is None else None

    def cell(self) -> str:
        if self.na is not None:
            return f"n/a ({self.na})"
        med = self.median()
        if med is None:
            return f"n/a (failed: {self.failures[0]})" if self.failures else "not measured in this mode"
        text = fmt(med)
        if self.failures:
            text += f" ({len(self.runs)}/{len(self.runs) + len(self.failures)} runs ok)"
        return text


@dataclass(slots=True)
class Row:
    workload: str
    metric: Metric
    rill: Side = field(default_factory=Side)
    tansu: Side = field(default_factory=Side)

    def ratio(self) -> float | None:
        """Rill against Tansu, oriented so that > 1 means Rill is better."""
        r, t = self.rill.median(), self.tansu.median()
        if not self.metric.compared or r is None or t is None or r <= 0 or t <= 0:
            return None
        return r / t if self.metric.higher_is_better else t / r


def limit_value(metric: Metric, limits: dict[str, float]) -> float | None:
    # The reused-pages write is the machine's upper bound; a growing log usually gets less (`write_new`).
    if metric.limit == "produce" and "tcp_copy" in limits and "write" in limits:
        return min(limits["tcp_copy"], limits["write"])
    if metric.limit == "consume":
        return limits.get("sendfile")
    if metric.limit == "rtt":
        return limits.get("rtt_p99_ms")
    return None


def limit_fraction(metric: Metric, value: float | None, limits: dict[str, float]) -> float | None:
    """The figure as a fraction of its raw limit (1.0 = as fast as the machine allows)."""
    limit = limit_value(metric, limits)
    if value is None or limit is None or value <= 0:
        return None
    if metric.limit == "rtt":
        return limit / value
    return value * MB / limit


def fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _frac(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 0.01:
        return f"{value * 100:.2g}%"
    return f"{value:.1%}" if value < 10 else f"{value:.1f}x"


def render_limits(limits: dict[str, float]) -> str:
    parts = []
    for key, label in (("tcp_copy", "loopback TCP copy"), ("sendfile", "sendfile page cache -> socket"),
                       ("write", "sequential os.write (reused pages)"),
                       ("write_new", "sequential os.write (new pages)")):
        if key in limits:
            parts.append(f"{label} {limits[key] / MB:,.0f} MB/s")
    if "rtt_p99_ms" in limits:
        parts.append(f"loopback 1 KiB round trip p99 {limits['rtt_p99_ms']:.3f} ms")
    return "; ".join(parts) if parts else "not measured"


def render_table(rows: list[Row], limits: dict[str, float]) -> str:
    header = ("| workload | unit | Rill | Tansu | Rill vs Tansu (>1 = Rill better) | Rill / limit "
              "| Tansu / limit | limit |")
    lines = [header, "|" + "---|" * 8]
    for row in rows:
        m = row.metric
        ratio = row.ratio()
        limit = limit_value(m, limits)
        limit_text = "-" if limit is None else (
            f"{LIMIT_NAMES[m.limit or '']} {fmt(limit)} ms" if m.limit == "rtt"
            else f"{LIMIT_NAMES[m.limit or '']} {limit / MB:,.0f} MB/s")
        lines.append(
            f"| {m.label} | {m.unit}{'' if m.higher_is_better else ' (lower is better)'} "
            f"| {row.rill.cell()} | {row.tansu.cell()} "
            f"| {'-' if ratio is None else f'{ratio:.2f}x'} "
            f"| {_frac(limit_fraction(m, row.rill.median(), limits))} "
            f"| {_frac(limit_fraction(m, row.tansu.median(), limits))} | {limit_text} |")
    return "\n".join(lines)


def to_json(rows: list[Row], limits: dict[str, float], meta: dict[str, Any]) -> dict[str, Any]:
    def side(s: Side) -> dict[str, Any]:
        return {"runs": s.runs, "median": s.median(), "failures": s.failures, "na": s.na}

    return {
        **meta,
        "limits": limits,
        "rows": [{
            "workload": r.workload, "metric": r.metric.key, "label": r.metric.label, "unit": r.metric.unit,
            "higher_is_better": r.metric.higher_is_better, "rill": side(r.rill), "tansu": side(r.tansu),
            "ratio": r.ratio(), "limit": r.metric.limit,
            "rill_limit_fraction": limit_fraction(r.metric, r.rill.median(), limits),
            "tansu_limit_fraction": limit_fraction(r.metric, r.tansu.median(), limits),
        } for r in rows],
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
