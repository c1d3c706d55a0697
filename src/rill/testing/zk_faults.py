"""Exact ZooKeeper faults for tests: a kazoo client that fails, delays or "applies then reports ConnectionLoss" on a
chosen call, and holds back its session events until the test delivers them.

    client = FaultInjectingKazooClient(hosts=zk.connect_string + "/t1", timeout=4.0)
    store = ZkMetadataStore(..., client_factory=lambda hosts, timeout: client)
    rule = client.inject(Fault("set", "/controller_epoch", Action.APPLY_THEN_FAIL))
    ...                                     # the first write of /controller_epoch is made, and answered ConnectionLoss
    assert rule.reached.wait(10)

Every request of the client goes through ``KazooClient._call``; the client looks it up against the faults
injected, in order, and the first one that matches acts on it. A fault names an operation (``create``, ``set``,
``delete``, ``get``, ``exists``, ``children``, ``check``, ``multi``, or ``any``) and a path below the chroot
(``fnmatch`` patterns; None: any), and acts on the ``nth`` matching call and the ``times - 1`` after it:

- ``FAIL``: the call is not sent; it raises ``error`` (ConnectionLoss by default; BadVersionError, NodeExistsError,
  NoNodeError... as ZooKeeper would answer them: in a transaction, as that operation's result, with the others
  rolled back);
- ``APPLY_THEN_FAIL``: the call is sent and applied, and its answer replaced by ``error`` (a reply lost with the
  connection);
- ``HOLD``: the call waits, unsent, until ``release()``;
- ``HOLD_ANSWER``: the call is sent and applied, its answer held back until ``release()``.

A write operation also matches a transaction holding it (``within_multi``, default True): ``Fault("set",
"/controller_epoch")`` catches the plain write as well as a transaction that writes it. ``watch`` tells calls that set
a watch (kazoo's ``DataWatch``/``ChildrenWatch`` recipes) from the others; ``source`` matches the module of the first
``rill`` frame that made the call (``"rill.controller"``, ``"rill.metadata.zookeeper"``), so the controller's calls
and its broker's, which share the client, can be told apart. ``reached`` is set when the fault acts; ``seen`` counts
the matching calls; ``answered`` is set when ZooKeeper answered a call the fault sent (``APPLY_THEN_FAIL``,
``HOLD_ANSWER``).

Session events: ``hold_session_events()`` keeps the state-listener calls (CONNECTED, SUSPENDED, LOST) queued while
the client's state moves on, ``wait_for_events`` waits for some to be queued, ``release_session_events()`` delivers
them in order, at once, on the calling thread (so that, called from the event loop, none of what the listeners
schedule runs in between). ``expire_session()`` makes ZooKeeper expire the session for real (another connection
takes it over and closes it): ephemeral znodes go, and the client gets LOST, then a new session (CONNECTED).
``drop_connection()`` breaks the client's connection: SUSPENDED, then CONNECTED again in the same session.

Production code never sees this class: the stores take a plain ``KazooClient`` unless a test gives a factory.
"""

from __future__ import annotations

import enum
import fnmatch
import socket
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, RolledBackError, RuntimeInconsistency
from kazoo.protocol.serialization import (
    CheckVersion,
    Create,
    Create2,
    Delete,
    Exists,
    GetChildren,
    GetChildren2,
    GetData,
    SetData,
    Transaction,
)

__all__ = ["Action", "Fault", "FaultInjectingKazooClient"]

_OPS: dict[type, str] = {
    Create: "create", Create2: "create", Delete: "delete", SetData: "set", CheckVersion: "check",
    GetData: "get", Exists: "exists", GetChildren: "children", GetChildren2: "children", Transaction: "multi",
}  # fmt: skip
_WRITES = frozenset({"create", "delete", "set", "check"})
_CONNECTION_ERRORS = (ConnectionLoss,)


class Action(enum.Enum):
    FAIL = "fail"
    APPLY_THEN_FAIL = "apply then fail"
    HOLD = "hold"
    HOLD_ANSWER = "hold answer"


