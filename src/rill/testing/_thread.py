"""A broker on its own event loop in a daemon thread of the test process.

Everything it takes is given back: a failed or timed-out start releases the listener, the metrics
port, the open logs and the log dirs' locks; ``kill`` closes every file, as the kernel does for a
process that dies, without a flush or a clean-shutdown marker; a process forked from the test
process lets go of the listening sockets (``_common``); and the soft limit on open files that
brokers raise (``rill.fsutil.raise_open_files_limit``) is put back when the last thread-mode broker
of the process stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import threading
from typing import Any

from rill.broker import Broker
from rill.config import BrokerConfig
from rill.fsutil import open_files_ceiling
from rill.network.event_loop import new_event_loop
from rill.testing._common import BrokerStartError, drop_in_forked_children, forget


class ThreadRunner:
    def __init__(self, config: BrokerConfig) -> None:
        self.broker = Broker(config)
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rill-test-broker", daemon=True)

    def start(self, timeout: float) -> tuple[str, int]:
        _OPEN_FILES.acquire()
        self._thread.start()
        try:
            # The start times itself out on the loop, so a cancelled start still releases what it took.
            self._call(self._start(timeout), timeout + 30.0)
        except BaseException as e:
            self._shutdown_loop()
            self.broker.release_files()  # in case the loop could not
            _OPEN_FILES.release()
            if isinstance(e, BrokerStartError):
                raise
            raise BrokerStartError(f"broker did not start: {str(e) or type(e).__name__}") from e
        drop_in_forked_children(self)
        host, port = self.broker.bound_address
        return str(host), int(port)

    async def _start(self, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout) as deadline:
                await self.broker.start()
        except TimeoutError:
            if not deadline.expired():
                raise
            raise BrokerStartError(
                f"broker did not start within {timeout}s (startup_timeout): it was still {self.broker.step}"
            ) from None

    def _call(self, coro: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def descriptors_to_drop_after_fork(self) -> list[int]:
        return self.broker.socket_fds()

    def stop(self, timeout: float) -> None:
        forget(self)
        try:
            self._call(self.broker.stop(), timeout)
        finally:
            self._shutdown_loop()
            self.broker.release_files()  # a stop that did not finish leaves no file open
            _OPEN_FILES.release()

    def kill(self) -> None:
        """Stop as a crash would (see ``Broker.abort``)."""
        forget(self)
        try:
            with contextlib.suppress(Exception):
                self._call(self.broker.abort(), 10.0)
            self._shutdown_loop()
            self.broker.release_files()
        finally:
            _OPEN_FILES.release()

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


class _OpenFilesLimit:
    """Counts the running thread-mode brokers; the soft limit on open files they found is put back
    when the last one stops (if it is still what the brokers raised it to)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._before = 0

    def acquire(self) -> None:
        with self._lock:
            if self._users == 0:
                self._before = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users > 0:
                return
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            if soft != self._before and soft == open_files_ceiling():
                with contextlib.suppress(OSError, ValueError):
                    resource.setrlimit(resource.RLIMIT_NOFILE, (self._before, hard))


_OPEN_FILES = _OpenFilesLimit()
