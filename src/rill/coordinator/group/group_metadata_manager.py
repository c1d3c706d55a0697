"""Durable group state: committed offsets and group metadata as records of the ``__consumer_offsets`` topic.

A group lives in partition ``abs(java_string_hash(group_id)) % offsets.topic.num.partitions``. Every record
is a key/value pair, each starting with an int16 schema version (the layouts are Kafka's, declared in
``rill.protocol.messages.group_data``)::

    OffsetCommitKey v1     int16 version=1 | string group | string topic | int32 partition
    OffsetCommitValue v3   int16 version=3 | int64 offset | int32 leaderEpoch | string metadata
                           | int64 commitTimestamp
    GroupMetadataKey v2    int16 version=2 | string group
    GroupMetadataValue v3  int16 version=3 | string protocolType | int32 generation | nullable string protocol
                           | nullable string leader | int64 currentStateTimestamp
                           | int32 count, then per member: string memberId | nullable string groupInstanceId
                             | string clientId | string clientHost | int32 rebalanceTimeout
                             | int32 sessionTimeout | bytes subscription | bytes assignment

(strings are int16 length + UTF-8, -1 for null; bytes are int32 length + data). A null value is a tombstone:
the offset was deleted or expired, or the group was deleted. The topic is compacted by key, so the latest
record per key is the state; at startup the coordinator replays each partition from its log start to
rebuild every group, which is why a restart (clean or not) loses no acknowledged commit.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from rill.common import TopicPartition
from rill.coordinator.group.consumer_group_records import consumer_group_id, is_consumer_group_key
from rill.coordinator.group.deferred_writes import Apply, DeferredWrite, DeferredWriteQueue
from rill.coordinator.group.group_metadata import (
    GroupMetadata,
    GroupState,
    MemberMetadata,
    OffsetAndMetadata,
)
from rill.coordinator.internal_topics import UnreadableRecords, iter_log_chunks, maybe_create_internal_topic
from rill.coordinator.share.share_group_records import is_share_group_key
from rill.errors import ErrorCode, KafkaError
from rill.log.producer_state import VerificationGuard
from rill.metadata.store import OFFSETS_TOPIC, MetadataStore
from rill.protocol import decode_versioned, encode_versioned
from rill.records.builder import build_batch
from rill.records.record import Record, decode_batch_records
from rill.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3

_INT16 = struct.Struct(">h")
UNWRITABLE_BACKOFF_S = 2.0
"""After a write to a ``__consumer_offsets`` partition fails for lack of storage (a full disk), its groups'
coordinator is not offered (FindCoordinator answers COORDINATOR_NOT_AVAILABLE) for this long before the
next write tries the disk again. Kafka takes such a partition offline, so clients back off and look for the
coordinator again; without a pause, members rejoined and failed to store their assignment in a tight loop."""


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# -- record encoding -----------------------------------------------------------------------------------


def offset_commit_key(group_id: str, tp: TopicPartition) -> bytes:
    return encode_versioned(
        "OffsetCommitKey",
        OFFSET_COMMIT_KEY_VERSION,
        {"group": group_id, "topic": tp.topic, "partition": tp.partition},
    )


def offset_commit_value(om: OffsetAndMetadata) -> bytes:
    return encode_versioned(
        "OffsetCommitValue",
        OFFSET_COMMIT_VALUE_VERSION,
        {
            "offset": om.offset,
            "leader_epoch": om.leader_epoch,
            "metadata": om.metadata,
            "commit_timestamp": om.commit_timestamp,
        },
    )


def group_metadata_key(group_id: str) -> bytes:
    return encode_versioned("GroupMetadataKey", GROUP_METADATA_KEY_VERSION, {"group": group_id})


def group_metadata_value(group: GroupMetadata, assignment: Mapping[str, bytes]) -> bytes:
    protocol = group.protocol_name
    members = [
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "rebalance_timeout": m.rebalance_timeout_ms,
            "session_timeout": m.session_timeout_ms,
            "subscription": m.metadata(protocol) if protocol is not None else b"",
            "assignment": assignment.get(m.member_id, b""),
        }
        for m in group.all_members()
    ]
    return encode_versioned(
        "GroupMetadataValue",
        GROUP_METADATA_VALUE_VERSION,
        {
            "protocol_type": group.protocol_type or "",
            "generation": group.generation_id,
            "protocol": protocol,
            "leader": group.leader_id,
            "current_state_timestamp": group.current_state_timestamp,
            "members": members,
        },
    )


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    tp: TopicPartition


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


def decode_key(key: bytes) -> OffsetKey | GroupKey | None:
    """The key of a ``__consumer_offsets`` record, or None for key versions this broker does not know."""
    (version,) = _INT16.unpack_from(key, 0)
    if version in (0, 1):
        _, body = decode_versioned("OffsetCommitKey", key)
        return OffsetKey(body["group"], TopicPartition(body["topic"], body["partition"]))
    if version == 2:
        _, body = decode_versioned("GroupMetadataKey", key)
        return GroupKey(body["group"])
    return None


def decode_offset_value(value: bytes) -> OffsetAndMetadata:
    _, v = decode_versioned("OffsetCommitValue", value)
    return OffsetAndMetadata(
        offset=v["offset"],
        leader_epoch=v.get("leader_epoch", -1),
        metadata=v.get("metadata") or "",
        commit_timestamp=v["commit_timestamp"],
        expire_timestamp=v.get("expire_timestamp", -1),
    )


def decode_group_value(group_id: str, value: bytes) -> GroupMetadata:
    """A group as its last GroupMetadataValue left it: Empty when it has no members, Stable otherwise."""
    _, v = decode_versioned("GroupMetadataValue", value)
    group = GroupMetadata(group_id)
    group.protocol_type = v["protocol_type"] or None
    group.generation_id = v["generation"]
    group.protocol_name = v["protocol"]
    protocol = v["protocol"] or ""
    instance_ids: set[str] = set()
    for m in v["members"]:
        if m["member_id"] in group.members:  # not written by a coordinator: the first one stands
            continue
        instance_id = m.get("group_instance_id")
        if instance_id in instance_ids:
            continue
        if instance_id is not None:
            instance_ids.add(instance_id)
        member = MemberMetadata(
            member_id=m["member_id"],
            group_instance_id=instance_id,
            client_id=m["client_id"],
            client_host=m["client_host"],
            rebalance_timeout_ms=m.get("rebalance_timeout", -1),
            session_timeout_ms=m["session_timeout"],
            protocol_type=v["protocol_type"],
            supported_protocols=[(protocol, bytes(m["subscription"]))],
            assignment=bytes(m["assignment"]),
        )
        group.add(member)
    group.leader_id = v["leader"] if v["leader"] in group.members else group.leader_id
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
    group.current_state_timestamp = v.get("current_state_timestamp", -1)
    group.pending_sync_members = set()
    return group


# -- the manager -----------------------------------------------------------------------------------------


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupMetadataManager:
    """Reads and writes groups and offsets in ``__consumer_offsets`` through the replica manager."""

    def __init__(self, config: object, metadata: MetadataStore, replica_manager: ReplicaManager) -> None:
        get = config.get  # type: ignore[attr-defined]
        self.configured_partitions = int(get("offsets.topic.num.partitions"))
        self.replication_factor = int(get("offsets.topic.replication.factor"))
        self.segment_bytes = int(get("offsets.topic.segment.bytes"))
        self.metadata = metadata
        self.replica_manager = replica_manager
        # Kafka 4 writes with acks=all always (offsets.commit.required.acks is gone); this bounds the wait.
        self.writes = DeferredWriteQueue(replica_manager, int(get("offsets.commit.timeout.ms")))
        # group id -> offset of the GroupMetadataValue it was last loaded from (which form of a group is the later)
        self.metadata_loaded_at: dict[str, int] = {}
        self._unwritable: dict[int, tuple[float, str]] = {}  # partition -> (until, on monotonic time; why)
        self.share_groups_seen = False  # a share group's record was among those loaded (their coordinator reads them)

    @property
    def num_partitions(self) -> int:
        """The partitions of ``__consumer_offsets``: those the topic has once it exists (created by the
        coordinator, or by hand with another count), which win over ``offsets.topic.num.partitions``."""
        topic = self.metadata.topic(OFFSETS_TOPIC)
        return len(topic.partitions) if topic is not None and topic.partitions else self.configured_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def topic_partition_for(self, group_id: str) -> TopicPartition:
        return TopicPartition(OFFSETS_TOPIC, self.partition_for(group_id))

    async def maybe_create_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` the first time a group needs it (Kafka creates it lazily too), with
        ``offsets.topic.replication.factor`` replicas. While fewer brokers are alive it is not created (as in
        Kafka: COORDINATOR_NOT_AVAILABLE, which clients retry), so a cluster starting up or with brokers down
        never gets an offsets topic with fewer replicas than configured, one it could never repair."""
        configs = {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(self.segment_bytes),
        }
        await maybe_create_internal_topic(self.metadata, OFFSETS_TOPIC, self.num_partitions, self.replication_factor,
                                          configs, "offsets.topic.replication.factor")  # fmt: skip

    # -- writes ----------------------------------------------------------------------------------------
    #
    # Every write is appended as leader with acks=all and returns a DeferredWrite: its ``apply`` runs once the
    # ISR has the records, in log order with the partition's other writes (``deferred_writes``); ``complete``
    # waits for that, at most ``offsets.commit.timeout.ms``, and answers Kafka's error for the client.

    def _append(
        self,
        group_id: str,
        records: list[Record],
        *,
        offsets: bool,
        producer: tuple[int, int] | None = None,
        verification_guard: VerificationGuard | None = None,
        apply: Apply | None = None,
    ) -> DeferredWrite:
        tp = self.topic_partition_for(group_id)
        if self.metadata.topic(OFFSETS_TOPIC) is None:  # FindCoordinator creates it: a client asks that first
            raise KafkaError(
                coordinator_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, offsets=offsets),
                f"{OFFSETS_TOPIC} does not exist yet",
            )
        if producer is None:
            batch = build_batch(records)
        else:
            batch = build_batch(records, producer_id=producer[0], producer_epoch=producer[1], is_transactional=True)
        try:
            info = self.replica_manager.append_records(
                tp, memoryview(batch), -1, verification_guard=verification_guard
            )
        except KafkaError as e:
            if e.code == ErrorCode.KAFKA_STORAGE_ERROR:
                if tp.partition not in self._unwritable:
                    log.warning(
                        "%s cannot be written (%s): its groups' coordinator is unavailable, retried every %g s",
                        tp,
                        e.message,
                        UNWRITABLE_BACKOFF_S,
                    )
                self._unwritable[tp.partition] = (time.monotonic() + UNWRITABLE_BACKOFF_S, e.message)
            raise KafkaError(coordinator_error(e.code, offsets=offsets), e.message) from e
        if self._unwritable.pop(tp.partition, None) is not None:
            log.info("%s can be written again: its groups' coordinator is available", tp)
        return self.writes.appended(tp, info.first_offset, info.last_offset + 1, apply)

    @staticmethod
    def outcome(write: DeferredWrite, *, offsets: bool) -> ErrorCode | None:
        """What ``complete`` answers, when it is known already (the write was replicated as it was appended)."""
        code = write.code
        return code if code is None or code == ErrorCode.NO_ERROR else coordinator_error(code, offsets=offsets)

    async def complete(self, write: DeferredWrite, *, offsets: bool) -> ErrorCode:
        """Wait until ``write`` is replicated (``offsets.commit.timeout.ms`` at most): NO_ERROR, or Kafka's
        coordinator error for what prevented it (COORDINATOR_NOT_AVAILABLE for a timeout or too small an ISR,
        NOT_COORDINATOR when leadership moved)."""
        code = await self.writes.wait(write)
        return code if code == ErrorCode.NO_ERROR else coordinator_error(code, offsets=offsets)

    def unavailable_reason(self, group_id: str) -> str | None:
        """Why the coordinator of ``group_id`` is not offered now (its partition failed a write for lack of
        storage less than ``UNWRITABLE_BACKOFF_S`` ago), or None."""
        if not self._unwritable:
            return None
        failed = self._unwritable.get(self.partition_for(group_id))
        if failed is None or time.monotonic() >= failed[0]:
            return None
        return f"the group's partition of {OFFSETS_TOPIC} cannot be written: {failed[1]}"

    def store_group(self, group: GroupMetadata, assignment: Mapping[str, bytes]) -> DeferredWrite:
        """The group's metadata and members' assignments (a GroupMetadataValue)."""
        now = _now_ms()
        value = group_metadata_value(group, assignment)
        return self._append(group.group_id, [Record(0, now, group_metadata_key(group.group_id), value)], offsets=False)

    def store_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        apply: Callable[[Mapping[TopicPartition, OffsetAndMetadata]], None],
    ) -> DeferredWrite:
        """OffsetCommit: one record per partition; ``apply`` gets the offsets with their records' offsets."""
        return self._append(group_id, self._offset_records(group_id, offsets), offsets=True,
                            apply=_with_record_offsets(offsets, apply))  # fmt: skip

    def store_txn_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        producer_id: int,
        producer_epoch: int,
        apply: Callable[[Mapping[TopicPartition, OffsetAndMetadata]], None],
        verification_guard: VerificationGuard | None = None,
    ) -> DeferredWrite:
        """TxnOffsetCommit: the offsets as one transactional batch of the producer (its id and epoch, base
        sequence -1), which the transaction's marker on this partition commits or aborts."""
        return self._append(group_id, self._offset_records(group_id, offsets), offsets=True,
                            producer=(producer_id, producer_epoch), verification_guard=verification_guard,
                            apply=_with_record_offsets(offsets, apply))  # fmt: skip

    @staticmethod
    def _offset_records(group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> list[Record]:
        now = _now_ms()
        return [Record(0, now, offset_commit_key(group_id, tp), offset_commit_value(om)) for tp, om in offsets.items()]

    def write_tombstones(
        self, group_id: str, tps: Iterable[TopicPartition], *, group: bool, apply: Apply | None = None
    ) -> DeferredWrite | None:
        """Delete offsets (and the group's metadata record when ``group``) by writing null values; None when
        there is nothing to write."""
        now = _now_ms()
        records = [Record(0, now, offset_commit_key(group_id, tp), None) for tp in tps]
        if group:
            records.append(Record(0, now, group_metadata_key(group_id), None))
        if not records:
            return None
        return self._append(group_id, records, offsets=False, apply=apply)

    # -- load ------------------------------------------------------------------------------------------

    def leads(self, partition: int) -> bool:
        """Whether this broker leads ``__consumer_offsets`` partition ``partition`` (so coordinates its
        groups); True before the topic exists (the first write says why it cannot be made)."""
        topic = self.metadata.topic(OFFSETS_TOPIC)
        if topic is None or partition >= len(topic.partitions):
            return True
        return topic.partitions[partition].leader == self.replica_manager.node_id

    def led_partitions(self) -> dict[int, int]:
        """The partitions of ``__consumer_offsets`` this broker leads, with their leader epochs."""
        topic = self.metadata.topic(OFFSETS_TOPIC)
        if topic is None:
            return {}
        node = self.replica_manager.node_id
        return {s.partition: s.leader_epoch for s in topic.partitions if s.leader == node}

    def load_all(self, partitions: Iterable[int] | None = None) -> dict[str, GroupMetadata]:
        """Replay the local ``__consumer_offsets`` partitions this broker leads (or ``partitions``) into groups."""
        groups: dict[str, GroupMetadata] = {}
        topic = self.metadata.topic(OFFSETS_TOPIC)
        if topic is None:
            return groups
        started = time.monotonic()
        count = 0
        wanted = set(self.led_partitions() if partitions is None else partitions)
        for state in topic.partitions:
            if state.partition not in wanted:
                continue
            tp = TopicPartition(OFFSETS_TOPIC, state.partition)
            partition = self.replica_manager.partitions().get(tp)
            if partition is None:
                continue
            count += self._load_partition(partition.log, groups)
        log.info(
            "Loaded %d group(s) from %d record(s) of %s in %.1f ms",
            len(groups),
            count,
            OFFSETS_TOPIC,
            (time.monotonic() - started) * 1000,
        )
        return groups

    def _load_partition(self, plog: object, groups: dict[str, GroupMetadata]) -> int:
        """Replay one partition's log into ``groups`` by the rules the coordinator applies its writes with:
        the latest record of each key wins; a transaction's offsets stay pending per producer until its marker,
        whose commit keeps, per partition, the newer of them and the committed offset by log order; a tombstone
        removes an offset, with the pending offsets of that partition; a group's tombstone removes the group with
        its offsets, unless records of a consumer group of that id follow (the tombstone was written by an upgrade:
        the offsets are the consumer group's).

        A record that cannot be read is logged and skipped, a batch that cannot be read likewise; a log that
        cannot be read further ends the replay there. None of them stops the load: the bytes may be any."""
        # offsets and pending offsets per group (kept apart from its metadata, which a later record replaces)
        shells: dict[str, GroupMetadata] = {}
        metadata: dict[str, tuple[int, bytes | None]] = {}  # group -> (offset, latest GroupMetadataValue)
        tp: TopicPartition = plog.topic_partition  # type: ignore[attr-defined]
        unreadable = UnreadableRecords(tp)
        count = 0

        def shell(group_id: str) -> GroupMetadata:
            found = shells.get(group_id)
            if found is None:
                found = shells[group_id] = GroupMetadata(group_id)
            return found

        dropped: dict[str, GroupMetadata] = {}  # the offsets of groups whose tombstone was replayed

        def restore(group_id: str) -> None:
            """A consumer group's record after the group's tombstone: its offsets are the consumer group's."""
            gone = dropped.pop(group_id)
            group = shell(group_id)
            for tp, om in gone.offsets.items():
                group.offsets.setdefault(tp, om)
            for producer_id, pending in gone.pending_txn_offsets.items():
                group.pending_txn_offsets[producer_id] = {**pending, **group.pending_txn_offsets.get(producer_id, {})}

        def replay(record: Record, producer_id: int, transactional: bool) -> None:
            if is_consumer_group_key(record.key):
                assert record.key is not None
                group_id = consumer_group_id(record.key)
                if group_id is not None and group_id in dropped and not transactional:
                    restore(group_id)
                return
            key = decode_key(record.key) if record.key is not None else None
            if key is None and is_share_group_key(record.key):
                self.share_groups_seen = True
            if isinstance(key, OffsetKey):
                group = shell(key.group_id)
                if record.value is None:
                    if transactional:
                        group.pending_txn_offsets.get(producer_id, {}).pop(key.tp, None)
                    else:
                        group.remove_offsets([key.tp])
                        if key.group_id in dropped:
                            dropped[key.group_id].remove_offsets([key.tp])
                else:
                    om = replace(decode_offset_value(record.value), record_offset=record.offset)
                    if transactional:
                        group.add_pending_txn_offsets(producer_id, {key.tp: om})
                    else:
                        group.offsets[key.tp] = om
            elif isinstance(key, GroupKey) and not transactional:
                metadata[key.group_id] = (record.offset, record.value)
                if record.value is None:
                    # The group is deleted, with its offsets (any committed just before too: a commit not yet
                    # applied when the group was deleted) and its pending ones; set aside, they come back if a
                    # consumer group of that id follows (the tombstone was an upgrade's: they are its offsets).
                    gone = shells.pop(key.group_id, None)
                    if gone is not None:
                        dropped[key.group_id] = gone
                else:
                    dropped.pop(key.group_id, None)

        for chunk in iter_log_chunks(plog, tp):
            for batch in chunk:
                try:
                    records = decode_batch_records(batch.view)
                except KafkaError as e:
                    unreadable.skip(batch.base_offset, f"its batch does not decode: {e.message}")
                    continue
                if batch.attributes & 0x20:  # control batch: a transaction's marker
                    commit = _is_commit_marker(records)
                    for group in [*shells.values(), *dropped.values()]:
                        group.complete_txn(batch.producer_id, commit)
                    continue
                transactional = bool(batch.attributes & 0x10)  # TxnOffsetCommit
                for record in records:
                    count += 1
                    try:
                        replay(record, batch.producer_id, transactional)
                    except Exception as e:
                        unreadable.skip(record.offset, e)
        for group_id, (at, value) in metadata.items():
            if value is None:
                continue
            try:
                groups[group_id] = decode_group_value(group_id, value)
                self.metadata_loaded_at[group_id] = at
            except Exception as e:
                unreadable.skip(at, e)
        for group_id, found in shells.items():
            if not found.offsets and not found.pending_txn_offsets:
                continue
            target = groups.get(group_id)
            if target is None:
                target = groups[group_id] = GroupMetadata(group_id)
            target.offsets.update(found.offsets)
            for producer_id, pending in found.pending_txn_offsets.items():
                target.add_pending_txn_offsets(producer_id, pending)
        unreadable.done()
        return count


def _with_record_offsets(
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    apply: Callable[[Mapping[TopicPartition, OffsetAndMetadata]], None],
) -> Apply:
    """The effect of an offsets write: ``apply`` given the offsets with the offsets of their records (one
    record per partition, in order, from the batch's base offset)."""
    items = list(offsets.items())

    def applied(base_offset: int) -> None:
        apply({
            tp: OffsetAndMetadata(om.offset, om.leader_epoch, om.metadata, om.commit_timestamp, om.expire_timestamp,
                                  base_offset + i)
            for i, (tp, om) in enumerate(items)
        })  # fmt: skip

    return applied


def _is_commit_marker(records: list[Record]) -> bool:
    """Whether a control batch's records are a commit marker (the key: int16 version, int16 type, 1 = commit)."""
    for record in records:
        if record.key is not None and len(record.key) >= 4:
            return bool(struct.unpack_from(">h", record.key, 2)[0] == 1)
    return False


def coordinator_error(code: ErrorCode, *, offsets: bool) -> ErrorCode:
    """Kafka's mapping of a failed append to ``__consumer_offsets`` onto the errors group clients expect."""
    if code in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (
        ErrorCode.MESSAGE_SIZE_TOO_LARGE,
        ErrorCode.RECORD_LIST_TOO_LARGE,
        ErrorCode.INVALID_FETCH_SIZE,
    ):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE if offsets else ErrorCode.UNKNOWN_SERVER_ERROR
    return code
