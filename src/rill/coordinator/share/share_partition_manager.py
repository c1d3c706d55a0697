"""ShareFetch and ShareAcknowledge on the partition leader: share sessions, the share partitions of each group,
and reading the log for them through the replica manager.

A share session belongs to one member of one group; ShareSessionEpoch 0 opens it with the partitions listed,
each later request carries the next epoch and lists only partitions to add (and forgotten ones to drop), and -1
closes it (its acknowledgements are applied, then what the member still holds is released). A share partition
is created on its group's first fetch of it: from the persisted state when there is one, otherwise where the
group's ``share.auto.offset.reset`` says (the log end by default). Under the group's ``share.isolation.level``
read_committed, fetches read up to the last stable offset and records of aborted transactions are gaps, never
delivered.

AlterShareGroupOffsets and DeleteShareGroupOffsets (of an empty group) go through ``alter_start_offsets`` and
``delete_state``: the state of the partitions named is replaced or forgotten, and persisted before they return.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rill.common import TopicPartition
from rill.coordinator.share.share_group_config import READ_COMMITTED, auto_offset_reset_of, isolation_level_of
from rill.coordinator.share.share_partition import AcquiredRange, SharePartition
from rill.coordinator.share.share_state import GroupState, ShareStateStore
from rill.errors import ErrorCode, KafkaError
from rill.records.batch import BATCH_HEADER_SIZE, iter_batches

if TYPE_CHECKING:
    from rill.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

FINAL_EPOCH = -1
INITIAL_EPOCH = 0
_NOT_SERVED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR})  # fmt: skip


@dataclass(frozen=True, slots=True)
class ShareTopicPartition:
    topic_id: uuid.UUID
    topic: str | None  # None when this broker knows no topic with the id
    partition: int

    @property
    def key(self) -> tuple[uuid.UUID, int]:
        return self.topic_id, self.partition


@dataclass(slots=True)
class ShareSession:
    epoch: int
    partitions: dict[tuple[uuid.UUID, int], ShareTopicPartition] = field(default_factory=dict)


@dataclass(slots=True)
class PartitionFetch:
    """One partition's share in a ShareFetch response."""

    tp: ShareTopicPartition
    error: ErrorCode = ErrorCode.NO_ERROR
    records: bytes = b""
    acquired: list[AcquiredRange] = field(default_factory=list)


def now_ms() -> int:
    return int(time.monotonic() * 1000)


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _no_configs(group_id: str) -> Mapping[str, str]:
    return {}


