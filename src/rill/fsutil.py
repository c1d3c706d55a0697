"""Durable file writes shared by every layer that keeps state on disk (no protocol or broker knowledge)."""

from __future__ import annotations

import os
from pathlib import Path


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
