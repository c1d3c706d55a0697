"""Plumbing the workloads share: the target broker, worker processes, topic setup and cleanup."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bench.brokers import BrokerProcess, BrokerUnavailable

WORKER_GRACE_S = 30.0


class RunFailed(Exception):
    """One run of one workload failed; the message goes into the report in place of a figure."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Sizes and durations of one suite run (quick or full)."""

    quick: bool
    rounds: int
    produce_seconds: float
    prefill_bytes: int
    latency_seconds: float
    restart_bytes: int
    flush_seconds: float
    workdir: Path
    profile_dir: Path | None = None


@dataclass(slots=True)
class Target:
    """A broker under test, as the workloads see it (mutable: it may be restarted between runs)."""

    name: str
    broker: BrokerProcess | None
    unavailable: str | None = None
    admin: AdminClient | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        assert self.broker is not None
        return self.broker.bootstrap

    def client(self) -> AdminClient:
        if self.admin is None:
            self.admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        return self.admin

    def maybe_restart(self) -> None:
        """Restart the broker if it died during an earlier run; raise RunFailed if it cannot come back."""
        if self.unavailable is not None or self.broker is None:
            raise RunFailed(self.unavailable or "no broker")
        if self.broker.alive():
            return
        tail = self.broker.tail()
        self.admin = None
        try:
            self.broker.start()
        except BrokerUnavailable as e:
            self.unavailable = f"died ({tail}); restart failed: {e}"
            raise RunFailed(self.unavailable) from e


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process and its threads so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def rss_kib(pid: int) -> int:
    """A process's resident memory (VmRSS), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class BrokerCpu:
    """Broker CPU time spent between ``__init__`` and ``per_mb``: microseconds per MB moved."""

    def __init__(self, target: Target) -> None:
        self._pid = target.broker.pid if target.broker is not None else None
        self._start = self._now()

    def _now(self) -> float | None:
        if self._pid is None:
            return None
        try:
            return sum(cpu_seconds(self._pid))
        except (OSError, IndexError, ValueError):
            return None

    def per_mb(self, nbytes: float) -> float | str:
        end = self._now()
        if self._start is None or end is None or nbytes <= 0:
            return "broker CPU time not readable"
        return (end - self._start) * 1e6 / (nbytes / 1e6)


def topic_name(workload: str) -> str:
    return f"bench-{workload}-{uuid.uuid4().hex[:8]}"


def create_topic(target: Target, name: str, partitions: int, timeout: float = 60.0) -> float:
    """Create a topic and wait until its metadata shows every partition with a leader; returns seconds."""
    admin = target.client()
    t0 = time.monotonic()
    futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=timeout,
                                  request_timeout=timeout)
    try:
        futures[name].result(timeout)
    except Exception as e:
        raise RunFailed(f"create topic with {partitions} partitions: {e}") from e
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            meta = admin.list_topics(name, timeout=5).topics.get(name)
            if meta is not None and meta.error is None and len(meta.partitions) == partitions and all(
                    p.leader >= 0 for p in meta.partitions.values()):
                return time.monotonic() - t0
        time.sleep(0.02)
    raise RunFailed(f"topic {name} not ready after {timeout:.0f}s")


def maybe_delete_topic(target: Target, name: str) -> None:
    """Best effort: free the broker's memory/disk after a run; a broker without DeleteTopics is fine."""
    if target.admin is None or target.broker is None or not target.broker.alive():
        return
    with contextlib.suppress(Exception):
        target.admin.delete_topics([name], operation_timeout=10, request_timeout=10)[name].result(15)


class WorkerProc:
    """A `python -m bench.worker` child process; its stdout carries READY and RESULT lines."""

    def __init__(self, kind: str, params: dict[str, Any]) -> None:
        self.kind = kind
        root = Path(__file__).resolve().parent.parent
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root),
                                                                         os.environ.get("PYTHONPATH")]))}
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in kill())
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.worker", kind, json.dumps(params)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._stderr, env=env, start_new_session=True)
        self._buf = b""
        self._lines: list[str] = []

    def _read_lines(self, deadline: float) -> bool:
        """Read what stdout has until `deadline`; False once stdout is closed."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            timeout = max(0.0, deadline - time.monotonic())
            if not sel.select(timeout):
                return True
            chunk = os.read(fd, 65536)
        if not chunk:
            return False
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        self._lines += [line.decode("utf-8", "replace") for line in lines]
        return True

    def wait_for(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            for i, line in enumerate(self._lines):
                if line.startswith(prefix):
                    del self._lines[: i + 1]
                    return line[len(prefix):].strip()
            if time.monotonic() >= deadline:
                self.kill()
                raise RunFailed(f"{self.kind} worker: no {prefix.strip()} within {timeout:.0f}s")
            if not self._read_lines(deadline):
                err = self._stderr_tail()
                self.kill()
                raise RunFailed(f"{self.kind} worker exited without {prefix.strip()}: {err}")

    def result(self, timeout: float) -> dict[str, Any]:
        raw = self.wait_for("RESULT ", timeout)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        self.kill()
        out: dict[str, Any] = json.loads(raw)
        if out.get("failed"):
            raise RunFailed(f"{self.kind}: {'; '.join(out.get('errors', []))}")
        return out

    def _stderr_tail(self) -> str:
        with contextlib.suppress(Exception):
            self.proc.wait(2)
        self._stderr.seek(0)
        text = self._stderr.read().decode("utf-8", "replace")
        lines = [line for line in text.splitlines() if line.strip()]
        return lines[-1][:200] if lines else f"exit code {self.proc.returncode}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
            self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()


def run_worker(kind: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    worker = WorkerProc(kind, params)
    try:
        return worker.result(timeout)
    finally:
        worker.kill()


def check_errors(result: dict[str, Any], what: str) -> None:
    """A run whose client saw errors or lost records does not count as a figure."""
    errors = result.get("errors") or []
    if errors:
        raise RunFailed(f"{what}: {errors[0]}")