@dataclass(eq=False)
class Fault:
    """One fault to inject; see the module docstring."""

    op: str
    path: str | None = None
    action: Action = Action.FAIL
    error: type[Exception] = ConnectionLoss
    nth: int = 1
    times: int = 1
    watch: bool | None = None
    within_multi: bool = True
    source: str | None = None
    seen: int = 0
    acted: int = 0
    reached: threading.Event = field(default_factory=threading.Event)
    answered: threading.Event = field(default_factory=threading.Event)
    _released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        """Let the held calls go on (their answers through, for ``HOLD_ANSWER``)."""
        self._released.set()

    def wait_reached(self, timeout: float = 30.0) -> None:
        """Wait until the fault has acted; AssertionError after ``timeout`` seconds."""
        if not self.reached.wait(timeout):
            raise AssertionError(f"{self} was not reached within {timeout:g} s ({self.seen} matching calls)")

    def __str__(self) -> str:
        return f"fault {self.action.value} on {self.op} {self.path or '*'} (call {self.nth})"

    def _matches(self, op: str, paths: Sequence[tuple[str, str]], watch: bool, source: str | None) -> bool:
        if self.watch is not None and self.watch != watch:
            return False
        if self.source is not None and (source is None or not source.startswith(self.source)):
            return False
        if self.op in ("any", op):
            return self.path is None or any(fnmatch.fnmatchcase(p, self.path) for _, p in paths)
        if op != "multi" or not self.within_multi or self.op not in _WRITES:
            return False
        return any(o == self.op and (self.path is None or fnmatch.fnmatchcase(p, self.path)) for o, p in paths)

    def _take(self) -> bool:
        """Count a matching call; True when the fault acts on it."""
        self.seen += 1
        if self.nth <= self.seen < self.nth + self.times:
            self.acted += 1
            self.reached.set()
            return True
        return False


