"""What the ``rill`` commands say when they fail: one line with the message (no exception class names),
the cause (a missing file is "No such file", not "not a .log file"), and exit status 2 for a usage error
(a malformed argument), 1 for the rest, as docs/OPERATIONS.md says."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import rill.testing


def run_rill(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rill", *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False
    )


def one_line_error(proc: subprocess.CompletedProcess[str], code: int) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


def test_dump_log_of_a_missing_file_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    proc = run_rill("dump-log", str(missing))
    assert one_line_error(proc, 1) == f"error: cannot read {missing}: No such file or directory"
    assert "not a .log" not in proc.stdout


def test_dump_log_usage_errors_are_one_line_exit_2() -> None:
    assert "PATH" in one_line_error(run_rill("dump-log"), 2)
    assert "--bogus" in one_line_error(run_rill("dump-log", "--bogus", "x.log"), 2)


def test_errors_name_no_exception_class() -> None:
    """A failure the command does not word itself (here from the client of ``pipeline audit``) is printed
    as its message; it was ``error: KafkaError: ...`` and ``error: NetworkError: ...``."""
    with rill.testing.broker() as b:
        line = one_line_error(
            run_rill("pipeline", "audit", "--bootstrap-server", b.bootstrap_servers, "--output", "x"), 4
        )
    assert line == "error: audit: the output directory x does not exist: nothing was loaded there"
    with rill.testing.broker() as b:
        port = b.bootstrap_servers.rpartition(":")[2]
    with tempfile.TemporaryDirectory() as out:
        line = one_line_error(
            run_rill("pipeline", "audit", "--bootstrap-server", f"127.0.0.1:{port}", "--output", out), 1
        )
    assert line.startswith("error: no bootstrap server reachable: cannot connect to 127.0.0.1:"), line
    assert "Error:" not in line


def test_malformed_arguments_are_usage_errors() -> None:
    """Caught before any broker is contacted, with status 2."""
    assert "expected HOST:PORT" in one_line_error(run_rill("topics", "list", "--bootstrap-server", "nohost"), 2)
    assert "port is not a number" in one_line_error(run_rill("topics", "list", "--bootstrap-server", "h:x"), 2)
    assert "must be at least 1" in one_line_error(run_rill("topics", "create", "t", "--partitions", "0"), 2)
    assert "invalid --partition -1" in one_line_error(run_rill("produce", "t", "--partition", "-1"), 2)
    proc = run_rill("topics", "create", "t", "--replication-factor", "0", "--bootstrap-server", "127.0.0.1:1")
    assert "must be at least 1" in one_line_error(proc, 2)
    for args in (
        ["configs", "alter", "--entity-type", "topics", "--entity-name", "t"],
        [
            "configs",
            "alter",
            "--entity-type",
            "topics",
            "--entity-name",
            "t",
            "--add-config",
            "a=1",
            "--delete-config",
            "a",
        ],
        ["configs", "alter", "--entity-type", "topics", "--add-config", "retention.ms=1"],
        ["configs", "describe", "--entity-type", "brokers", "--entity-name", "x"],
        ["configs", "alter", "--entity-type", "brokers", "--entity-name", "0", "--add-config", "novalue"],
        ["topics", "alter-config", "t"],
        ["topics", "create", "t", "--config", "novalue"],
    ):
        line = one_line_error(run_rill(*args, "--bootstrap-server", "127.0.0.1:1", "--timeout", "1"), 2)
        assert "cannot reach" not in line, (args, line)


def test_consume_usage_errors_exit_2() -> None:
    """Caught before any broker is contacted, with status 2, as every other command's usage errors."""
    for args, text in (
        (["--offset", "soon"], "invalid --offset"),
        (["--format", "%q"], "invalid --format token"),
        (["--partition", "0", "--group", "g"], "cannot be combined with --group"),
        (["--count", "-3"], "invalid --count"),
        (["--json", "--format", "%s"], "cannot be combined"),
    ):
        assert text in one_line_error(run_rill("consume", "t", "--bootstrap-server", "127.0.0.1:1", *args), 2)
