"""A share group's records in ``__consumer_offsets`` (Kafka's layouts, key versions 10, 11 and 15) and the groups
rebuilt from them::

    ShareGroupMemberMetadataKey v10          group, member -> rack, client id and host, subscribed topics
    ShareGroupMetadataKey v11                group         -> group epoch
    ShareGroupStatePartitionMetadataKey v15  group         -> the topics (id, name, partitions) it has state of

A null value deletes its key. The coordinator writes what changed since its last write (``changes``) after a
heartbeat changed the group, and tombstones when the group is deleted; a coordinator that takes over a partition
replays them (``ShareGroupReplay``), so it knows the group, its members and its topics. A replayed member gets a
fresh session: one that is gone expires after ``group.share.session.timeout.ms``, as at the old coordinator.
Assignments are not written: the simple assignor computes them again from the subscriptions.
"""

from __future__ import annotations

import logging
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rill.coordinator.internal_topics import iter_plain_records
from rill.coordinator.share.share_group_coordinator import ShareGroup, ShareMember
from rill.protocol import decode_versioned, encode_versioned

log = logging.getLogger(__name__)

MEMBER_METADATA = 10
GROUP_METADATA = 11
STATE_PARTITION_METADATA = 15
KEY_VERSIONS = {MEMBER_METADATA, GROUP_METADATA, STATE_PARTITION_METADATA}
_NAMES = {
    MEMBER_METADATA: "ShareGroupMemberMetadata",
    GROUP_METADATA: "ShareGroupMetadata",
    STATE_PARTITION_METADATA: "ShareGroupStatePartitionMetadata",
}
_INT16 = struct.Struct(">h")

MemberImage = tuple[str | None, str, str, tuple[str, ...]]  # rack, client id, client host, subscribed topics
# A member whose record the log may hold, or not (a write that failed may have landed): never equal to an image
# a heartbeat makes (no topic is named with a NUL), so the next write writes the member again or its tombstone.
UNKNOWN_MEMBER: MemberImage = (None, "", "", ("\x00",))
UNKNOWN_TOPICS: dict[str, tuple[uuid.UUID, int]] = {"\x00": (uuid.UUID(int=0), -1)}
UNKNOWN_EPOCH = -2
MAX_MEMBER_RECORD_BYTES = 16 * 1024  # a member whose record would be larger is refused (INVALID_REQUEST)


@dataclass(slots=True)
class StoredImage:
    """What the log holds of a group: the coordinator writes the difference between it and the group."""

    epoch: int = -1
    members: dict[str, MemberImage] = field(default_factory=dict)
    topics: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)  # name -> (id, partitions)


def _key(version: int, group_id: str, member_id: str | None = None) -> bytes:
    body: dict[str, Any] = {"group_id": group_id}
    if member_id is not None:
        body["member_id"] = member_id
    return encode_versioned(_NAMES[version] + "Key", version, body)


def _value(version: int, body: dict[str, Any]) -> bytes:
    return encode_versioned(_NAMES[version] + "Value", 0, body)


def is_share_group_key(key: bytes | None) -> bool:
    return key is not None and len(key) >= 2 and _INT16.unpack_from(key, 0)[0] in KEY_VERSIONS


def _member_image(m: ShareMember) -> MemberImage:
    return m.rack_id, m.client_id, m.client_host, m.subscribed


def image_of(group: ShareGroup, topics: Mapping[str, tuple[uuid.UUID, int]]) -> StoredImage:
    """The image the log should hold of ``group`` (``topics``: the cluster's, for the ids of its topics)."""
    named = {**group.state_topics, **group.topics_seen}
    seen = {name: (topics[name][0], count) for name, count in named.items() if name in topics}
    return StoredImage(group.group_epoch, {m.member_id: _member_image(m) for m in group.members.values()}, seen)


@dataclass(frozen=True, slots=True)
class Change:
    """One record of a write, and what it makes of the image once it is in the log."""

    key: bytes
    value: bytes | None
    member_id: str | None = None  # a member's record (None: the topics' or the group's)

    @property
    def size(self) -> int:
        return len(self.key) + len(self.value or b"") + 32


def member_record(group_id: str, member_id: str, image: MemberImage) -> Change:
    rack, client_id, client_host, subscribed = image
    return Change(_key(MEMBER_METADATA, group_id, member_id), _value(MEMBER_METADATA, {
        "rack_id": rack, "client_id": client_id, "client_host": client_host,
        "subscribed_topic_names": list(subscribed)}), member_id)  # fmt: skip


