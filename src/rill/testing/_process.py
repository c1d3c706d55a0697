"""A broker as ``python -m rill broker``; its log goes to ``broker.log`` in the data directory."""

from __future__ import annotations

import os
import signal
import subprocess as sp
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from rill.testing._common import BrokerStartError

READY_PREFIX = "rill broker ready on "


class ProcessRunner:
    def __init__(self, props: Mapping[str, str], data_dir: Path) -> None:
        self._args = [sys.executable, "-m", "rill", "broker"]
        for k, v in props.items():
            self._args += ["--override", f"{k}={v}"]
        self.log_path = data_dir / "broker.log"
        self._proc: sp.Popen[str] | None = None

    def start(self, timeout: float) -> tuple[str, int]:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as log_file:
            self._proc = proc = sp.Popen(
                self._args, stdout=sp.PIPE, stderr=log_file, stdin=sp.DEVNULL, text=True, bufsize=1
            )
        lines: list[str] = []
        ready: list[tuple[str, int]] = []

        def read_ready() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if line.startswith(READY_PREFIX):
                    host, _, port = line[len(READY_PREFIX) :].strip().rpartition(":")
                    ready.append((host, int(port)))
                    return

        reader = threading.Thread(target=read_ready, daemon=True)
        reader.start()
        reader.join(timeout)
        if not ready:
            self._terminate(signal.SIGKILL, 5.0)
            tail = self._log_tail()
            raise BrokerStartError(f"broker did not announce itself within {timeout}s; log:\n{tail}")
        return ready[0]

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _terminate(self, sig: int, timeout: float) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout)
        except sp.TimeoutExpired:
            proc.kill()
            proc.wait(5.0)
        finally:
            if proc.stdout is not None:
                proc.stdout.close()

    def stop(self, timeout: float) -> None:
        started = time.monotonic()
        self._terminate(signal.SIGTERM, timeout)
        proc = self._proc
        if proc is not None and proc.returncode not in (0, None):
            elapsed = time.monotonic() - started
            raise RuntimeError(
                f"broker exited with {proc.returncode} after {elapsed:.1f}s; log:\n{self._log_tail()}"
            )

    def kill(self) -> None:
        self._terminate(signal.SIGKILL, 10.0)
