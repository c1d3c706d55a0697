"""ShareFetch and ShareAcknowledge on the partition leader: share sessions, the share partitions of each group,
and reading the log for them through the replica manager.

A share session belongs to one member of one group; ShareSessionEpoch 0 opens it with the partitions listed,
each later request carries the next epoch and lists only partitions to add (and forgotten ones to drop), and -1
closes it (its acknowledgements are applied, then what the member still holds is released).

A share partition's state is kept by the share coordinator through a ``Persister``: the leader reads it
(ReadShareGroupState, with its leader epoch) before it serves the first ShareFetch of the partition at that
epoch; one never initialized starts at the log end (``share.auto.offset.reset`` latest, Kafka's default) and is
written. Every change is written (WriteShareGroupState) before the ShareFetch or ShareAcknowledge that made it is
answered (``flush``). A share partition whose leader epoch moved (leadership lost, or gained again) is dropped
and read again; so is one whose write failed, so the next fetch starts from what is durable. A write fenced by a
newer leader epoch (a new leader read the state) tells this broker it is a stale leader.

The group's ``share.auto.offset.reset`` says where a share partition never initialized starts (the log end by
default); under its ``share.isolation.level`` read_committed, fetches read up to the last stable offset and
records of aborted transactions are gaps, never delivered. AlterShareGroupOffsets and DeleteShareGroupOffsets
(of an empty group) go through ``alter_start_offsets`` and ``delete_state``: the state is written at the share
coordinator (a new state epoch, which fences a leader's older copy) or deleted there before they return.
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
from rill.coordinator.share.share_partition import AcquiredRange, SharePartition, StateBatch
from rill.coordinator.share.share_persister import PartitionState, Persister
from rill.errors import ErrorCode, KafkaError
from rill.records.batch import BATCH_HEADER_SIZE, iter_batches

if TYPE_CHECKING:
    from rill.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

FINAL_EPOCH = -1
INITIAL_EPOCH = 0
_NOT_SERVED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR})  # fmt: skip

ShareKey = tuple[str, uuid.UUID, int]  # (group, topic id, partition)
MIN_READ_WAIT_S = 0.5  # how long a ShareFetch waits for the state of its partitions at least


def client_error(code: ErrorCode) -> ErrorCode:
    """What a share consumer is told when the share state of a partition could not be read or written (Kafka's
    mapping): a fenced leader epoch is a moved leader; the coordinator's own errors are its unavailability."""
    if code == ErrorCode.FENCED_LEADER_EPOCH:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NETWORK_EXCEPTION,
                ErrorCode.REQUEST_TIMED_OUT):  # fmt: skip
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return code


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
    last_used: float = field(default_factory=time.monotonic)  # (monotonic s) its last fetch or acknowledgement


