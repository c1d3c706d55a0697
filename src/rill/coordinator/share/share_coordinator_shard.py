"""The share coordinator's state of one ``__share_group_state`` partition (Kafka's ShareCoordinatorShard): each
share partition's state (SPSO, state epoch, leader epoch, in-flight state batches), rebuilt from the records of
the partition and moved on by the writes this coordinator makes. No I/O: the coordinator appends the records
this class plans and replays them here.

The key of a share partition is (group id, topic id, partition). Its records are:

- ShareSnapshot (key version 0): the whole state; the first write of a key, and every
  ``share.coordinator.snapshot.update.records.per.snapshot`` updates after it, write one.
- ShareUpdate (key version 1): the batches a write changed, laid over the state so far (a start offset of -1
  keeps the one before; offsets below the start offset are dropped).
- a null value (tombstone) on either key: the share partition's state is deleted.

A write from a leader epoch or state epoch older than the one recorded is fenced (FENCED_LEADER_EPOCH,
FENCED_STATE_EPOCH); a read from a newer leader epoch records it, so the old leader's next write is fenced.
"""

from __future__ import annotations

import base64
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from rill.errors import ErrorCode
from rill.protocol import decode_versioned, encode_versioned

SNAPSHOT_KEY_VERSION = 0
UPDATE_KEY_VERSION = 1
UNINITIALIZED_START_OFFSET = -1
DEFAULT_STATE_EPOCH = 0
_KEY_NAMES = {SNAPSHOT_KEY_VERSION: "ShareSnapshotKey", UPDATE_KEY_VERSION: "ShareUpdateKey"}
_VALID_STATES = frozenset({0, 2, 4})  # Available, Acknowledged, Archived (Acquired is never persisted)


class CorruptShareRecord(ValueError):
    """A ``__share_group_state`` record that does not parse, or holds values no coordinator writes."""


@dataclass(frozen=True, slots=True, order=True)
class SharePartitionKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """The key FindCoordinator (key type SHARE) takes, ``group:topicId:partition``; it places the share
        partition in ``__share_group_state``."""
        return f"{self.group_id}:{_topic_id_string(self.topic_id)}:{self.partition}"


