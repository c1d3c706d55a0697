"""The README's first command, ``bash scripts/rill.sh broker``: it runs ``rill`` from a virtual environment
of its own (a system Python that refuses ``pip install``, PEP 668, is never installed into).

Run here without network installs: with the virtual environment of this test run, the script starts a
broker from it at once; with a new one, it makes the virtual environment and reports a failed install in
one line (pip is denied its index).
"""

from __future__ import annotations

import os
import re
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "rill.sh"
TIMEOUT_S = 60.0


def script_env(venv: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, RILL_VENV=str(venv), PIP_NO_INDEX="1", **extra)  # no network install, ever
    env.pop("VIRTUAL_ENV", None)
    return env


def test_the_readme_starts_with_the_script() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first = re.search(r"```sh\n(.*?)```", text, re.S)
    assert first is not None
    assert first.group(1).strip() == "bash scripts/rill.sh broker"


def test_the_script_starts_a_broker_from_its_virtual_environment(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            "bash",
            str(SCRIPT),
            "broker",
            "--stop-on-stdin-eof",
            "--override",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "--override",
            f"log.dirs={tmp_path / 'data'}",
        ],
        cwd=tmp_path,
        env=script_env(Path(sys.prefix)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], TIMEOUT_S)
        assert ready, "no ready line in time"
        line = proc.stdout.readline()
        assert line.startswith("rill broker ready on 127.0.0.1:"), (line, proc.poll())
        port = int(line.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        _, err = proc.communicate(timeout=TIMEOUT_S)  # stdin closes: the broker stops
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, err
    assert "rill.sh:" not in err  # nothing to set up: the environment has Rill
    assert "Broker stopped cleanly" in err
    assert not (tmp_path / "rill-data").exists()


def test_the_script_makes_a_virtual_environment_and_reports_a_failed_install(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", str(SCRIPT), "broker"],
        cwd=tmp_path,
        env=script_env(venv, PYTHON=base_python),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S * 2,
        check=False,
    )
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert lines[0] == f"rill.sh: creating a virtual environment in {venv} with {base_python}", lines
    assert lines[1] == f"rill.sh: installing Rill into {venv} (pip install -e .)", lines
    assert lines[-1] == f"rill.sh: pip install -e {ROOT} failed", lines
    assert (venv / "bin" / "python").exists()
    out = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--version"], capture_output=True, timeout=60)
    assert out.returncode == 0  # the environment has its own pip
    assert not (venv / ".rill-installed").exists()
    assert not (tmp_path / "rill-data").exists()
    assert time.monotonic() - started < TIMEOUT_S * 2
