"""Durable share-group state: each share partition's SPSO and in-flight state batches, kept so a broker restart
loses no acknowledgement and delivers again what was acquired and not acknowledged.

One file per share group in ``<first log dir>/__share_group_state/``, rewritten whole (temporary file, fsync,
rename, directory fsync) before a ShareFetch or ShareAcknowledge that changed the group's state is answered. A
file that cannot be read is logged and skipped (the group's partitions start afresh from
``share.auto.offset.reset``): bytes the broker did not write never stop it from starting or serving.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.parse
from pathlib import Path
from typing import Any

from rill.coordinator.share.share_partition import RecordState, StateBatch

log = logging.getLogger(__name__)

STATE_DIR = "__share_group_state"
FORMAT_VERSION = 1

# (topic id hex, partition) -> (start offset, state batches)
PartitionKey = tuple[str, int]
GroupState = dict[PartitionKey, tuple[int, list[StateBatch]]]


class ShareStateStore:
    def __init__(self, log_dir: Path) -> None:
        self.dir = log_dir / STATE_DIR

    def _path(self, group_id: str) -> Path:
        return self.dir / (urllib.parse.quote(group_id, safe="") + ".json")

    def write(self, group_id: str, state: GroupState) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        doc = {
            "version": FORMAT_VERSION,
            "group": group_id,
            "partitions": [
                {"topic_id": tid, "partition": p, "start_offset": start,
                 "batches": [[b.first_offset, b.last_offset, int(b.state), b.delivery_count] for b in batches]}
                for (tid, p), (start, batches) in sorted(state.items())
            ],
        }  # fmt: skip
        path = self._path(group_id)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(self, group_id: str) -> None:
        self._path(group_id).unlink(missing_ok=True)

    def read(self, group_id: str) -> GroupState:
        path = self._path(group_id)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as e:
            log.warning("share group %s: cannot read its state (%s); starting afresh", group_id, e)
            return {}
        try:
            return _parse(json.loads(raw))
        except (ValueError, TypeError, KeyError) as e:
            log.warning("share group %s: state file %s is not readable (%s); starting afresh", group_id, path, e)
            return {}

    def groups(self) -> list[str]:
        if not self.dir.is_dir():
            return []
        return sorted(urllib.parse.unquote(p.stem) for p in self.dir.glob("*.json"))


def _parse(doc: Any) -> GroupState:
    if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
        raise ValueError("unknown format")
    out: GroupState = {}
    for p in doc["partitions"]:
        batches = []
        for first, last, state, count in p["batches"]:
            if not all(isinstance(v, int) for v in (first, last, state, count)) or last < first:
                raise ValueError("malformed state batch")
            batches.append(StateBatch(first, last, RecordState(state), count))
        start = p["start_offset"]
        if not isinstance(start, int) or not isinstance(p["partition"], int):
            raise ValueError("malformed partition")
        out[(str(p["topic_id"]), p["partition"])] = (start, batches)
    return out
