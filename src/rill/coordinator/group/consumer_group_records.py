"""A consumer group's records in ``__consumer_offsets`` (Kafka's layouts, key versions 3 and 5-8) and the
rebuilding of the groups from them::

    ConsumerGroupMetadataKey v3                 group             -> group epoch
    ConsumerGroupMemberMetadataKey v5           group, member     -> subscription, client, assignor
    ConsumerGroupTargetAssignmentMetadataKey v6 group             -> assignment epoch
    ConsumerGroupTargetAssignmentMemberKey v7   group, member     -> the member's share of the target
    ConsumerGroupCurrentMemberAssignmentKey v8  group, member     -> member epoch, state, assigned and revoking

A null value deletes its key. A coordinator that takes over a partition replays these (after the classic
records, which the group metadata manager reads) so every member keeps its assignment and epoch. Offsets of
consumer groups are ordinary OffsetCommit records, kept with the classic ones.
"""

from __future__ import annotations

import logging
import struct
import uuid
from collections.abc import Iterable
from typing import Any

from rill.coordinator.group.consumer_group import (
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from rill.coordinator.internal_topics import iter_plain_records
from rill.protocol import decode_versioned, encode_versioned

log = logging.getLogger(__name__)

GROUP_METADATA = 3
MEMBER_METADATA = 5
TARGET_METADATA = 6
TARGET_MEMBER = 7
CURRENT_ASSIGNMENT = 8
KEY_VERSIONS = {GROUP_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT}

_NAMES = {
    GROUP_METADATA: "ConsumerGroupMetadata",
    MEMBER_METADATA: "ConsumerGroupMemberMetadata",
    TARGET_METADATA: "ConsumerGroupTargetAssignmentMetadata",
    TARGET_MEMBER: "ConsumerGroupTargetAssignmentMember",
    CURRENT_ASSIGNMENT: "ConsumerGroupCurrentMemberAssignment",
}
_INT16 = struct.Struct(">h")


def _key(version: int, group_id: str, member_id: str | None = None) -> bytes:
    body: dict[str, Any] = {"group_id": group_id}
    if member_id is not None:
        body["member_id"] = member_id
    return encode_versioned(_NAMES[version] + "Key", version, body)


def _value(version: int, body: dict[str, Any]) -> bytes:
    return encode_versioned(_NAMES[version] + "Value", 0, body)


def _partitions(assignment: Assignment) -> list[dict[str, Any]]:
    return [{"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(assignment.items(), key=lambda i: str(i[0]))]


def _assignment(entries: Iterable[dict[str, Any]]) -> dict[uuid.UUID, frozenset[int]]:
    return {e["topic_id"]: frozenset(e["partitions"]) for e in entries if e["partitions"]}


def _classic(value: dict[str, Any] | None) -> ClassicMemberMetadata | None:
    if value is None:
        return None
    protocols = tuple((p["name"], bytes(p["metadata"])) for p in value["supported_protocols"])
    return ClassicMemberMetadata(value["session_timeout_ms"], protocols)


# -- encoding ------------------------------------------------------------------------------------------------


def group_epoch_record(group_id: str, epoch: int) -> tuple[bytes, bytes | None]:
    return _key(GROUP_METADATA, group_id), _value(GROUP_METADATA, {"epoch": epoch})


def member_metadata_record(group_id: str, member: ConsumerGroupMember) -> tuple[bytes, bytes | None]:
    value = {
        "instance_id": member.instance_id,
        "rack_id": member.rack_id,
        "client_id": member.client_id,
        "client_host": member.client_host,
        "subscribed_topic_names": list(member.subscribed_topic_names),
        "subscribed_topic_regex": member.subscribed_topic_regex,
        "rebalance_timeout_ms": member.rebalance_timeout_ms,
        "server_assignor": member.server_assignor,
        "classic_member_metadata": None
        if member.classic is None
        else {
            "session_timeout_ms": member.classic.session_timeout_ms,
            "supported_protocols": [{"name": n, "metadata": m} for n, m in member.classic.supported_protocols],
        },
    }
    return _key(MEMBER_METADATA, group_id, member.member_id), _value(MEMBER_METADATA, value)


def target_epoch_record(group_id: str, epoch: int) -> tuple[bytes, bytes | None]:
    return _key(TARGET_METADATA, group_id), _value(TARGET_METADATA, {"assignment_epoch": epoch})


def target_member_record(group_id: str, member_id: str, target: Assignment) -> tuple[bytes, bytes | None]:
    return _key(TARGET_MEMBER, group_id, member_id), _value(TARGET_MEMBER, {"topic_partitions": _partitions(target)})


def current_assignment_record(group_id: str, member: ConsumerGroupMember) -> tuple[bytes, bytes | None]:
    value = {
        "member_epoch": member.member_epoch,
        "previous_member_epoch": member.previous_member_epoch,
        "state": int(member.state),
        "assigned_partitions": _partitions(member.assigned),
        "partitions_pending_revocation": _partitions(member.pending_revocation),
    }
    return _key(CURRENT_ASSIGNMENT, group_id, member.member_id), _value(CURRENT_ASSIGNMENT, value)


def member_tombstones(group_id: str, member_id: str) -> list[tuple[bytes, bytes | None]]:
    """The records that remove a member: its current assignment, its target, then its metadata."""
    return [
        (_key(CURRENT_ASSIGNMENT, group_id, member_id), None),
        (_key(TARGET_MEMBER, group_id, member_id), None),
        (_key(MEMBER_METADATA, group_id, member_id), None),
    ]


def group_tombstones(group_id: str) -> list[tuple[bytes, bytes | None]]:
    return [(_key(TARGET_METADATA, group_id), None), (_key(GROUP_METADATA, group_id), None)]


# -- replay --------------------------------------------------------------------------------------------------


def is_consumer_group_key(key: bytes | None) -> bool:
    return key is not None and len(key) >= 2 and _INT16.unpack_from(key, 0)[0] in KEY_VERSIONS


def consumer_group_id(key: bytes) -> str | None:
    """The group id of a consumer group record's key, None when it does not decode."""
    try:
        return str(decode_versioned(_NAMES[_INT16.unpack_from(key, 0)[0]] + "Key", key)[1]["group_id"])
    except Exception:  # bytes we did not expect: the caller skips them
        return None


class ConsumerGroupReplay:
    """Consumer groups rebuilt from their records, in log order."""

    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroup] = {}
        # Member parts arrive as separate records: kept apart until the end.
        self._metadata: dict[tuple[str, str], ConsumerGroupMember] = {}
        self._current: dict[tuple[str, str], dict[str, Any]] = {}
        self._skipped = 0
        self.last_offset: dict[str, int] = {}  # group id -> offset of its latest record (log order)

    def _group(self, group_id: str) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ConsumerGroup(group_id)
        return group

    def replay(self, key: bytes, value: bytes | None, offset: int = -1) -> None:
        """Apply one record (at ``offset`` of the log); a record that cannot be read is logged and skipped."""
        try:
            group_id = self._replay(key, value)
            if group_id in self.groups:
                self.last_offset[group_id] = offset
            else:
                self.last_offset.pop(group_id, None)
        except Exception as e:  # bytes we did not expect: never fail the load for them
            self._skipped += 1
            log.warning("Skipped an unreadable consumer group record in __consumer_offsets: %s", e)

    def _replay(self, key: bytes, value: bytes | None) -> str:
        version, k = decode_versioned(_NAMES[_INT16.unpack_from(key, 0)[0]] + "Key", key)
        group_id: str = k["group_id"]
        member_id: str | None = k.get("member_id")
        v: dict[str, Any] | None = None
        if value is not None:
            v = decode_versioned(_NAMES[version] + "Value", value)[1]
        if version == GROUP_METADATA:
            if v is None:
                self.groups.pop(group_id, None)
                for pending in (self._metadata, self._current):
                    for mk in [mk for mk in pending if mk[0] == group_id]:
                        del pending[mk]
            else:
                self._group(group_id).group_epoch = v["epoch"]
        elif version == TARGET_METADATA:
            if v is not None:
                self._group(group_id).assignment_epoch = v["assignment_epoch"]
        elif version == TARGET_MEMBER and member_id is not None:
            if v is None:
                if group_id in self.groups:
                    self.groups[group_id].target.pop(member_id, None)
            else:
                self._group(group_id).target[member_id] = _assignment(v["topic_partitions"])
        elif version == MEMBER_METADATA and member_id is not None:
            if v is None:
                self._metadata.pop((group_id, member_id), None)
            else:
                self._group(group_id)
                self._metadata[(group_id, member_id)] = ConsumerGroupMember(
                    member_id=member_id,
                    instance_id=v["instance_id"],
                    rack_id=v["rack_id"],
                    client_id=v["client_id"],
                    client_host=v["client_host"],
                    subscribed_topic_names=tuple(v["subscribed_topic_names"]),
                    subscribed_topic_regex=v["subscribed_topic_regex"],
                    rebalance_timeout_ms=v["rebalance_timeout_ms"],
                    server_assignor=v["server_assignor"],
                    classic=_classic(v.get("classic_member_metadata")),
                )
        elif version == CURRENT_ASSIGNMENT and member_id is not None:
            if v is None:
                self._current.pop((group_id, member_id), None)
            else:
                self._current[(group_id, member_id)] = v
        return group_id

    def finish(self) -> dict[str, ConsumerGroup]:
        """The groups, with each member's metadata and current assignment joined."""
        for (group_id, member_id), member in self._metadata.items():
            group = self.groups.get(group_id)
            if group is None:
                continue
            current = self._current.get((group_id, member_id))
            if current is not None:
                state = current["state"]
                member = member.replace(
                    member_epoch=current["member_epoch"],
                    previous_member_epoch=current["previous_member_epoch"],
                    state=MemberState(state) if state in MemberState._value2member_map_ else MemberState.UNKNOWN,
                    assigned=_assignment(current["assigned_partitions"]),
                    pending_revocation=_assignment(current["partitions_pending_revocation"]),
                )
            group.put_member(member)
        for group in self.groups.values():
            for member_id in [m for m in group.target if m not in group.members]:
                del group.target[member_id]
            group.rebuild_partition_epochs()
        if self._skipped:
            log.warning("Skipped %d unreadable consumer group record(s)", self._skipped)
        return self.groups


def load_partition_log(plog: Any, replay: ConsumerGroupReplay) -> int:
    """Replay the consumer group records of one ``__consumer_offsets`` partition log (they are never
    transactional; control and transactional batches are left to the offsets' loader). Returns the count."""
    count = 0
    for record in iter_plain_records(plog, "__consumer_offsets"):
        if is_consumer_group_key(record.key):
            assert record.key is not None
            replay.replay(record.key, record.value, record.offset)
            count += 1
    return count