def changes(group_id: str, stored: StoredImage, wanted: StoredImage) -> list[Change]:
    """The records that take the log from ``stored`` to ``wanted``: members first, the epoch last."""
    out: list[Change] = []
    for member_id, image in wanted.members.items():
        if stored.members.get(member_id) != image:
            out.append(member_record(group_id, member_id, image))
    for member_id in stored.members:
        if member_id not in wanted.members:
            out.append(Change(_key(MEMBER_METADATA, group_id, member_id), None, member_id))
    if wanted.topics != stored.topics:
        out.append(Change(_key(STATE_PARTITION_METADATA, group_id), _value(STATE_PARTITION_METADATA, {
            "initialized_topics": [{"topic_id": tid, "topic_name": name, "partitions": list(range(count))}
                                   for name, (tid, count) in sorted(wanted.topics.items())],
            "deleting_topics": []})))  # fmt: skip
    if wanted.epoch != stored.epoch:
        out.append(Change(_key(GROUP_METADATA, group_id), _value(GROUP_METADATA, {"epoch": wanted.epoch})))
    return out


def applied(stored: StoredImage, wanted: StoredImage, written: list[Change]) -> StoredImage:
    """``stored`` once the records ``written`` (of ``changes(stored, wanted)``) are in the log."""
    members = dict(stored.members)
    topics, epoch = stored.topics, stored.epoch
    for c in written:
        if c.member_id is not None:
            if c.value is None:
                members.pop(c.member_id, None)
            else:
                members[c.member_id] = wanted.members[c.member_id]
        elif _INT16.unpack_from(c.key, 0)[0] == STATE_PARTITION_METADATA:
            topics = wanted.topics
        else:
            epoch = wanted.epoch
    return StoredImage(epoch, members, topics)


def unknown(stored: StoredImage, attempted: list[Change]) -> StoredImage:
    """What the log may hold after a write of ``attempted`` failed (it may have landed, wholly or not at all): the
    members of either are unknown, and so are the topics and the epoch."""
    members = {m: UNKNOWN_MEMBER for m in stored.members}
    members.update((c.member_id, UNKNOWN_MEMBER) for c in attempted if c.member_id is not None)
    return StoredImage(UNKNOWN_EPOCH, members, dict(UNKNOWN_TOPICS))


def tombstones(group_id: str, stored: StoredImage) -> list[Change]:
    """The records that delete the group: its members', its topics' and its own."""
    out = [Change(_key(MEMBER_METADATA, group_id, m), None, m) for m in stored.members]
    return [*out, Change(_key(STATE_PARTITION_METADATA, group_id), None), Change(_key(GROUP_METADATA, group_id), None)]


class ShareGroupReplay:
    """Share groups rebuilt from their records, in log order (the latest record of each key wins)."""

    def __init__(self) -> None:
        self.images: dict[str, StoredImage] = {}
        self._exists: set[str] = set()

    def replay(self, key: bytes, value: bytes | None, offset: int) -> None:
        version = _INT16.unpack_from(key, 0)[0]
        try:
            body = decode_versioned(_NAMES[version] + "Key", key)[1]
            decoded = decode_versioned(_NAMES[version] + "Value", value)[1] if value is not None else None
        except Exception as e:  # bytes we did not write: skipped, never a failed load
            log.warning("Skipped an unreadable share group record of __consumer_offsets at offset %d: %s", offset, e)
            return
        group_id = str(body["group_id"])
        image = self.images.setdefault(group_id, StoredImage())
        if version == GROUP_METADATA:
            if decoded is None:  # the group is deleted: what came before it goes too
                self.images.pop(group_id, None)
                self._exists.discard(group_id)
            else:
                image.epoch = int(decoded["epoch"])
                self._exists.add(group_id)
        elif version == MEMBER_METADATA:
            member_id = str(body["member_id"])
            if decoded is None:
                image.members.pop(member_id, None)
            else:
                image.members[member_id] = (decoded["rack_id"], decoded["client_id"], decoded["client_host"],
                                            tuple(decoded["subscribed_topic_names"]))  # fmt: skip
        elif decoded is None:
            image.topics.clear()
        else:
            image.topics = {t["topic_name"]: (t["topic_id"], len(t["partitions"]))
                            for t in decoded["initialized_topics"]}  # fmt: skip

    def finish(self, now_ms: int, session_timeout_ms: int) -> dict[str, tuple[ShareGroup, StoredImage]]:
        """Each group whose metadata record is there, with what the log holds of it."""
        out: dict[str, tuple[ShareGroup, StoredImage]] = {}
        for group_id in self._exists:
            image = self.images[group_id]
            group = ShareGroup(group_id, group_epoch=image.epoch)
            group.state_topics = {name: count for name, (_, count) in image.topics.items()}
            for member_id, (rack, client_id, client_host, subscribed) in image.members.items():
                group.members[member_id] = ShareMember(member_id, image.epoch, subscribed, rack, client_id,
                                                       client_host, now_ms + session_timeout_ms)  # fmt: skip
            out[group_id] = (group, image)
        return out


def load_partition_log(plog: Any, replay: ShareGroupReplay) -> int:
    """Replay the share group records of one ``__consumer_offsets`` partition log (never transactional).
    Returns the count."""
    count = 0
    for record in iter_plain_records(plog, "__consumer_offsets"):
        if record.key is not None and is_share_group_key(record.key):
            replay.replay(record.key, record.value, record.offset)
            count += 1
    return count
