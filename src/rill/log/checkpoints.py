"""Small text files that outlive a restart, in Kafka's formats, each replaced atomically.

Offset checkpoints (per log dir: ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint``)::

    0                       version
    2                       number of entries
    orders 0 1234           topic, partition, offset (one line each)
    orders 1 99

Leader epoch checkpoint (per partition: ``leader-epoch-checkpoint``)::

    0                       version
    2                       number of entries
    0 0                     leader epoch, start offset
    3 1500

Partition metadata (per partition: ``partition.metadata``)::

    version: 0
    topic_id: <the topic id as 22 characters of URL-safe base64 without padding>

Every write goes to ``<name>.tmp`` and is renamed over the old file, so a crash of the process
leaves either the old or the new content. The per-log-dir checkpoints are fsynced (file, then
directory) before the rename counts; the two per-partition files are written without fsync and
made durable by the log's next flush (``Log.flush_segments``), before its recovery point moves.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

from rill.common import TopicPartition
from rill.fsutil import fsync_dir as fsync_dir
from rill.fsutil import write_atomically as write_atomically

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
CHECKPOINT_VERSION = 0


def _read_lines(path: Path, fields: int) -> list[list[str]]:
    lines = path.read_text().splitlines()
    if len(lines) < 2:
        raise ValueError(f"{path.name}: missing version or count line")
    version = int(lines[0].strip())
    if version != CHECKPOINT_VERSION:
        raise ValueError(f"{path.name}: unsupported version {version}")
    count = int(lines[1].strip())
    rows = [line.split() for line in lines[2:] if line.strip()]
    if len(rows) != count or any(len(r) != fields for r in rows):
        raise ValueError(f"{path.name}: expected {count} lines of {fields} fields")
    return rows


def write_offset_checkpoint(path: Path, offsets: dict[TopicPartition, int], sync: bool = True) -> None:
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{tp.topic} {tp.partition} {off}" for tp, off in sorted(offsets.items(), key=_tp_key)]
    write_atomically(path, ("\n".join(lines) + "\n").encode(), sync)


def read_offset_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """Entries of an offset checkpoint; a missing file is empty, a malformed one raises ValueError."""
    if not path.exists():
        return {}
    return {TopicPartition(t, int(p)): int(o) for t, p, o in _read_lines(path, 3)}


def write_epoch_checkpoint(path: Path, entries: list[tuple[int, int]], sync: bool = True) -> None:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))] + [f"{e} {o}" for e, o in entries]
    write_atomically(path, ("\n".join(lines) + "\n").encode(), sync)


def read_epoch_checkpoint(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    return [(int(e), int(o)) for e, o in _read_lines(path, 2)]


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def topic_id_from_str(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def write_partition_metadata(path: Path, topic_id: uuid.UUID, sync: bool = True) -> None:
    write_atomically(path, f"version: 0\ntopic_id: {topic_id_to_str(topic_id)}\n".encode(), sync)


def read_partition_metadata(path: Path) -> uuid.UUID:
    fields = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise ValueError(f"{path.name}: malformed partition metadata")
    return topic_id_from_str(fields["topic_id"])


def _tp_key(item: tuple[TopicPartition, int]) -> tuple[str, int]:
    return item[0].topic, item[0].partition
