"""Run a throwaway Rill broker from tests of Kafka applications.

    import confluent_kafka
    import rill.testing

    with rill.testing.broker() as b:
        producer = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers})

The broker listens on a free 127.0.0.1 port with a temporary data directory (removed afterwards).
By default it runs in a background thread with its own event loop; ``subprocess=True`` runs
``python -m rill broker`` instead, which is what you want for crash tests: ``kill()`` sends
SIGKILL. ``restart()`` stops the broker and starts it again on the same port and data.

Configs: ``broker({"log.retention.ms": "1000"})`` or ``broker(num_partitions=3)`` (``_`` stands
for ``.``). Test-friendly defaults are applied first and can be overridden: no initial rebalance
delay and 5 partitions for ``__consumer_offsets``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess as sp
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rill.config import BrokerConfig
from rill.network.event_loop import new_event_loop

TEST_DEFAULTS: dict[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
}
READY_PREFIX = "rill broker ready on "


class BrokerStartError(RuntimeError):
    """The broker did not come up; the message carries the end of its log when there is one."""


class TestBroker:
    """A broker started by ``rill.testing.broker``; see the module docstring."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        overrides: Mapping[str, str],
        *,
        subprocess: bool = False,
        data_dir: str | Path | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir if data_dir is not None else tempfile.mkdtemp(prefix="rill-test-"))
        self.subprocess = subprocess
        self.startup_timeout = startup_timeout
        self.overrides = {**TEST_DEFAULTS, **overrides}
        self.overrides.setdefault("listeners", "PLAINTEXT://127.0.0.1:0")
        self.overrides.setdefault("log.dirs", str(self.data_dir / "logs"))
        self.host = "127.0.0.1"
        self.port = 0
        self._runner: _ThreadRunner | _ProcessRunner | None = None

    # ------------------------------------------------------------------ public

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._runner is not None

    @property
    def broker(self) -> Any:
        """The in-process ``rill.broker.Broker`` (thread mode only)."""
        if not isinstance(self._runner, _ThreadRunner):
            raise RuntimeError("the broker object is only reachable in thread mode")
        return self._runner.broker

    def start(self) -> TestBroker:
        if self._runner is not None:
            raise RuntimeError("broker already running")
        props = dict(self.overrides)
        if self.port:  # a restart keeps its port so clients reconnect to the same address
            props["listeners"] = f"PLAINTEXT://{self.host}:{self.port}"
        config = BrokerConfig.from_properties(props)
        runner: _ThreadRunner | _ProcessRunner
        runner = _ProcessRunner(props, self.data_dir) if self.subprocess else _ThreadRunner(config)
        self.host, self.port = runner.start(self.startup_timeout)
        self._runner = runner
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop cleanly (requests finish, logs flushed, clean-shutdown marker written)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.stop(timeout)

    def kill(self) -> None:
        """Stop abruptly: SIGKILL in subprocess mode; in thread mode connections drop, nothing is flushed."""
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.kill()

    def restart(self, *, kill: bool = False) -> None:
        """Stop (or ``kill=True``: kill) and start again on the same port and data directory."""
        if kill:
            self.kill()
        else:
            self.stop()
        self.start()

    def close(self) -> None:
        """Stop if running and remove the temporary data directory."""
        try:
            self.stop()
        finally:
            if self._own_dir:
                shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> TestBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "subprocess" if self.subprocess else "thread"
        return f"TestBroker({self.bootstrap_servers}, {mode}, running={self.running})"


@contextlib.contextmanager
def broker(
    overrides: Mapping[str, Any] | None = None,
    *,
    subprocess: bool = False,
    data_dir: str | Path | None = None,
    startup_timeout: float = 30.0,
    **configs: Any,
) -> Iterator[TestBroker]:
    """Start a broker on a free 127.0.0.1 port; it is stopped and its data removed on exit."""
    props = {str(k): _text(v) for k, v in (overrides or {}).items()}
    props.update({k.replace("_", "."): _text(v) for k, v in configs.items()})
    b = TestBroker(props, subprocess=subprocess, data_dir=data_dir, startup_timeout=startup_timeout)
    try:
        b.start()
        yield b
    finally:
        b.close()


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class _ThreadRunner:
    """The broker on its own event loop in a daemon thread."""

    def __init__(self, config: BrokerConfig) -> None:
        from rill.broker import Broker

        self.broker = Broker(config)
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rill-test-broker", daemon=True)

    def start(self, timeout: float) -> tuple[str, int]:
        self._thread.start()
        try:
            self._call(self.broker.start(), timeout)
        except BaseException as e:
            self._shutdown_loop()
            raise BrokerStartError(f"broker did not start: {e}") from e
        host, port = self.broker.bound_address
        return str(host), int(port)

    def _call(self, coro: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self, timeout: float) -> None:
        try:
            self._call(self.broker.stop(), timeout)
        finally:
            self._shutdown_loop()

    def kill(self) -> None:
        server = getattr(self.broker, "_server", None)
        if server is not None:
            with contextlib.suppress(Exception):
                self._call(server.stop(timeout=0), 5.0)
        self._shutdown_loop()
        if self.broker.log_manager is not None:
            self.broker.log_manager.release_dir_locks()  # as the kernel does for a process that dies

    def _shutdown_loop(self) -> None:
        loop = self._loop
        if loop.is_closed():
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self._call(cancel_all(), 5.0)
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(10.0)
        if not loop.is_running():
            loop.close()


class _ProcessRunner:
    """The broker as ``python -m rill broker``; its log goes to ``broker.log`` in the data directory."""

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
