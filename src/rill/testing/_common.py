"""What the thread and subprocess runners share: the start error, and what a forked child lets go of.

A process forked from a test process (multiprocessing's default on Linux) gets copies of every
descriptor. Its copies of a thread-mode broker's listening sockets would keep accepting connections
after the broker stopped (clients would wait instead of being refused), its copies of the broker's
client connections would keep them open (the clients would never see them close), and its copy of
the pipe that ties a subprocess broker to the test process would keep that broker alive after the
test process died. Right after a fork the child replaces those copies, and only those, with
``/dev/null`` (the log dirs' locks are let go by ``rill.fsutil.FileLock`` itself); the child runs no
broker.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from typing import Protocol


class BrokerStartError(RuntimeError):
    """The broker did not come up; the message says why, with the end of its log when there is one."""


class ForkAware(Protocol):
    def descriptors_to_drop_after_fork(self) -> list[int]: ...


_TRACKED: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def drop_in_forked_children(owner: ForkAware) -> None:
    """After a fork, the child drops ``owner``'s descriptors, until ``forget`` is called."""
    _TRACKED.add(owner)


def forget(owner: ForkAware) -> None:
    _TRACKED.discard(owner)


def _blank(fd: int) -> None:
    # dup2 rather than close: the number stays taken, so an object of the child that still believes
    # it owns the descriptor can never close some other file that reused the number.
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _after_fork_in_child() -> None:
    for owner in list(_TRACKED):
        for fd in owner.descriptors_to_drop_after_fork():
            with contextlib.suppress(OSError):
                _blank(fd)
    _TRACKED.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
