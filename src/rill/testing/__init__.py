"""Run a throwaway Rill broker from tests of Kafka applications.

    import confluent_kafka
    import rill.testing

    with rill.testing.broker() as b:
        producer = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers})

The broker listens on a free 127.0.0.1 port with a temporary data directory (removed afterwards).
By default it runs in a background thread with its own event loop (``_thread``); ``subprocess=True``
runs ``python -m rill broker`` instead (``_process``), which is what you want for crash tests:
``kill()`` sends SIGKILL. ``restart()`` stops the broker and starts it again on the same port and
data. A subprocess broker never outlives the test process: if that dies without cleaning up, the
broker stops and removes the temporary data directory itself.

Configs: ``broker({"log.retention.ms": "1000"})`` or ``broker(num_partitions=3)`` (``_`` stands
for ``.``); a name that is not a broker config is refused (``_configs``). Test-friendly defaults
are applied first and can be overridden: no initial rebalance delay and 5 partitions for
``__consumer_offsets``.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rill.config import BrokerConfig
from rill.testing._common import BrokerStartError
from rill.testing._configs import OPTIONS, broker_configs, check_name
from rill.testing._process import READY_PREFIX

if TYPE_CHECKING:
    from rill.testing._process import ProcessRunner
    from rill.testing._thread import ThreadRunner

__all__ = ["OPTIONS", "READY_PREFIX", "TEST_DEFAULTS", "BrokerStartError", "TestBroker", "broker", "broker_configs"]

TEST_DEFAULTS: dict[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
}


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
        command_prefix: Sequence[str] = (),
    ) -> None:
        for name in overrides:
            check_name(name)  # before anything is created
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir if data_dir is not None else tempfile.mkdtemp(prefix="rill-test-"))
        self.subprocess = subprocess
        self.startup_timeout = startup_timeout
        self.command_prefix = list(command_prefix)  # subprocess mode: e.g. ``ip netns exec NAME``
        self.overrides = {**TEST_DEFAULTS, **overrides}
        self.overrides.setdefault("listeners", "PLAINTEXT://127.0.0.1:0")
        self.overrides.setdefault("log.dirs", str(self.data_dir / "logs"))
        self.host = "127.0.0.1"
        self.port = 0
        self._runner: ThreadRunner | ProcessRunner | None = None
        self._bound_listeners: dict[str, tuple[str, int]] = {}

    # ------------------------------------------------------------------ public

    @property
    def pid(self) -> int | None:
        """The broker process's id (subprocess mode, once started)."""
        from rill.testing._process import ProcessRunner

        runner = self._runner
        return runner.pid if isinstance(runner, ProcessRunner) else None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def listener_address(self, name: str) -> str:
        """``host:port`` of the listener ``name`` (thread mode; the first listener is ``bootstrap_servers``)."""
        host, port = self.broker.bound_addresses[name.upper()]
        return f"{host}:{port}"

    @property
    def running(self) -> bool:
        return self._runner is not None

    @property
    def broker(self) -> Any:
        """The in-process ``rill.broker.Broker`` (thread mode only)."""
        from rill.testing._thread import ThreadRunner

        if not isinstance(self._runner, ThreadRunner):
            raise RuntimeError("the broker object is only reachable in thread mode")
        return self._runner.broker

    @property
    def log_path(self) -> Path | None:
        """The broker's log file (subprocess mode; a thread-mode broker logs through ``logging``)."""
        return self.data_dir / "broker.log" if self.subprocess else None

    def log_tail(self, lines: int = 300) -> str:
        """The last ``lines`` lines of the broker's log ("" when there is none)."""
        path = self.log_path
        if path is None:
            return ""
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def start(self) -> TestBroker:
        if self._runner is not None:
            raise RuntimeError("broker already running")
        props = dict(self.overrides)
        if self.port:  # a restart keeps its ports so clients reconnect to the same addresses
            props["listeners"] = self._listeners_again(props)
        config = BrokerConfig.from_properties(props)
        runner: ThreadRunner | ProcessRunner
        if self.subprocess:
            from rill.testing._process import ProcessRunner

            runner = ProcessRunner(props, self.data_dir, remove_when_orphaned=self._own_dir,
                                   command_prefix=self.command_prefix)  # fmt: skip
        else:
            from rill.testing._thread import ThreadRunner

            runner = ThreadRunner(config)
        self.host, self.port = runner.start(self.startup_timeout)
        self._runner = runner
        if not self.subprocess:
            self._bound_listeners = dict(self.broker.bound_addresses)
        return self

    def _listeners_again(self, props: Mapping[str, str]) -> str:
        """``listeners`` with the ports bound before: every listener's in thread mode, the first one's in
        subprocess mode (the others get free ports again)."""
        from rill.config import BrokerConfig

        bound = dict(self._bound_listeners)
        endpoints = BrokerConfig.from_properties(props).listeners
        bound.setdefault(endpoints[0].listener_name, (self.host, self.port))
        out = []
        for ep in endpoints:
            host, port = bound.get(ep.listener_name, (ep.host, ep.port))
            out.append(f"{ep.listener_name}://{host}:{port}")
        return ",".join(out)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop cleanly (requests finish, logs flushed, clean-shutdown marker written)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.stop(timeout)

    def kill(self) -> None:
        """Stop abruptly, as a crash: SIGKILL in subprocess mode; in thread mode connections drop and
        every file is closed without a flush or a clean-shutdown marker (the next start recovers)."""
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
    """Start a broker on a free 127.0.0.1 port; it is stopped and its data removed on exit.

    ConfigError (before anything starts) names a config that is not a broker config."""
    props = broker_configs(overrides, **configs)
    b = TestBroker(props, subprocess=subprocess, data_dir=data_dir, startup_timeout=startup_timeout)
    try:
        b.start()
        yield b
    finally:
        b.close()