@dataclass(slots=True)
class PartitionFetch:
    """One partition's share in a ShareFetch response."""

    tp: ShareTopicPartition
    error: ErrorCode = ErrorCode.NO_ERROR
    records: bytes = b""
    acquired: list[AcquiredRange] = field(default_factory=list)
    change: int = 0  # the number of the change the acquisition made (``SharePartitionManager.outcome``)


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
        persister: Persister | None,
        *,
        lock_duration_ms: int,
        delivery_count_limit: int,
        max_in_flight: int,
        clock: Callable[[], int] = now_ms,
        group_configs: Callable[[str], Mapping[str, str]] = _no_configs,
        wall_clock: Callable[[], int] = _wall_ms,
        stored_groups: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        self._rm = replica_manager
        self.persister = persister
        self.lock_duration_ms = lock_duration_ms
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight = max_in_flight
        self._clock = clock
        self._group_configs = group_configs  # a group's GROUP configs (share.auto.offset.reset, ...)
        self.stored_groups = stored_groups  # the groups whose state this broker's share coordinator holds
        self._wall_clock = wall_clock
        self.partitions: dict[ShareKey, SharePartition] = {}
        self.epochs: dict[ShareKey, tuple[int, int]] = {}  # (leader epoch, state epoch) each was read at
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._loading: dict[ShareKey, asyncio.Future[ErrorCode]] = {}
        self._reads: set[asyncio.Future[ErrorCode]] = set()
        # Each change of a share partition takes the next sequence number; a change is durable once a write of
        # a state taken after it succeeded, and lost when its share partition was dropped before that.
        self._seq = 0
        self._dirty: dict[ShareKey, int] = {}  # the latest change not yet written
        self._durable: dict[ShareKey, int] = {}
        self._losses: dict[ShareKey, list[tuple[int, int, ErrorCode]]] = {}  # (durable then, lost up to, why)
        self._key_locks: dict[ShareKey, asyncio.Lock] = {}  # one write of a share partition at a time
        self._writing: dict[asyncio.Future[ErrorCode], ShareKey] = {}  # writes going on

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
        session.last_used = time.monotonic()
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

    def idle_sessions(self, idle_s: float) -> list[tuple[str, str]]:
        """The (group, member) of the sessions not used for ``idle_s`` seconds."""
        before = time.monotonic() - idle_s
        return [key for key, session in self.sessions.items() if session.last_used < before]

    def close_session(self, group_id: str, member_id: str) -> None:
        if self.sessions.pop((group_id, member_id), None) is not None:
            self.release_member(group_id, member_id)

    def release_member(self, group_id: str, member_id: str) -> None:
        """The member left the group, timed out or closed its session: what it held is available again."""
        for key, sp in self.partitions.items():
            if key[0] == group_id and sp.release_member(member_id):
                self._changed(key)

    # -- share partitions ----------------------------------------------------------------------------

    def _leader_epoch(self, tp: ShareTopicPartition) -> int | None:
        """The leader epoch of the partition when this broker leads it now, else None."""
        if tp.topic is None:
            return None
        partition = self._rm.partitions().get(TopicPartition(tp.topic, tp.partition))
        if partition is None or not partition.is_leader:
            return None
        return partition.leader_epoch

    def _changed(self, key: ShareKey) -> None:
        self._seq += 1
        self._dirty[key] = self._seq

    def _lost(self, key: ShareKey, upto: int, code: ErrorCode) -> None:
        losses = self._losses.setdefault(key, [])
        losses.append((self._durable.get(key, 0), upto, code))
        del losses[:-8]

    def _drop(self, key: ShareKey, code: ErrorCode = ErrorCode.NOT_LEADER_OR_FOLLOWER) -> None:
        self.partitions.pop(key, None)
        self.epochs.pop(key, None)
        unwritten = self._dirty.pop(key, None)
        if unwritten is not None:
            self._lost(key, unwritten, code)

    def last_change(self, group_id: str, tp: ShareTopicPartition) -> int:
        """The sequence number of the share partition's latest change not yet written (0: none)."""
        return self._dirty.get((group_id, tp.topic_id, tp.partition), 0)

    def outcome(self, group_id: str, tp: ShareTopicPartition, change: int) -> ErrorCode:
        """After a flush: NO_ERROR when the change numbered ``change`` is durable, else why it was lost."""
        key = (group_id, tp.topic_id, tp.partition)
        if change <= 0 or self.persister is None:
            return ErrorCode.NO_ERROR
        for durable_then, lost_upto, code in self._losses.get(key, ()):
            if durable_then < change <= lost_upto:
                return code
        if self._durable.get(key, 0) >= change:
            return ErrorCode.NO_ERROR
        return ErrorCode.COORDINATOR_NOT_AVAILABLE  # not written yet: no flush since (not expected)

    def share_partition(self, group_id: str, tp: ShareTopicPartition) -> tuple[ErrorCode, SharePartition | None]:
        """The loaded share partition (``load`` reads it), while this broker leads the partition at the epoch it
        was read at; one whose leader epoch moved is dropped."""
        if tp.topic is None:
            return ErrorCode.UNKNOWN_TOPIC_ID, None
        key = (group_id, tp.topic_id, tp.partition)
        sp = self.partitions.get(key)
        epoch = self._leader_epoch(tp)
        if sp is not None and epoch is not None and self.epochs[key][0] == epoch:
            return ErrorCode.NO_ERROR, sp
        if sp is not None:
            self._drop(key)
        if epoch is None:
            probe = self._rm.read(TopicPartition(tp.topic, tp.partition), 0, 0, min_one_batch=False)
            return (probe.error if probe.error in _NOT_SERVED else ErrorCode.NOT_LEADER_OR_FOLLOWER), None
        return ErrorCode.INVALID_RECORD_STATE, None  # led, not read yet: nothing of it is acquired

    async def load(
        self, group_id: str, tps: Iterable[ShareTopicPartition], timeout_s: float | None = None
    ) -> dict[tuple[uuid.UUID, int], ErrorCode]:
        """Read the state of the share partitions of ``tps`` this broker leads and has not read at their current
        leader epoch, waiting at most ``timeout_s`` (a read still going on then goes on: its partition is served
        by a later fetch); returns the errors of those that could not be read."""
        wanted = []
        for tp in tps:
            code, sp = self.share_partition(group_id, tp)
            if sp is None and code == ErrorCode.INVALID_RECORD_STATE:
                wanted.append(tp)
        if not wanted:
            return {}
        reads = [asyncio.ensure_future(self._load_one(group_id, tp)) for tp in wanted]
        for read in reads:  # held until done: one still going on when this fetch answers finishes on its own
            self._reads.add(read)
            read.add_done_callback(self._reads.discard)
        await asyncio.wait(reads, timeout=timeout_s)
        return {tp.key: r.result() for tp, r in zip(wanted, reads, strict=True) if r.done() and r.result()}

    async def _load_one(self, group_id: str, tp: ShareTopicPartition) -> ErrorCode:
        key = (group_id, tp.topic_id, tp.partition)
        running = self._loading.get(key)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        try:
            code = await self._read_state(key, tp)
        except Exception:
            log.exception("reading the share state of %s-%s for %s failed", tp.topic, tp.partition, group_id)
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        finally:
            del self._loading[key]
        future.set_result(code)
        return code

    async def _read_state(self, key: ShareKey, tp: ShareTopicPartition) -> ErrorCode:
        assert tp.topic is not None
        epoch = self._leader_epoch(tp)
        if epoch is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        # where it starts if it never did before (share.auto.offset.reset, the log end by default), taken when
        # the group first fetches the partition
        start = self._rm.read(TopicPartition(tp.topic, tp.partition), 0, 0, min_one_batch=False)
        first = self._initial_offset(key[0], tp, start.log_start_offset, start.high_watermark)
        state = PartitionState()
        if self.persister is not None:
            code, state = await self.persister.read(key[0], (tp.topic_id, tp.partition), epoch)
            if code:
                log.info("share state of %s-%d for %s not read: %s", tp.topic, tp.partition, key[0], code.name)
                return client_error(code)
        if self._leader_epoch(tp) != epoch:  # leadership moved while the state was read
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        probe = self._rm.read(TopicPartition(tp.topic, tp.partition), 0, 0, min_one_batch=False)
        if probe.error in _NOT_SERVED or probe.high_watermark < 0:
            return probe.error or ErrorCode.NOT_LEADER_OR_FOLLOWER
        sp = SharePartition(
            first if 0 <= first <= probe.high_watermark else probe.high_watermark,
            lock_duration_ms=self.lock_duration_ms,
            delivery_count_limit=self.delivery_count_limit,
            max_in_flight=self.max_in_flight,
        )
        if state.start_offset >= 0:
            partition = self._rm.partitions().get(TopicPartition(tp.topic, tp.partition))
            log_end = partition.log.log_end_offset if partition is not None else probe.high_watermark
            sp.restore(state.start_offset, _clipped(state.batches, state.start_offset, log_end, self.max_in_flight))
        else:  # never initialized: from the log end, written before the fetch that made it is answered
            self._changed(key)
        if sp.start_offset < probe.log_start_offset:
            sp.move_start_to(probe.log_start_offset)
            self._changed(key)
        self.partitions[key] = sp
        self.epochs[key] = (epoch, state.state_epoch)
        return ErrorCode.NO_ERROR

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

    async def alter_start_offsets(self, group_id: str, offsets: Mapping[tuple[uuid.UUID, int], int]) -> dict[
            tuple[uuid.UUID, int], ErrorCode]:  # fmt: skip
        """AlterShareGroupOffsets of an empty group: each share partition named starts afresh at its offset (the
        SPSO; nothing in flight, raised to the log start at its first fetch if below), written at the share
        coordinator before it returns. Returns the partitions whose state could not be written."""
        codes = await asyncio.gather(*(self.initialize(group_id, key, offset) for key, offset in offsets.items()))
        return {key: code for key, code in zip(offsets, codes, strict=True) if code}

    async def delete_state(self, group_id: str, keys: Iterable[tuple[uuid.UUID, int]]) -> dict[
            tuple[uuid.UUID, int], ErrorCode]:  # fmt: skip
        """DeleteShareGroupOffsets of an empty group: the state of the share partitions named is forgotten (a
        later fetch starts them again from ``share.auto.offset.reset``), deleted at the share coordinator before
        it returns. Returns the partitions whose state could not be deleted."""
        wanted = list(dict.fromkeys(keys))
        for topic_id, p in wanted:
            if (group_id, topic_id, p) in self.partitions:
                self._drop((group_id, topic_id, p), ErrorCode.FENCED_STATE_EPOCH)
        if self.persister is None or not wanted:
            return {}
        codes = await self.persister.delete(group_id, wanted)
        return {k: c for k, c in codes.items() if c}

    async def flush(self, keys: Iterable[ShareKey] | None = None) -> dict[ShareKey, ErrorCode]:
        """Write the state of every share partition changed since the last flush; returns once every change
        made before it to the share partitions ``keys`` (None: to every one) is written or lost (callers answer
        after it, ``outcome`` telling which): this flush's writes, and those of ``keys`` still going on that
        began before it. Returns the share partitions whose write of this flush failed (dropped: read again at
        their next fetch). The writes of one share partition go one at a time, each state taken when its write
        starts, so the coordinator never goes back to an older state; those of others do not wait for them."""
        if self.persister is None:
            self._dirty.clear()
            return {}
        taken, self._dirty = self._dirty, {}
        wanted = None if keys is None else set(keys)
        earlier = [w for w, k in self._writing.items() if wanted is None or k in wanted]
        mine = [asyncio.ensure_future(self._write_one(key, seq)) for key, seq in taken.items()]
        for key, write in zip(taken, mine, strict=True):
            self._writing[write] = key
            write.add_done_callback(self._written)
        if earlier:
            await asyncio.wait(earlier)
        codes = await asyncio.gather(*mine)
        return {key: code for key, code in zip(taken, codes, strict=True) if code}

    def _written(self, write: asyncio.Future[ErrorCode]) -> None:
        self._writing.pop(write, None)

    async def _write_one(self, key: ShareKey, seq: int) -> ErrorCode:
        assert self.persister is not None
        lock = self._key_locks.setdefault(key, asyncio.Lock())
        async with lock:
            sp = self.partitions.get(key)
            if sp is None:  # dropped since the change (its leader epoch moved): the change is lost with it
                self._lost(key, seq, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            leader_epoch, state_epoch = self.epochs[key]
            state = PartitionState(state_epoch, sp.start_offset, tuple(sp.snapshot()))
            try:
                code = await self.persister.write(key[0], (key[1], key[2]), state, leader_epoch)
            except Exception:
                log.exception("writing the share state of %s failed", key)
                code = ErrorCode.UNKNOWN_SERVER_ERROR
            if code == ErrorCode.NO_ERROR:
                self._durable[key] = max(self._durable.get(key, 0), seq)
                return code
            log.warning("share state of %s not written: %s; it is read again", key, code.name)
            failed = client_error(code)
            self._lost(key, seq, failed)
            if self.partitions.get(key) is sp:
                self._drop(key, failed)
            return failed

    async def delete_group(self, group_id: str, keys: Iterable[tuple[uuid.UUID, int]] = ()) -> dict[
            tuple[uuid.UUID, int], ErrorCode]:  # fmt: skip
        """Forget a share group's partitions and sessions here, and delete its persisted state: of the share
        partitions this broker has, and of ``keys``. Returns the partitions whose state could not be deleted."""
        mine = [k for k in self.partitions if k[0] == group_id]
        for key in mine:
            self._drop(key)
        for session in [k for k in self.sessions if k[0] == group_id]:
            del self.sessions[session]
        going_on = [w for w, k in self._writing.items() if k[0] == group_id]
        if going_on:  # a write of the group's state still going on lands before the delete
            await asyncio.wait(going_on)
        for key in mine:
            self._losses.pop(key, None)
            self._durable.pop(key, None)
            self._key_locks.pop(key, None)
        if self.persister is None:
            return {}
        codes = await self.persister.delete(group_id, [*((k[1], k[2]) for k in mine), *keys])
        return {k: c for k, c in codes.items() if c}

    async def initialize(self, group_id: str, key: tuple[uuid.UUID, int], start_offset: int) -> ErrorCode:
        """Start a share partition afresh at ``start_offset`` (a reset): written at the next state epoch, which
        fences the writes of a leader that read the state before (FENCED_STATE_EPOCH: it reads it again); this
        broker's copy is dropped and read again at its next fetch."""
        if self.persister is None:
            return ErrorCode.NO_ERROR
        code, state = await self.persister.read_summary(group_id, key)
        if code:
            return code
        code = await self.persister.initialize(group_id, key, start_offset, state.state_epoch + 1)
        if code == ErrorCode.NO_ERROR and (group_id, *key) in self.partitions:
            self._drop((group_id, key[0], key[1]), ErrorCode.FENCED_STATE_EPOCH)
        return code

    def groups_with_state(self) -> list[str]:
        """The groups that have a share-partition state here: in memory, or kept by this broker's share
        coordinator (a restarted broker's groups; on a cluster, those whose state partitions it leads)."""
        return sorted({*self.stored_groups(), *(k[0] for k in self.partitions)})

    def has_state(self, group_id: str) -> bool:
        return bool(self.start_offsets(group_id)) or group_id in self.stored_groups()

    def start_offsets(self, group_id: str) -> dict[tuple[uuid.UUID, int], int]:
        """Each share partition of the group this broker has, with its start offset (SPSO)."""
        return {(topic_id, p): sp.start_offset for (g, topic_id, p), sp in self.partitions.items() if g == group_id}

    async def read_start_offsets(self, group_id: str, keys: Iterable[tuple[uuid.UUID, int]]) -> dict[
            tuple[uuid.UUID, int], int]:  # fmt: skip
        """The persisted start offsets of the share partitions ``keys`` (ReadShareGroupStateSummary), those this
        broker has in memory taken from there; a partition with no state is left out."""
        out = {k: v for k, v in self.start_offsets(group_id).items()}
        wanted = [k for k in dict.fromkeys(keys) if k not in out]
        if self.persister is None or not wanted:
            return out
        persister = self.persister
        results = await asyncio.gather(*(persister.read_summary(group_id, k) for k in wanted))
        for k, (code, state) in zip(wanted, results, strict=True):
            if code == ErrorCode.NO_ERROR and state.start_offset >= 0:
                out[k] = state.start_offset
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
            self._changed((group_id, tp.topic_id, tp.partition))
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
        unread = await self.load(group_id, tps, max(max_wait_ms / 1000.0, MIN_READ_WAIT_S))
        while True:
            results = self._acquire_all(group_id, member_id, tps, max_bytes, max_records, unread, record_limit)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or any(r.acquired or r.error for r in results) or not tps:
                await self.flush((group_id, tp.topic_id, tp.partition) for tp in tps)
                for r in results:
                    code = self.outcome(group_id, r.tp, r.change) if r.acquired else ErrorCode.NO_ERROR
                    if code:  # not durable: dropped, and read again at the next fetch; nothing is handed out
                        r.error, r.records, r.acquired = _fetch_error(code), b"", []
                return results
            if self._dirty:  # (a lock expired into the archive, a share partition was made): persist, then look
                await self.flush(())  # again, as records may have been appended meanwhile, unseen by a waiter
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
        self, group_id: str, member_id: str, tps: list[ShareTopicPartition], max_bytes: int, max_records: int,
        unread: dict[tuple[uuid.UUID, int], ErrorCode],
        record_limit: bool,
    ) -> list[PartitionFetch]:  # fmt: skip
        results: list[PartitionFetch] = []
        used = 0
        left = max_records
        for tp in tps:
            result = PartitionFetch(tp)
            results.append(result)
            code, sp = self.share_partition(group_id, tp)
            if sp is None:
                if (group_id, tp.topic_id, tp.partition) in self._loading:
                    continue  # its state is still being read: nothing from it yet
                # led but not read (its read failed, or its leader epoch moved since): the read's error, or the
                # partition is read at the next fetch
                result.error = _fetch_error(unread.get(tp.key, code if code != ErrorCode.INVALID_RECORD_STATE else
                                                       ErrorCode.NOT_LEADER_OR_FOLLOWER))  # fmt: skip
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
        key = (group_id, tp.topic_id, tp.partition)
        now = self._clock()
        if sp.expire_locks(now):
            self._changed(key)
        if not sp.has_available() and not sp.can_acquire_new():
            return
        offset = sp.next_fetch_offset()
        level = isolation_level_of(self._group_configs(group_id))
        read = self._rm.read(
            TopicPartition(tp.topic, tp.partition), offset, max_bytes, min_one_batch=first, isolation_level=level
        )
        if read.error == ErrorCode.OFFSET_OUT_OF_RANGE and read.log_start_offset >= 0:
            sp.move_start_to(read.log_start_offset)
            self._changed(key)
            return
        if read.error:
            result.error = read.error
            return
        if read.log_start_offset > sp.start_offset:
            sp.move_start_to(read.log_start_offset)
            self._changed(key)
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
            self._changed(key)
        if not acquired:
            return
        self._changed(key)
        result.change = self._dirty[key]
        last = acquired[-1].last_offset
        end = next((e for _, lo, e in spans if lo >= last), len(data))
        result.records = data[:end]
        result.acquired = acquired


