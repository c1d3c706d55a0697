"""The group coordinator's writes wait for the high watermark (Kafka writes ``__consumer_offsets`` with acks=all;
its coordinator runtime keeps a queue of writes deferred until the high watermark passes them).

A write is appended to the group's ``__consumer_offsets`` partition as leader; it counts once every replica in the
ISR has it: the high watermark is past its last record. Then, in the order of the log, its effect is applied to
the coordinator's state (an offset committed, a transaction's offsets pending, a marker committing or dropping
them, tombstones removing offsets or a group) and those waiting for it are answered. So the state a client reads
(OffsetFetch) never shows a write that a failover could lose, and a write and the one after it apply in the order
the log has them, as a replay of the log after a failover would.

A write not replicated within ``offsets.commit.timeout.ms`` answers REQUEST_TIMED_OUT (the coordinator's
clients are told COORDINATOR_NOT_AVAILABLE) but stays queued: the log holds it, and when the high watermark
passes it later its effect is applied. When this broker no longer leads the partition at the write's leader
epoch, the queued writes end with NOT_LEADER_OR_FOLLOWER, unapplied: the new leader loads the groups from its
own log.

With this replica alone in the ISR the high watermark passes a write as it is appended: it is applied at once,
with no task and no wait (a single broker commits as fast as before).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from rill.common import TopicPartition
from rill.errors import ErrorCode
from rill.replica.purgatory import PurgatoryClosed
from rill.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

Apply = Callable[[int], None]
"""A write's effect on the coordinator's state, given the offset of the write's first record."""

RECHECK_S = 1.0  # the longest a queue sleeps between looks at the high watermark (each move wakes it too)


@dataclass(slots=True, eq=False)
class DeferredWrite:
    """One appended write: the offsets its records took, the leader epoch it was appended at, its effect, and
    its outcome once known (``code``; ``done`` resolves with it for a write that had to wait)."""

    base_offset: int
    end_offset: int
    leader_epoch: int
    apply: Apply | None
    done: asyncio.Future[ErrorCode] | None = None
    code: ErrorCode | None = None


class DeferredWriteQueue:
    """The writes of each ``__consumer_offsets`` partition not yet below its high watermark, in log order."""

    def __init__(self, replica_manager: ReplicaManager, timeout_ms: int) -> None:
        self.replica_manager = replica_manager
        self.timeout_ms = timeout_ms
        self._queues: dict[TopicPartition, deque[DeferredWrite]] = {}
        self._drainers: dict[TopicPartition, asyncio.Task[None]] = {}

    def pending(self, tp: TopicPartition) -> int:
        """How many writes to ``tp`` wait for the high watermark."""
        return len(self._queues.get(tp, ()))

    def appended(self, tp: TopicPartition, base_offset: int, end_offset: int, apply: Apply | None) -> DeferredWrite:
        """A write just appended to ``tp`` as leader, its records at ``base_offset`` up to ``end_offset``:
        applied now when the high watermark is already past it (and nothing before it waits), else queued."""
        partition = self.replica_manager.partitions().get(tp)
        write = DeferredWrite(base_offset, end_offset, -1 if partition is None else partition.leader_epoch, apply)
        queue = self._queues.get(tp)
        if not queue:
            code = self.replica_manager.committed(tp, end_offset)
            if code is not None:
                self._complete(tp, write, code)
                return write
        loop = asyncio.get_running_loop()
        write.done = loop.create_future()
        if queue is None:
            queue = self._queues[tp] = deque()
        queue.append(write)
        if tp not in self._drainers:
            self._drainers[tp] = loop.create_task(self._drain(tp, queue), name=f"{tp.topic}-{tp.partition}-writes")
        return write

    async def wait(self, write: DeferredWrite) -> ErrorCode:
        """The write's outcome: NO_ERROR once replicated; REQUEST_TIMED_OUT when that takes longer than
        ``timeout_ms`` (the write stays queued); NOT_LEADER_OR_FOLLOWER when leadership moved first;
        NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below ``min.insync.replicas`` meanwhile."""
        if write.code is not None:
            return write.code
        assert write.done is not None
        try:
            return await asyncio.wait_for(asyncio.shield(write.done), self.timeout_ms / 1000)
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT

    def drop(self, tp: TopicPartition) -> None:
        """This broker no longer leads ``tp`` (or leads it at a new epoch): its queued writes end unapplied."""
        task = self._drainers.pop(tp, None)
        if task is not None:
            task.cancel()
        queue = self._queues.pop(tp, None)
        if queue:
            log.info("%s: %d write(s) not replicated before leadership moved end unapplied", tp, len(queue))
        for write in queue or ():
            self._complete(tp, write, ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def close(self) -> None:
        for tp in list(self._queues):
            self.drop(tp)

    def _complete(self, tp: TopicPartition, write: DeferredWrite, code: ErrorCode) -> None:
        write.code = code
        if code != ErrorCode.NOT_LEADER_OR_FOLLOWER and write.apply is not None:  # below the high watermark
            try:
                write.apply(write.base_offset)
            except Exception:  # one write's effect failing must not stop the others'
                log.exception("%s: applying the write at offset %d failed", tp, write.base_offset)
        if write.done is not None and not write.done.done():
            write.done.set_result(code)

    def _outcome(self, tp: TopicPartition, write: DeferredWrite) -> ErrorCode | None:
        partition = self.replica_manager.partitions().get(tp)
        if partition is None or partition.leader_epoch != write.leader_epoch:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return self.replica_manager.committed(tp, write.end_offset)

    async def _drain(self, tp: TopicPartition, queue: deque[DeferredWrite]) -> None:
        try:
            while queue:
                code = self._outcome(tp, queue[0])
                if code is None:
                    await self.replica_manager.produce_purgatory.wait([tp], RECHECK_S)
                    continue
                self._complete(tp, queue.popleft(), code)
        except PurgatoryClosed:  # the broker stops
            for write in queue:
                self._complete(tp, write, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            queue.clear()
        finally:
            if self._drainers.get(tp) is asyncio.current_task():
                del self._drainers[tp]
                if self._queues.get(tp) is queue and not queue:
                    del self._queues[tp]
