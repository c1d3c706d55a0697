"""A ZooKeeper client that fails, holds or delays chosen calls, for tests of races with ZooKeeper.

``FaultyKazooClient(client)`` wraps a started ``KazooClient`` and passes every call through, except the calls a
:class:`ZkFault` names (a method such as ``"set"`` and a path, or a predicate on the path), which it:

- ``hold``: blocks in the calling thread (brokers call ZooKeeper from worker threads) until the test calls
  ``release()``; ``wait()`` returns once one is held, so the test acts while the write is in flight;
- ``fail``: raises an exception (``ConnectionLoss`` by default) without making the call;
- ``apply_then_fail``: makes the call, then raises ``ConnectionLoss``: the ambiguous outcome of a write whose
  answer was lost with the connection;
- ``apply_then_hold``: makes the call, then holds its answer until ``release()`` (what the caller learns late).

A broker component is given the wrapper in place of its client (``store.zk = FaultyKazooClient(store.zk)``);
watches already set stay on the real client. Faults apply ``times`` times (None: until removed).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

INTERCEPTED = frozenset({"get", "set", "create", "delete", "exists", "get_children"})


@dataclass(eq=False)
class ZkFault:
    method: str
    path: str | Callable[[str], bool]
    action: str  # "hold", "fail", "apply_then_fail", "apply_then_hold"
    times: int | None = 1
    error: Callable[[], BaseException] = ConnectionLoss
    calls: list[str] = field(default_factory=list)  # the paths of the calls it acted on
    _released: threading.Event = field(default_factory=threading.Event)
    _arrived: threading.Condition = field(default_factory=threading.Condition)
    _owner: FaultyKazooClient | None = None

    def matches(self, method: str, path: str) -> bool:
        if method != self.method:
            return False
        return self.path(path) if callable(self.path) else path == self.path

    def take(self, path: str) -> bool:
        with self._arrived:
            if self.times is not None and len(self.calls) >= self.times:
                return False
            self.calls.append(path)
            self._arrived.notify_all()
            return True

    def wait(self, count: int = 1, timeout: float = 30.0) -> None:
        """Wait until the fault acted on ``count`` calls."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.calls) >= count, timeout):
                raise TimeoutError(f"no {self.method} on {self.path} within {timeout:g} s")

    def release(self) -> None:
        """Let held calls go on; act on no more."""
        self.remove()
        self._released.set()

    def remove(self) -> None:
        if self._owner is not None:
            self._owner.remove(self)


class FaultyKazooClient:
    """``KazooClient`` with faults on chosen calls; see the module docstring."""

    def __init__(self, client: KazooClient) -> None:
        self.client = client
        self._faults: list[ZkFault] = []
        self._lock = threading.Lock()

    def add(self, fault: ZkFault) -> ZkFault:
        fault._owner = self
        with self._lock:
            self._faults.append(fault)
        return fault

    def hold(self, method: str, path: str | Callable[[str], bool], *, times: int | None = 1) -> ZkFault:
        return self.add(ZkFault(method, path, "hold", times))

    def fail(self, method: str, path: str | Callable[[str], bool], *, times: int | None = 1,
             error: Callable[[], BaseException] = ConnectionLoss) -> ZkFault:  # fmt: skip
        return self.add(ZkFault(method, path, "fail", times, error))

    def apply_then_fail(self, method: str, path: str | Callable[[str], bool], *, times: int | None = 1) -> ZkFault:
        return self.add(ZkFault(method, path, "apply_then_fail", times))

    def apply_then_hold(self, method: str, path: str | Callable[[str], bool], *, times: int | None = 1) -> ZkFault:
        return self.add(ZkFault(method, path, "apply_then_hold", times))

    def remove(self, fault: ZkFault) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._faults.remove(fault)

    def clear(self) -> None:
        with self._lock:
            faults, self._faults = self._faults, []
        for f in faults:
            f._released.set()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.client, name)
        if name not in INTERCEPTED:
            return attr

        def call(path: str, *args: Any, **kwargs: Any) -> Any:
            with self._lock:
                candidates = [f for f in self._faults if f.matches(name, path)]
            fault = next((f for f in candidates if f.take(path)), None)
            if fault is None:
                return attr(path, *args, **kwargs)
            if fault.action == "hold":
                fault._released.wait()
                return attr(path, *args, **kwargs)
            if fault.action == "fail":
                raise fault.error()
            result = attr(path, *args, **kwargs)
            if fault.action == "apply_then_hold":
                fault._released.wait()
                return result
            raise fault.error()

        return call
