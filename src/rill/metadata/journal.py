"""The embedded metadata store's journal: its changes as an append-only file, beside a snapshot.

Files, in the store's directory:

- ``rill-metadata.json``: a snapshot of the whole state, ``{"offset": N, ...}``, the state after the
  change numbered ``N``. Written through a temp file, fsync and rename, so a crash leaves the old or the new.
- ``rill-metadata.log``: one JSON object per line, each a change ``{"offset": N, "type": ..., ...}`` with
  consecutive offsets, appended and fsynced before the change is answered. On load the changes after the
  snapshot's offset are replayed; changes at or below it (written before the snapshot that holds them) are
  skipped. A line torn by a crash (only the last can be: each is fsynced before the next is written) was never
  answered, and is dropped. A snapshot that cannot be read stops the start with KAFKA_STORAGE_ERROR naming the
  file (it holds the whole state); a line of the journal that cannot be read is logged and skipped.

A change costs one line and one fsync, in proportion to what changed, not to the size of the state; the
fsync runs in a worker thread. Once the journal holds more lines than the snapshot has entries (and at least
``compact_after``), a new snapshot is written in a worker thread and the journal starts again empty.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rill.errors import ErrorCode, KafkaError
from rill.fsutil import fsync_dir, write_atomically

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "rill-metadata.json"
JOURNAL_FILE = "rill-metadata.log"


class MetadataJournal:
    """Appends changes durably (one fsync each, in a thread) and rewrites the snapshot now and then."""

    def __init__(self, directory: Path, *, compact_after: int = 1000) -> None:
        self._dir = directory
        self._path = directory / JOURNAL_FILE
        self._compact_after = compact_after
        self._fd = -1
        self._lines = 0
        self._snapshot_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # an append and the swap of the journal after a snapshot never overlap

    # -- load ------------------------------------------------------------------------------------------

    def load(self) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The snapshot (None when there is none) and the changes after it, in order. Opens the journal for
        appending, cut back to its last whole line."""
        snapshot_path = self._dir / SNAPSHOT_FILE
        snapshot: dict[str, Any] | None = None
        base = 0
        if snapshot_path.exists():
            try:  # the whole state: a snapshot that cannot be read stops the start, naming the file
                snapshot = json.loads(snapshot_path.read_text(encoding="utf-8"))
                if not isinstance(snapshot, dict):
                    raise ValueError(f"a JSON {type(snapshot).__name__}, not an object")
                base = _offset(snapshot.get("offset", 0))
            except (ValueError, RecursionError) as e:  # UnicodeDecodeError included
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{snapshot_path} is corrupt: {e}") from None
        changes: list[dict[str, Any]] = []
        good_end = 0
        if self._path.exists():
            data = self._path.read_bytes()
            for end, record in _lines(data, self._path):
                good_end = end
                if record is not None and record["offset"] > base:
                    changes.append(record)
            if good_end < len(data):
                log.warning(
                    "%s: dropped %d bytes of a change torn by a crash (never answered)",
                    self._path,
                    len(data) - good_end,
                )
        self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.ftruncate(self._fd, good_end)
        os.lseek(self._fd, good_end, os.SEEK_SET)
        self._lines = len(changes)
        return snapshot, changes

    # -- append ----------------------------------------------------------------------------------------

    async def append(self, record: dict[str, Any]) -> None:
        """Write ``record`` as a line and fsync it (in a thread). On failure (a full disk) the file is cut
        back to where it was, so nothing of the change remains, and the OSError is raised."""
        line = (json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n").encode()
        async with self._lock:
            await asyncio.to_thread(self._write_line, line)
            self._lines += 1

    def _write_line(self, line: bytes) -> None:
        start = os.lseek(self._fd, 0, os.SEEK_CUR)
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except OSError:
            try:
                os.ftruncate(self._fd, start)
                os.lseek(self._fd, start, os.SEEK_SET)
            except OSError:
                log.exception("%s: could not cut back a change that failed to be written", self._path)
            raise

    def maybe_snapshot(self, state_size: int, offset: int, encode: Callable[[], bytes]) -> None:
        """Start writing a new snapshot (the state at change ``offset``) in a thread when the journal has
        grown past the state's size. ``encode`` runs in the thread: it must read only immutable values."""
        if self._snapshot_task is not None or self._lines < max(self._compact_after, state_size):
            return
        self._snapshot_task = asyncio.ensure_future(self._write_snapshot(offset, encode))

    async def _write_snapshot(self, offset: int, encode: Callable[[], bytes]) -> None:
        try:
            path = self._dir / SNAPSHOT_FILE
            await asyncio.to_thread(lambda: write_atomically(path, encode()))
            async with self._lock:
                self._lines = await asyncio.to_thread(self._drop_lines_upto, offset)
        except OSError as e:
            log.warning("could not write the metadata snapshot in %s (the journal is kept): %s", self._dir, e)
        finally:
            self._snapshot_task = None

    def _drop_lines_upto(self, base: int) -> int:
        """Replace the journal by its lines after offset ``base`` (those a snapshot at ``base`` does not hold:
        changes appended while it was written); returns how many remain. No append runs meanwhile."""
        kept_lines = [
            line
            for line, record in _raw_lines(self._path.read_bytes())
            if isinstance(record, dict) and isinstance(record.get("offset"), int) and record["offset"] > base
        ]
        kept = b"".join(kept_lines)
        tmp = self._path.with_name(JOURNAL_FILE + ".tmp")
        write_atomically(tmp, kept)
        new_fd = os.open(tmp, os.O_WRONLY)
        os.lseek(new_fd, 0, os.SEEK_END)
        os.replace(tmp, self._path)
        fsync_dir(self._dir)
        old, self._fd = self._fd, new_fd
        os.close(old)
        return len(kept_lines)

    async def close(self) -> None:
        task = self._snapshot_task
        if task is not None:
            await task
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def close_now(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _offset(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"offset {value!r} is not a number of changes")
    return value


def _raw_lines(data: bytes) -> Iterator[tuple[bytes, dict[str, Any] | None]]:
    start = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            return
        line = data[start : end + 1]
        try:
            record: dict[str, Any] | None = json.loads(line)
        except (ValueError, RecursionError):
            record = None
        yield line, record
        start = end + 1


def _lines(data: bytes, path: Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """(end of line, record) for each whole line; a line that does not parse in the middle of the file is
    logged and skipped (each change is whole in itself), never fatal to a start."""
    end = 0
    for line, record in _raw_lines(data):
        end += len(line)
        if not isinstance(record, dict) or not isinstance(record.get("offset"), int):
            log.error("%s: skipped a change that does not parse: %r", path, line[:200])
            yield end, None
            continue
        yield end, record