@dataclass(frozen=True, slots=True)
class PersistedBatch:
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareGroupOffset:
    """One share partition's state as the coordinator keeps it."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[PersistedBatch, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """A decoded record: ``value`` None for a tombstone."""

    key_version: int
    key: SharePartitionKey
    value: ShareGroupOffset | None


# -- the record layouts --------------------------------------------------------------------------------------


def _topic_id_string(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def _batches_body(batches: Iterable[PersistedBatch]) -> list[dict[str, int]]:
    return [{"first_offset": b.first_offset, "last_offset": b.last_offset, "delivery_state": b.delivery_state,
             "delivery_count": b.delivery_count} for b in batches]  # fmt: skip


def encode_key(version: int, key: SharePartitionKey) -> bytes:
    body = {"group_id": key.group_id, "topic_id": key.topic_id, "partition": key.partition}
    return encode_versioned(_KEY_NAMES[version], version, body)


def encode_snapshot(state: ShareGroupOffset, now_ms: int = -1) -> bytes:
    return encode_versioned("ShareSnapshotValue", 0, {
        "snapshot_epoch": state.snapshot_epoch, "state_epoch": state.state_epoch,
        "leader_epoch": state.leader_epoch, "start_offset": state.start_offset,
        "create_timestamp": now_ms, "write_timestamp": now_ms, "state_batches": _batches_body(state.batches),
    })  # fmt: skip


def encode_update(state: ShareGroupOffset) -> bytes:
    return encode_versioned("ShareUpdateValue", 0, {
        "snapshot_epoch": state.snapshot_epoch, "leader_epoch": state.leader_epoch,
        "start_offset": state.start_offset, "state_batches": _batches_body(state.batches),
    })  # fmt: skip


def decode_record(key: bytes | memoryview, value: bytes | memoryview | None) -> ShareRecord | None:
    """A record of ``__share_group_state``; None for a key version this broker does not know (left alone, as
    Kafka does). Raises ``CorruptShareRecord`` for bytes that do not parse or values no coordinator writes."""
    try:
        if len(key) < 2:
            raise CorruptShareRecord("key shorter than its version")
        (version,) = struct.unpack_from(">h", key, 0)
        if version not in _KEY_NAMES:
            return None
        _, k = decode_versioned(_KEY_NAMES[version], key)
        spk = SharePartitionKey(k["group_id"], k["topic_id"], k["partition"])
        if spk.partition < 0:
            raise CorruptShareRecord(f"partition {spk.partition}")
        if value is None:
            return ShareRecord(version, spk, None)
        name = "ShareSnapshotValue" if version == SNAPSHOT_KEY_VERSION else "ShareUpdateValue"
        _, v = decode_versioned(name, value)
    except CorruptShareRecord:
        raise
    except Exception as e:  # the codec's errors: truncated, bad lengths, bad UTF-8
        raise CorruptShareRecord(f"{type(e).__name__}: {e}") from e
    batches = tuple(PersistedBatch(b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"])
                    for b in v["state_batches"])  # fmt: skip
    for b in batches:
        if b.last_offset < b.first_offset or b.first_offset < 0 or b.delivery_state not in _VALID_STATES \
                or b.delivery_count < 0:  # fmt: skip
            raise CorruptShareRecord(f"state batch {b}")
    if v["start_offset"] < UNINITIALIZED_START_OFFSET:
        raise CorruptShareRecord(f"start offset {v['start_offset']}")
    state = ShareGroupOffset(v["snapshot_epoch"], v.get("state_epoch", DEFAULT_STATE_EPOCH), v["leader_epoch"],
                             v["start_offset"], batches)  # fmt: skip
    return ShareRecord(version, spk, state)


# -- laying batches over batches -----------------------------------------------------------------------------


def combine_batches(
    old: Iterable[PersistedBatch], new: Iterable[PersistedBatch], start_offset: int
) -> tuple[PersistedBatch, ...]:
    """``new`` laid over ``old`` (each later batch over the earlier ones), offsets below ``start_offset``
    dropped, and neighbours with one state and delivery count joined."""
    runs: list[PersistedBatch] = []
    for b in [*old, *new]:
        kept: list[PersistedBatch] = []
        for r in runs:
            if r.last_offset < b.first_offset or r.first_offset > b.last_offset:
                kept.append(r)
                continue
            if r.first_offset < b.first_offset:
                kept.append(replace(r, last_offset=b.first_offset - 1))
            if r.last_offset > b.last_offset:
                kept.append(replace(r, first_offset=b.last_offset + 1))
        kept.append(b)
        runs = kept
    out: list[PersistedBatch] = []
    for r in sorted(runs, key=lambda r: r.first_offset):
        if r.last_offset < start_offset:
            continue
        if r.first_offset < start_offset:
            r = replace(r, first_offset=start_offset)
        if out and out[-1].last_offset + 1 == r.first_offset and out[-1].delivery_state == r.delivery_state \
                and out[-1].delivery_count == r.delivery_count:  # fmt: skip
            out[-1] = replace(out[-1], last_offset=r.last_offset)
        else:
            out.append(r)
    return tuple(out)


# -- the shard -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteRequest:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[PersistedBatch, ...]


@dataclass(slots=True)
class ShareCoordinatorShard:
    updates_per_snapshot: int = 500
    states: dict[SharePartitionKey, ShareGroupOffset] = field(default_factory=dict)
    leader_epochs: dict[SharePartitionKey, int] = field(default_factory=dict)
    state_epochs: dict[SharePartitionKey, int] = field(default_factory=dict)
    update_counts: dict[SharePartitionKey, int] = field(default_factory=dict)
    skipped: int = 0  # records of the partition its load could not read

    # -- replay --------------------------------------------------------------------------------------------

    def replay(self, record: ShareRecord) -> None:
        key, value = record.key, record.value
        if value is None:
            self.states.pop(key, None)
            self.leader_epochs.pop(key, None)
            self.state_epochs.pop(key, None)
            self.update_counts.pop(key, None)
            return
        self._raise_epoch(self.leader_epochs, key, value.leader_epoch)
        if record.key_version == SNAPSHOT_KEY_VERSION:
            self._raise_epoch(self.state_epochs, key, value.state_epoch)
            self.states[key] = value
            self.update_counts[key] = 0
            return
        current = self.states.get(key)
        if current is None:  # an update with no snapshot before it (compacted away, or written so): taken whole
            self.states[key] = value
        else:
            start = current.start_offset if value.start_offset == -1 else value.start_offset
            leader = current.leader_epoch if value.leader_epoch == -1 else value.leader_epoch
            self.states[key] = ShareGroupOffset(current.snapshot_epoch, current.state_epoch, leader, start,
                                                combine_batches(current.batches, value.batches, start))  # fmt: skip
        self.update_counts[key] = self.update_counts.get(key, 0) + 1

    @staticmethod
    def _raise_epoch(epochs: dict[SharePartitionKey, int], key: SharePartitionKey, epoch: int) -> None:
        if epoch > epochs.get(key, -1):
            epochs[key] = epoch

    # -- requests ------------------------------------------------------------------------------------------

    def write_error(self, key: SharePartitionKey, leader_epoch: int, state_epoch: int) -> ErrorCode:
        if self.leader_epochs.get(key, -1) > leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if self.state_epochs.get(key, -1) > state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH
        return ErrorCode.NO_ERROR

    def plan_write(self, key: SharePartitionKey, w: WriteRequest) -> tuple[int, ShareGroupOffset]:
        """The record (key version, value) a write makes: a snapshot for a new key or when the updates since the
        last snapshot reached the limit, else an update with the batches written."""
        current = self.states.get(key)
        if current is None:
            start = w.start_offset
            return SNAPSHOT_KEY_VERSION, ShareGroupOffset(0, w.state_epoch, w.leader_epoch, start,
                                                          combine_batches((), w.batches, start))  # fmt: skip
        if self.update_counts.get(key, 0) >= self.updates_per_snapshot:
            start = current.start_offset if w.start_offset == -1 else w.start_offset
            return SNAPSHOT_KEY_VERSION, ShareGroupOffset(
                current.snapshot_epoch + 1,
                current.state_epoch if w.state_epoch == -1 else w.state_epoch,
                current.leader_epoch if w.leader_epoch == -1 else w.leader_epoch,
                start,
                combine_batches(current.batches, w.batches, start),
            )
        return UPDATE_KEY_VERSION, ShareGroupOffset(current.snapshot_epoch, current.state_epoch, w.leader_epoch,
                                                    w.start_offset, combine_batches((), w.batches, 0))  # fmt: skip

    def plan_initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> ShareGroupOffset:
        """The snapshot InitializeShareGroupState writes: the new state epoch and start offset, no batches."""
        current = self.states.get(key)
        snapshot_epoch = 0 if current is None else current.snapshot_epoch + 1
        leader_epoch = -1 if current is None else current.leader_epoch
        return ShareGroupOffset(snapshot_epoch, state_epoch, leader_epoch, start_offset, ())

    def read(self, key: SharePartitionKey, leader_epoch: int) -> tuple[ErrorCode, ShareGroupOffset | None]:
        """The state of ``key`` for a leader at ``leader_epoch`` (-1: an admin read, no epoch checked or
        recorded): FENCED_LEADER_EPOCH for an older leader; (NO_ERROR, None) for a key never written."""
        if leader_epoch != -1:
            if self.leader_epochs.get(key, -1) > leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH, None
            self.leader_epochs[key] = leader_epoch
        return ErrorCode.NO_ERROR, self.states.get(key)

    def keys_of(self, group_id: str) -> list[SharePartitionKey]:
        return sorted(k for k in self.states if k.group_id == group_id)