class FaultInjectingKazooClient(KazooClient):  # type: ignore[misc]
    """A ``KazooClient`` whose calls and session events a test controls; see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._faults: list[Fault] = []
        self._fault_lock = threading.Lock()
        self._holding_events = False
        self._held_events: list[str] = []
        self._events_changed = threading.Condition()

    # -- faults ------------------------------------------------------------------------------------------

    def inject(self, fault: Fault) -> Fault:
        """Add ``fault`` (after those already there); returns it."""
        with self._fault_lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        """Remove every fault, releasing the calls they hold."""
        with self._fault_lock:
            faults, self._faults = self._faults, []
        for f in faults:
            f.release()

    def _unchrooted(self, path: str) -> str:
        chroot = self.chroot or ""
        if chroot and path.startswith(chroot):
            return path[len(chroot) :] or "/"
        return path

    def _describe(self, request: Any) -> tuple[str, list[tuple[str, str]], bool] | None:
        op = _OPS.get(type(request))
        if op is None:
            return None
        if op == "multi":
            paths = [(_OPS.get(type(o), "?"), self._unchrooted(o.path)) for o in request.operations]
            return op, paths, False
        return op, [(op, self._unchrooted(request.path))], bool(getattr(request, "watcher", None))

    def _call(self, request: Any, async_object: Any) -> Any:
        if not self._faults:
            return super()._call(request, async_object)
        described = self._describe(request)
        if described is None:
            return super()._call(request, async_object)
        op, paths, watch = described
        source = _rill_caller()
        with self._fault_lock:
            fault = next((f for f in self._faults if f._matches(op, paths, watch, source) and f._take()), None)
        if fault is None:
            return super()._call(request, async_object)
        if fault.action is Action.FAIL:
            self._fail(fault, async_object, paths, op)
            return None
        if fault.action is Action.HOLD:
            threading.Thread(target=self._send_when_released, args=(fault, request, async_object), daemon=True,
                             name="zk-fault-hold").start()  # fmt: skip
            return None
        inner = self.handler.async_result()
        super()._call(request, inner)
        threading.Thread(target=self._answer, args=(fault, inner, async_object, paths, op), daemon=True,
                         name="zk-fault-answer").start()  # fmt: skip
        return None

    def _send_when_released(self, fault: Fault, request: Any, async_object: Any) -> None:
        fault._released.wait()
        super()._call(request, async_object)

    def _answer(self, fault: Fault, inner: Any, async_object: Any, paths: list[tuple[str, str]], op: str) -> None:
        inner.wait()
        fault.answered.set()
        if fault.action is Action.APPLY_THEN_FAIL:
            self._fail(fault, async_object, paths, op)
            return
        fault._released.wait()
        if inner.successful():
            async_object.set(inner.value)
        else:
            async_object.set_exception(inner.exception)

    def _fail(self, fault: Fault, async_object: Any, paths: list[tuple[str, str]], op: str) -> None:
        """Answer with the fault's error as ZooKeeper would: a connection error for the whole call, an operation's
        error as the result of the operation the fault names in a transaction (those before it rolled back, those
        after it not run)."""
        error = fault.error
        if op != "multi" or issubclass(error, _CONNECTION_ERRORS):
            async_object.set_exception(error())
            return
        single = Fault(fault.op, fault.path)
        at = next((i for i, (o, p) in enumerate(paths) if single._matches(o, [(o, p)], False, None)), 0)
        results: list[Exception] = [RolledBackError() for _ in paths[:at]]
        results.append(error())
        results += [RuntimeInconsistency() for _ in paths[at + 1 :]]
        async_object.set(results)

    # -- session events ----------------------------------------------------------------------------------

    def hold_session_events(self) -> None:
        """Queue the state-listener calls from now on (the client's state still changes)."""
        with self._events_changed:
            self._holding_events = True

    def wait_for_events(self, *states: str, timeout: float = 30.0) -> None:
        """Wait until the held events include ``states`` in that order; AssertionError after ``timeout``."""

        def has() -> bool:
            it = iter(self._held_events)
            return all(any(e == s for e in it) for s in states)

        with self._events_changed:
            if not self._events_changed.wait_for(has, timeout):
                raise AssertionError(f"session events {list(states)} not seen within {timeout:g} s "
                                     f"(held: {self._held_events})")  # fmt: skip

    def release_session_events(self) -> list[str]:
        """Stop holding, and deliver the held events to the listeners in order, on this thread; returns them."""
        with self._events_changed:
            events, self._held_events = self._held_events, []
            self._holding_events = False
        for state in events:
            self._deliver(state)
        return events

    def _make_state_change(self, state: str) -> None:
        with self._events_changed:
            if self._holding_events:
                current = str(getattr(self, "state", ""))
                if current != state:
                    self.state = state
                    self._held_events.append(state)
                    self._events_changed.notify_all()
                return
        super()._make_state_change(state)

    def _deliver(self, state: str) -> None:
        for listener in list(self.state_listeners):
            try:
                if listener(state) is True:
                    self.remove_listener(listener)
            except Exception:
                self.logger.exception("Error in connection state listener")

    def drop_connection(self) -> None:
        """Break this client's connection, as a network fault would: kazoo reports SUSPENDED, then connects again
        within the same session (CONNECTED)."""
        sock = self._connection._socket
        if sock is None:
            raise RuntimeError("the client is not connected")
        sock.shutdown(socket.SHUT_RDWR)

    def expire_session(self, timeout: float = 30.0) -> None:
        """Make ZooKeeper expire this client's session now: another client takes the session over and closes it."""
        client_id = self.client_id
        if client_id is None:
            raise RuntimeError("the client has no session to expire")
        other = KazooClient(hosts=self.hosts_string, client_id=client_id, timeout=self._session_timeout / 1000.0)
        try:
            other.start(timeout)
        finally:
            other.stop()
            other.close()

    @property
    def hosts_string(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.hosts) + (self.chroot or "")


def _rill_caller() -> str | None:
    """The module of the innermost ``rill`` frame (outside ``rill.testing``) that made this call."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith("rill.") and not name.startswith("rill.testing"):
            return str(name)
        frame = frame.f_back
    return None
