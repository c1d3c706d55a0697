"""A broker as ``python -m rill broker``; its log goes to ``broker.log`` in the data directory.

The broker's stdin is a pipe whose write end only the test process holds: when the test process
exits or dies without cleaning up (SIGKILL, SIGTERM, pytest-timeout's thread method), the kernel
closes the pipe, the broker sees end of file, stops and, when ``rill.testing`` created the data
directory, removes it (``rill broker --remove-on-stdin-eof``). A pipe rather than
``PR_SET_PDEATHSIG``, which fires when the *thread* that started the child ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess as sp
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from rill.testing._common import BrokerStartError, drop_in_forked_children, forget

READY_PREFIX = "rill broker ready on "


class ProcessRunner:
    def __init__(self, props: Mapping[str, str], data_dir: Path, *, remove_when_orphaned: bool,
                 command_prefix: Sequence[str] = ()) -> None:  # fmt: skip
        # A prefix (``ip netns exec NAME``) must exec the broker in place: its pid is the broker's.
        self._args = [*command_prefix, sys.executable, "-m", "rill", "broker", "--stop-on-stdin-eof"]
        if remove_when_orphaned:
            self._args += ["--remove-on-stdin-eof", str(data_dir)]
        for k, v in props.items():
            self._args += ["--override", f"{k}={v}"]
        self.log_path = data_dir / "broker.log"
        self._proc: sp.Popen[str] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def descriptors_to_drop_after_fork(self) -> list[int]:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdin.closed:
            return []
        return [proc.stdin.fileno()]

    def start(self, timeout: float) -> tuple[str, int]:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with open(self.log_path, "a") as log_file:
            # A session of its own: a terminal's Ctrl-C reaches the program that started the broker, which stops
            # it in order, not every process at once; the broker still stops when that program dies (stdin).
            self._proc = proc = sp.Popen(
                self._args, stdout=sp.PIPE, stderr=log_file, stdin=sp.PIPE, text=True, bufsize=1,
                start_new_session=True,
            )  # fmt: skip
        drop_in_forked_children(self)
        ready: list[tuple[str, int]] = []

        def read_ready() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith(READY_PREFIX):
                    host, _, port = line[len(READY_PREFIX) :].strip().rpartition(":")
                    ready.append((host, int(port)))
                    return

        reader = threading.Thread(target=read_ready, daemon=True)
        reader.start()
        reader.join(timeout)
        if ready:
            return ready[0]
        if reader.is_alive():
            self._terminate(signal.SIGKILL, 5.0)
            problem = f"broker did not announce itself within {timeout}s (startup_timeout)"
        else:  # stdout reached its end: the broker exited
            with contextlib.suppress(sp.TimeoutExpired):
                proc.wait(5.0)
            elapsed = time.monotonic() - started
            problem = f"broker {_exit_status(proc.returncode)} after {elapsed:.1f}s, before it was ready"
            self._terminate(signal.SIGKILL, 5.0)
        raise BrokerStartError(f"{problem}; log:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _terminate(self, sig: int, timeout: float) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.poll() is None:
                os.kill(proc.pid, sig)
                try:
                    proc.wait(timeout)
                except sp.TimeoutExpired:
                    proc.kill()
                    proc.wait(5.0)
        finally:
            # stdin only once the broker is gone: end of file on it tells the broker its parent is gone.
            forget(self)
            for pipe in (proc.stdout, proc.stdin):
                if pipe is not None:
                    pipe.close()

    def stop(self, timeout: float) -> None:
        started = time.monotonic()
        self._terminate(signal.SIGTERM, timeout)
        proc = self._proc
        if proc is not None and proc.returncode not in (0, None):
            elapsed = time.monotonic() - started
            raise RuntimeError(f"broker {_exit_status(proc.returncode)} after {elapsed:.1f}s; log:\n{self.log_tail()}")

    def kill(self) -> None:
        self._terminate(signal.SIGKILL, 10.0)


def _exit_status(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"