class SharePartitionManager:
    def __init__(
        self,
        replica_manager: ReplicaManager,
        store: ShareStateStore | None,
        *,
        lock_duration_ms: int,
        delivery_count_limit: int,
        max_in_flight: int,
        clock: Callable[[], int] = now_ms,
        group_configs: Callable[[str], Mapping[str, str]] = _no_configs,
        wall_clock: Callable[[], int] = _wall_ms,
    ) -> None:
        self._rm = replica_manager
        self._store = store
        self.lock_duration_ms = lock_duration_ms
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight = max_in_flight
        self._clock = clock
        self._group_configs = group_configs  # a group's GROUP configs (share.auto.offset.reset, ...)
        self._wall_clock = wall_clock
        self.partitions: dict[tuple[str, uuid.UUID, int], SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._loaded: dict[str, GroupState] = {}
        self._dirty: set[str] = set()
        self._write_lock = asyncio.Lock()

    # -- sessions ------------------------------------------------------------------------------------

    def open_or_update_session(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        add: list[ShareTopicPartition],
        forget: list[tuple[uuid.UUID, int]],
    ) -> tuple[ErrorCode, ShareSession | None]:
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            old = self.sessions.pop(key, None)
            if old is not None:  # a new session replaces the old one: what it held goes back
                self.release_member(group_id, member_id)
            session = ShareSession(1, {tp.key: tp for tp in add})
            self.sessions[key] = session
            return ErrorCode.NO_ERROR, session
        existing = self.sessions.get(key)
        if existing is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND, None
        session = existing
        if epoch == FINAL_EPOCH:
            return ErrorCode.NO_ERROR, session
        if epoch != session.epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None
        session.epoch += 1
        for tp in add:
            session.partitions[tp.key] = tp
        for k in forget:
            session.partitions.pop(k, None)
        return ErrorCode.NO_ERROR, session

    def close_session(self, group_id: str, member_id: str) -> None:
        if self.sessions.pop((group_id, member_id), None) is not None:
            self.release_member(group_id, member_id)

    def release_member(self, group_id: str, member_id: str) -> None:
        """The member left the group, timed out or closed its session: what it held is available again."""
        for (g, _, _), sp in self.partitions.items():
            if g == group_id and sp.release_member(member_id):
                self._dirty.add(group_id)

    # -- share partitions ----------------------------------------------------------------------------

    def share_partition(self, group_id: str, tp: ShareTopicPartition) -> tuple[ErrorCode, SharePartition | None]:
        if tp.topic is None:
            return ErrorCode.UNKNOWN_TOPIC_ID, None
        key = (group_id, tp.topic_id, tp.partition)
        sp = self.partitions.get(key)
        if sp is not None:
            return ErrorCode.NO_ERROR, sp
        probe = self._rm.read(TopicPartition(tp.topic, tp.partition), 0, 0, min_one_batch=False)
        if probe.error in _NOT_SERVED or probe.high_watermark < 0:
            return probe.error or ErrorCode.NOT_LEADER_OR_FOLLOWER, None
        sp = SharePartition(
            self._initial_offset(group_id, tp, probe.log_start_offset, probe.high_watermark),
            lock_duration_ms=self.lock_duration_ms,
            delivery_count_limit=self.delivery_count_limit,
            max_in_flight=self.max_in_flight,
        )
        persisted = self._group_state(group_id).get((tp.topic_id.hex, tp.partition))
        if persisted is not None:
            sp.restore(persisted[0], persisted[1])
        else:
            self._dirty.add(group_id)
        sp.move_start_to(probe.log_start_offset)
        self.partitions[key] = sp
        return ErrorCode.NO_ERROR, sp

    def _initial_offset(self, group_id: str, tp: ShareTopicPartition, log_start: int, high_watermark: int) -> int:
        """Where a share partition the group has no state for starts (``share.auto.offset.reset``)."""
        strategy = auto_offset_reset_of(self._group_configs(group_id))
        if strategy.kind == "earliest":
            return log_start
        if strategy.kind == "by_duration" and tp.topic is not None:
            try:
                partition = self._rm.leader_partition(TopicPartition(tp.topic, tp.partition))
            except KafkaError:
                return high_watermark
            hit = partition.log.fetch_offset_by_timestamp(self._wall_clock() - strategy.duration_ms)
            if hit is not None and hit[0] < high_watermark:
                return max(hit[0], log_start)
        return high_watermark

    async def alter_start_offsets(self, group_id: str, offsets: Mapping[tuple[uuid.UUID, int], int]) -> None:
        """AlterShareGroupOffsets of an empty group: each share partition named starts afresh at its offset (the
        SPSO; nothing in flight, raised to the log start at its first fetch if below), persisted on return."""
        state = self._group_state(group_id)
        for (topic_id, p), offset in offsets.items():
            self.partitions.pop((group_id, topic_id, p), None)
            state[(topic_id.hex, p)] = (offset, [])
        self._dirty.add(group_id)
        await self.flush()

    async def delete_state(self, group_id: str, keys: Iterable[tuple[uuid.UUID, int]]) -> None:
        """DeleteShareGroupOffsets of an empty group: the state of the share partitions named is forgotten (a
        later fetch starts them again from ``share.auto.offset.reset``), persisted on return."""
        state = self._group_state(group_id)
        for topic_id, p in keys:
            self.partitions.pop((group_id, topic_id, p), None)
            state.pop((topic_id.hex, p), None)
        self._dirty.add(group_id)
        await self.flush()

    def _group_state(self, group_id: str) -> GroupState:
        if group_id not in self._loaded:
            self._loaded[group_id] = self._store.read(group_id) if self._store is not None else {}
        return self._loaded[group_id]

    async def flush(self) -> None:
        """Persist the state of every group changed since the last flush; returns once every change made before
        it is on disk (callers answer after it). Files are written in a worker thread, one flush at a time, each
        state taken when its write starts, so the disk never goes back to an older state."""
        if self._store is None:
            self._dirty.clear()
            return
        async with self._write_lock:
            groups, self._dirty = sorted(self._dirty), set()
            for group_id in groups:
                state: GroupState = dict(self._group_state(group_id))
                for (g, topic_id, p), sp in self.partitions.items():
                    if g == group_id:
                        state[(topic_id.hex, p)] = (sp.start_offset, sp.snapshot())
                self._loaded[group_id] = state
                await asyncio.to_thread(self._store.write, group_id, state)

    async def delete_group(self, group_id: str) -> None:
        """Forget a share group's partitions, sessions and persisted state (DeleteGroups of an empty group)."""
        async with self._write_lock:
            for key in [k for k in self.partitions if k[0] == group_id]:
                del self.partitions[key]
            for session in [k for k in self.sessions if k[0] == group_id]:
                del self.sessions[session]
            self._loaded.pop(group_id, None)
            self._dirty.discard(group_id)
            if self._store is not None:
                await asyncio.to_thread(self._store.delete, group_id)

    def groups_with_state(self) -> list[str]:
        """The groups that have a share-partition state, in memory or persisted (a restarted broker's groups)."""
        stored = self._store.groups() if self._store is not None else []
        return sorted(g for g in {*stored, *self._loaded, *(k[0] for k in self.partitions)} if self.has_state(g))

    def has_state(self, group_id: str) -> bool:
        return bool(self.start_offsets(group_id))

    def start_offsets(self, group_id: str) -> dict[tuple[uuid.UUID, int], int]:
        """Each share partition of the group with its start offset (SPSO), from memory or the persisted state."""
        out: dict[tuple[uuid.UUID, int], int] = {}
        for (tid_hex, p), (start, _) in self._group_state(group_id).items():
            try:
                out[(uuid.UUID(hex=tid_hex), p)] = start
            except ValueError:
                continue
        for (g, topic_id, p), sp in self.partitions.items():
            if g == group_id:
                out[(topic_id, p)] = sp.start_offset
        return out

    # -- acknowledgements ----------------------------------------------------------------------------

    def acknowledge(
        self,
        group_id: str,
        member_id: str,
        tp: ShareTopicPartition,
        batches: list[tuple[int, int, list[int]]],
        *,
        renew: bool = False,
    ) -> ErrorCode:
        code, sp = self.share_partition(group_id, tp)
        if sp is None:
            return code
        code = sp.acknowledge(member_id, batches, self._clock(), renew=renew)
        if code == ErrorCode.NO_ERROR:
            self._dirty.add(group_id)
        return code

    # -- fetching ------------------------------------------------------------------------------------

    async def fetch(
        self,
        group_id: str,
        member_id: str,
        tps: list[ShareTopicPartition],
        max_wait_ms: int,
        max_bytes: int,
        max_records: int,
        *,
        record_limit: bool = False,
    ) -> list[PartitionFetch]:
        """Acquire records for the member from its session's partitions, waiting up to ``max_wait_ms`` for some
        to be available (new records appended, or a lock expiring). With ``record_limit`` (KIP-1206) no more
        than ``max_records`` are acquired, even inside a batch."""
        deadline = time.monotonic() + max(max_wait_ms, 0) / 1000.0
        while True:
            results = self._acquire_all(group_id, member_id, tps, max_bytes, max_records, record_limit)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or any(r.acquired or r.error for r in results) or not tps:
                await self.flush()
                return results
            if self._dirty:  # (a lock expired into the archive, a share partition was made): persist, then look
                await self.flush()  # again, as records may have been appended meanwhile, unseen by a waiter
                continue
            wait = remaining
            for tp in tps:
                sp = self.partitions.get((group_id, tp.topic_id, tp.partition))
                lock = sp.next_lock_deadline_ms() if sp is not None else None
                if lock is not None:
                    wait = min(wait, max(lock - self._clock(), 1) / 1000.0)
            watch = [TopicPartition(tp.topic, tp.partition) for tp in tps if tp.topic is not None]
            await self._rm.wait_for_appends(watch, wait)
            await asyncio.sleep(0)

    def _acquire_all(
        self,
        group_id: str,
        member_id: str,
        tps: list[ShareTopicPartition],
        max_bytes: int,
        max_records: int,
        record_limit: bool,
    ) -> list[PartitionFetch]:
        results: list[PartitionFetch] = []
        used = 0
        left = max_records
        for tp in tps:
            result = PartitionFetch(tp)
            results.append(result)
            code, sp = self.share_partition(group_id, tp)
            if sp is None:
                result.error = code
                continue
            if left <= 0 or used >= max_bytes:
                continue
            self._acquire_one(group_id, member_id, tp, sp, result, max_bytes - used, used == 0, left, record_limit)
            used += len(result.records)
            left -= sum(r.last_offset - r.first_offset + 1 for r in result.acquired)
        return results

    def _acquire_one(
        self,
        group_id: str,
        member_id: str,
        tp: ShareTopicPartition,
        sp: SharePartition,
        result: PartitionFetch,
        max_bytes: int,
        first: bool,
        max_records: int,
        record_limit: bool,
    ) -> None:
        assert tp.topic is not None
        now = self._clock()
        if sp.expire_locks(now):
            self._dirty.add(group_id)
        if not sp.has_available() and not sp.can_acquire_new():
            return
        offset = sp.next_fetch_offset()
        level = isolation_level_of(self._group_configs(group_id))
        read = self._rm.read(
            TopicPartition(tp.topic, tp.partition), offset, max_bytes, min_one_batch=first, isolation_level=level
        )
        if read.error == ErrorCode.OFFSET_OUT_OF_RANGE and read.log_start_offset >= 0:
            sp.move_start_to(read.log_start_offset)
            self._dirty.add(group_id)
            return
        if read.error:
            result.error = read.error
            return
        if read.log_start_offset > sp.start_offset:
            sp.move_start_to(read.log_start_offset)
            self._dirty.add(group_id)
        data = b"".join(os.pread(r.fd, r.length, r.position) for r in read.regions)
        spans: list[tuple[int, int, int]] = []  # (base offset, last offset, end position) of whole batches
        batches: list[tuple[int, int]] = []
        gaps: list[tuple[int, int]] = []  # batches never delivered: transaction markers, aborted transactions
        aborted = sorted(read.aborted_transactions or [], key=lambda a: a[1]) if level == READ_COMMITTED else []
        aborting: set[int] = set()  # producers inside an aborted transaction at this point of the read
        try:
            for pos, header in iter_batches(data[: _whole_batches(data)]):
                spans.append((header.base_offset, header.last_offset, pos + header.size))
                while aborted and aborted[0][1] <= header.last_offset:
                    aborting.add(aborted.pop(0)[0])
                if header.is_control:  # a marker ends its producer's transaction; its offset is a gap
                    aborting.discard(header.producer_id)
                    gaps.append((header.base_offset, header.last_offset))
                elif header.is_transactional and header.producer_id in aborting:
                    gaps.append((header.base_offset, header.last_offset))
                else:
                    batches.append((header.base_offset, header.last_offset))
        except Exception as e:  # a log this broker wrote that it cannot parse: deliver nothing from here
            log.warning("share fetch of %s-%d at %d: unreadable batch (%s)", tp.topic, tp.partition, offset, e)
            result.error = ErrorCode.CORRUPT_MESSAGE
            return
        acquired = sp.acquire(member_id, batches, now, max_records, record_limit=record_limit)
        left = [b for b in batches if b[1] >= sp.end_offset]
        tail = [g for g in gaps if g[1] >= sp.end_offset]
        if tail and not left:  # the read ends in gaps only: read on past them next time
            sp.skip_to(max(last for _, last in tail) + 1)
            self._dirty.add(group_id)
        if not acquired:
            return
        self._dirty.add(group_id)
        last = acquired[-1].last_offset
        end = next((e for _, lo, e in spans if lo >= last), len(data))
        result.records = data[:end]
        result.acquired = acquired


def _whole_batches(data: bytes) -> int:
    """The length of the prefix of ``data`` that holds whole batches (a read may end inside one)."""
    pos = 0
    while len(data) - pos >= BATCH_HEADER_SIZE:
        size = int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
        if pos + size > len(data):
            break
        pos += size
    return pos