def _fetch_error(code: ErrorCode) -> ErrorCode:
    """The error a ShareFetch answers for a partition whose state could not be read or written now: none when a
    later fetch may do (the share coordinator moving or unavailable, a reset's new state epoch; the partition
    answers no records meanwhile: share consumers take these codes as fatal), else the code (a moved leader)."""
    if code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.FENCED_STATE_EPOCH, ErrorCode.UNKNOWN_SERVER_ERROR):
        return ErrorCode.NO_ERROR
    return code


def _clipped(batches: Iterable[StateBatch], start: int, log_end: int, max_in_flight: int) -> list[StateBatch]:
    """The state batches of a state read, within what a leader can have in flight: below the log end (offsets
    beyond it were never fetched from this log) and at most ``max_in_flight`` past the start offset. A state no
    leader wrote (bytes of the state topic it did not write) then costs no more than a real one."""
    end = min(log_end, start + max_in_flight) - 1
    out = []
    for b in batches:
        if b.first_offset > end or b.last_offset < start:
            continue
        out.append(StateBatch(max(b.first_offset, start), min(b.last_offset, end), b.state, b.delivery_count))
    return out


def _whole_batches(data: bytes) -> int:
    """The length of the prefix of ``data`` that holds whole batches (a read may end inside one)."""
    pos = 0
    while len(data) - pos >= BATCH_HEADER_SIZE:
        size = int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
        if pos + size > len(data):
            break
        pos += size
    return pos
