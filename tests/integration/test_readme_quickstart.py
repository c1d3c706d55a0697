"""The README's quickstart, run as written against a throwaway broker.

The shell blocks of the "quickstart" section are executed line by line (``rill broker`` is replaced by the
test's own broker, and every ``rill`` command is pointed at it). Each line must succeed, and what the
quickstart echoes into ``rill produce`` must come back out of ``rill consume``.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)

README = Path(__file__).resolve().parents[2] / "README.md"
ALLOWED_PROGRAMS = {"rill", "echo", "printf", "seq", "cat", "head", "sort"}


def quickstart_lines() -> list[str]:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"^##+ [^\n]*quickstart[^\n]*\n(.*?)(?=^## )", text, re.S | re.M | re.I)
    assert match, "README has no quickstart section"
    blocks = re.findall(r"```(?:sh|bash|shell|console)\n(.*?)```", match.group(1), re.S)
    lines = []
    for block in blocks:
        for raw in block.splitlines():
            line = raw.strip()
            if line.startswith("$ "):
                line = line[2:]
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def programs(line: str) -> list[str]:
    return [shlex.split(segment)[0] for segment in line.split("|") if segment.strip()]


def test_quickstart_uses_only_rill_commands() -> None:
    lines = quickstart_lines()
    assert any(line.startswith("rill ") and not line.startswith("rill broker") for line in lines)
    for line in lines:
        assert set(programs(line)) <= ALLOWED_PROGRAMS, line


def test_quickstart_runs() -> None:
    testing = pytest.importorskip("rill.testing")
    lines = [ln for ln in quickstart_lines() if set(programs(ln)) <= ALLOWED_PROGRAMS and "rill" in programs(ln)]
    servers = [ln for ln in lines if ln.startswith("rill console")]
    runnable = [ln for ln in lines if not ln.startswith(("rill broker", "rill console"))]
    if not runnable:
        pytest.skip("the README quickstart has no rill client commands yet")
    with testing.broker({}) as broker:
        prelude = (
            f'rill() {{ {shlex.quote(sys.executable)} -m rill "$@" '
            f"--bootstrap-server {shlex.quote(broker.bootstrap_servers)}; }}\n"
        )
        outputs = []
        for line in runnable:
            proc = subprocess.run(["bash", "-c", prelude + "set -o pipefail\n" + line], capture_output=True, timeout=60)
            assert proc.returncode == 0, (line, proc.stderr.decode())
            assert b"Traceback" not in proc.stderr, (line, proc.stderr.decode())
            outputs.append(proc.stdout.decode())
        produced = [
            shlex.split(ln.split("|")[0])[1] for ln in runnable if "rill produce" in ln and ln.startswith("echo ")
        ]
        consumed = "".join(out for ln, out in zip(runnable, outputs, strict=True) if "rill consume" in ln)
        for value in produced:
            assert value in consumed, (value, consumed)
        for line in servers:  # served until stopped: started on a free port, asked for its first page
            args = [*shlex.split(line)[1:], "--bootstrap-server", broker.bootstrap_servers, "--listen", "127.0.0.1:0"]
            server = subprocess.Popen([sys.executable, "-m", "rill", *args], stdout=subprocess.PIPE, text=True)
            try:
                assert server.stdout is not None
                ready = server.stdout.readline()
                assert ready.startswith("rill console ready on "), (line, ready)
                with urllib.request.urlopen(ready.split()[-1] + "/topics", timeout=30) as page:
                    assert page.status == 200 and b"greetings" in page.read()
            finally:
                server.terminate()
                server.wait(15)
