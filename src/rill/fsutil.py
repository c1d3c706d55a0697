"""Durable file writes shared by every layer that keeps state on disk (no protocol or broker knowledge)."""

from __future__ import annotations

import fcntl
import os
import resource
import weakref
from pathlib import Path

_NR_OPEN = Path("/proc/sys/fs/nr_open")  # the kernel's ceiling on a process's descriptors


def write_atomically(path: Path, data: bytes, sync: bool = True) -> None:
    """Replace ``path`` with ``data``: write a temp file, fsync it, rename it over, fsync the directory.

    A crash leaves either the old or the new content, never a mix. ``sync=False`` skips both fsyncs.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def fsync_dir(dir: Path) -> None:
    """fsync a directory, making the names created or renamed in it durable."""
    fsync_path(dir)


def fsync_path(path: Path) -> None:
    """fsync a file or directory by name (a file written earlier without fsync; raises
    FileNotFoundError when it is gone)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft limit on open files to its hard limit, as the JVM does for Kafka:
    every segment holds a descriptor (its .log; each index map one more once the index has entries),
    so a thousand partitions exceed the common default soft limit of 1,024. Returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = open_files_ceiling()
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError):
        return soft, soft
    return soft, target


def open_files_ceiling() -> int:
    """What ``raise_open_files_limit`` raises the soft limit to: the hard limit (the kernel's
    ceiling when the hard limit is unlimited)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY:
        return hard
    try:
        return int(_NR_OPEN.read_text())
    except (OSError, ValueError):
        return 1 << 20


class FileLock:
    """An exclusive ``flock`` on ``path`` (created when missing), as Kafka's FileLock: held from
    ``try_lock`` until ``release``, or until the process dies.

    A process forked while the lock is held does not hold it: an flock belongs to the open file,
    which a forked child shares, so the child's copy of the descriptor would keep the lock after the
    parent released it (a broker in a test process that forks workers could not restart). The child
    closes its copy right after the fork."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def try_lock(self) -> bool:
        """Take the lock; False when another open file (another process, or another ``FileLock`` of
        this one) holds it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        _HELD_LOCKS.add(self)
        return True

    def release(self) -> None:
        _HELD_LOCKS.discard(self)
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops its lock
            self._fd = None

    def _forget_in_forked_child(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the child's copy only: the parent's descriptor keeps the lock
            self._fd = None


_HELD_LOCKS: weakref.WeakSet[FileLock] = weakref.WeakSet()


def _drop_locks_in_forked_child() -> None:
    for lock in list(_HELD_LOCKS):
        lock._forget_in_forked_child()
    _HELD_LOCKS.clear()


os.register_at_fork(after_in_child=_drop_locks_in_forked_child)


_PROC_FDS = Path("/proc/self/fd")


def open_descriptors() -> int | None:
    """How many descriptors this process has open now (None without ``/proc``)."""
    try:
        return sum(1 for _ in os.scandir(_PROC_FDS)) - 1  # less the one the listing itself holds
    except OSError:
        return None
