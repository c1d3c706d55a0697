"""Moving replicas between the log dirs of this broker: AlterReplicaLogDirs and the copier of each move (Kafka's
``ReplicaManager.alterReplicaLogDirs``, ReplicaAlterLogDirsManager and ReplicaAlterLogDirsThread).

A move is a future log in the destination (rill.log.future_logs) that a copier task fills from the current log,
like a follower fetching from a leader that is the broker itself: it reads whole batches from the current log's
end of the future log on, appends them as a follower (offsets, leader epochs, producer state and transaction
markers as written), cuts the future log back where the current one was truncated (the leader-epoch check of a
follower), restarts it at the current log's start when retention passed it, and keeps to
``replica.alter.log.dirs.io.max.bytes.per.second`` when it is set. Once the future log ends where the current
one does, the two are swapped in the same turn of the loop, so no append comes between: produces go on into
the current log during the copy and into the moved one after it, none refused or held.

A move stops when another log dir is asked for (its future log is dropped), when the partition leaves the broker,
and at the broker's stop; a move under way at a stop or a crash goes on at the next start (its future log is
loaded with the others).

``hold`` is a seam for tests: when set, the copier awaits it with the partition and ``"copy"`` before each
chunk it copies and with ``"swap"`` once it has caught up, before it swaps.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Mapping

from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.log.future_logs import future_dir_name
from rill.log.log import Log
from rill.log.log_manager import LogManager
from rill.replica.partition import Partition
from rill.replica.replica_fetcher import truncation_target

log = logging.getLogger(__name__)

Hold = Callable[[TopicPartition, str], Awaitable[None]]

CHUNK_BYTES = 1 << 20  # what one step copies (Kafka's replica.fetch.max.bytes default)
SWAP_CATCH_UP_BYTES = 8 << 20  # at most this much is copied in the turn of the loop that swaps
UNLIMITED = 1e300
MAX_NAME_BYTES = 255  # a directory name's limit on the file systems Kafka supports
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length (of what follows these 12 bytes)


def _whole_batches(data: bytes) -> tuple[bytes, int]:
    """The whole batches at the start of ``data`` and the base offset of the first (-1 when there is none)."""
    pos, first = 0, -1
    while pos + _BATCH_HEAD.size <= len(data):
        base, length = _BATCH_HEAD.unpack_from(data, pos)
        if length <= 0 or pos + _BATCH_HEAD.size + length > len(data):
            break
        if first < 0:
            first = base
        pos += _BATCH_HEAD.size + length
    return data[:pos], first


class ReplicaAlterLogDirsManager:
    """The moves of this broker's replicas between its log dirs; everything runs on the broker's loop."""

    def __init__(
        self,
        log_manager: LogManager,
        partitions: Callable[[], Mapping[TopicPartition, Partition]],
        in_metadata: Callable[[TopicPartition], bool],
    ) -> None:
        self.log_manager = log_manager
        self._partitions = partitions
        self._in_metadata = in_metadata
        self.io_max_bytes_per_second = UNLIMITED  # replica.alter.log.dirs.io.max.bytes.per.second (dynamic)
        self.hold: Hold | None = None
        self._tasks: dict[TopicPartition, asyncio.Task[None]] = {}
        self._window_start = time.monotonic()
        self._window_bytes = 0
        self.moves_completed = 0
        self.last_swap_ms = 0.0  # how long the loop was held by the last move's final step

    # ---- AlterReplicaLogDirs --------------------------------------------------------------------

    def alter_replica_log_dirs(self, assignment: Mapping[TopicPartition, str]) -> dict[TopicPartition, ErrorCode]:
        """Kafka's answer per partition: NONE when the replica is in ``path`` or moving there now."""
        out: dict[TopicPartition, ErrorCode] = {}
        for tp, path in assignment.items():
            try:
                self._alter_one(tp, path)
                out[tp] = ErrorCode.NONE
            except KafkaError as e:
                log.warning("Cannot move the replica of %s to %s: %s", tp, path, e.message)
                out[tp] = e.code
        return out

    def _alter_one(self, tp: TopicPartition, path: str) -> None:
        lm = self.log_manager
        if len(future_dir_name(tp).encode()) > MAX_NAME_BYTES:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"the topic name of {tp} is too long to move")
        dest = lm.configured_log_dir(path)
        if dest is None:
            raise KafkaError(ErrorCode.LOG_DIR_NOT_FOUND, f"log dir {path} is not one of this broker's log.dirs")
        if dest in lm.offline_dirs:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {path} is offline")
        future = lm.future_logs().get(tp)
        if future is not None and future[1] != dest:  # moving elsewhere: that move stops
            self.stop_move(tp)
        if lm.log_dir_of(tp) != dest and lm.future_log(tp) is None:
            lm.maybe_update_preferred_log_dir(tp, dest)
        partition = self._partitions().get(tp)
        if partition is None:
            if self._in_metadata(tp):  # Kafka answers REPLICA_NOT_AVAILABLE here, for compatibility
                raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE, f"this broker holds no replica of {tp} yet")
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp} does not exist")
        lm.preferred_log_dir(tp)  # the replica exists: the preferred dir is applied now, not at a creation
        if lm.log_dir_of(tp) == dest:
            return
        if lm.future_log(tp) is None:
            if lm.offline_dirs:  # as Kafka: no future log while a dir is offline (it could hold one already)
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "a log dir of this broker is offline")
            lm.create_future_log(tp, dest)
        self._start(tp)

    # ---- the copiers ----------------------------------------------------------------------------

    def resume(self) -> None:
        """Start a copier for every future log of a hosted partition (at start: the moves a stop interrupted)."""
        hosted = self._partitions()
        for tp in self.log_manager.future_logs():
            if tp in hosted:
                self._start(tp)

    def moving(self) -> list[TopicPartition]:
        return list(self._tasks)

    def stop_move(self, tp: TopicPartition) -> None:
        """Stop ``tp``'s move: its copier ends and its future log is dropped."""
        task = self._tasks.pop(tp, None)
        if task is not None:
            task.cancel()
        self.log_manager.abandon_future_log(tp)

    def shutdown(self) -> None:
        """Stop every copier (the future logs stay: the next start goes on with them)."""
        tasks, self._tasks = self._tasks, {}
        for task in tasks.values():
            task.cancel()

    def _start(self, tp: TopicPartition) -> None:
        task = self._tasks.get(tp)
        if task is None or task.done():
            self._tasks[tp] = asyncio.get_running_loop().create_task(self._run(tp), name=f"alter-log-dir-{tp}")

    def _pair(self, tp: TopicPartition) -> tuple[Partition, Log, Log] | None:
        partition = self._partitions().get(tp)
        future = self.log_manager.future_log(tp)
        current = self.log_manager.get_log(tp)
        if partition is None or future is None or current is None or partition.log is not current:
            return None
        return partition, current, future

    async def _run(self, tp: TopicPartition) -> None:
        me = asyncio.current_task()
        started = time.monotonic()
        try:
            while True:
                if self.hold is not None:
                    await self.hold(tp, "copy")
                pair = self._pair(tp)
                if pair is None:
                    return
                _, current, future = pair
                copied = self._copy_chunk(current, future)
                if future.log_end_offset == current.log_end_offset:
                    if self.hold is not None:
                        await self.hold(tp, "swap")
                    if await self._maybe_swap(tp):
                        log.info("%s: moved in %.1f s (the last step, copy and swap, took %.1f ms)", tp,
                                 time.monotonic() - started, self.last_swap_ms)  # fmt: skip
                        return
                    continue
                if copied == 0:  # nothing readable yet (should not last): no busy loop meanwhile
                    await asyncio.sleep(0.01)
                await self._throttle(copied)
        except asyncio.CancelledError:
            raise
        except Exception:  # the future log stays; the next start goes on with it
            log.exception("%s: the move of its log stopped", tp)
        finally:
            if self._tasks.get(tp) is me:
                del self._tasks[tp]

    async def _maybe_swap(self, tp: TopicPartition) -> bool:
        """Copy what came since (bounded) and swap, all in this turn of the loop; False when it did not."""
        pair = self._pair(tp)
        if pair is None:
            return True
        partition, current, future = pair
        step_start = time.perf_counter()
        budget = SWAP_CATCH_UP_BYTES
        while future.log_end_offset != current.log_end_offset and budget > 0:
            copied = self._copy_chunk(current, future)
            if copied == 0 and future.log_end_offset != current.log_end_offset:
                return False
            budget -= copied
        if future.log_end_offset != current.log_end_offset:
            return False
        if future.log_start_offset < current.log_start_offset:  # below it the current log no longer serves
            future.high_watermark = current.high_watermark
            future.maybe_increment_log_start_offset(current.log_start_offset)
        dirs = self.log_manager.replace_current_with_future(tp)
        partition.log = future
        self.moves_completed += 1
        self.last_swap_ms = (time.perf_counter() - step_start) * 1000
        await self.log_manager.write_dir_checkpoints(dirs)
        return True

    def _copy_chunk(self, current: Log, future: Log) -> int:
        """Copy the next batches (at most about ``CHUNK_BYTES``) from ``current`` to ``future``; the bytes copied."""
        self._align(current, future)
        start = future.log_end_offset
        if start >= current.log_end_offset:
            return 0
        data = current.read_bytes(start, CHUNK_BYTES, min_one_batch=True)
        whole, first = _whole_batches(data)
        if not whole:
            return 0
        if first < start:  # the batch holding the current log's start begins below it: the future log does too
            if future.size_bytes:
                raise RuntimeError(f"{future.topic_partition}: batch at {first} overlaps the future log's end {start}")
            future.truncate_fully_and_start_at(first)
        future.append_as_follower(whole)
        return len(whole)

    @staticmethod
    def _align(current: Log, future: Log) -> None:
        """Cut the future log back to what the current log holds (a follower's truncation), or restart it at
        the current log's start when retention or DeleteRecords moved that past its end. It takes the current
        log's config (changed since, or loaded with the defaults at a start)."""
        if future.config is not current.config:
            future.config = current.config
        if future.log_end_offset < current.log_start_offset:
            future.truncate_fully_and_start_at(current.log_start_offset)
            return
        epoch = future.leader_epoch_cache.latest_epoch
        if epoch >= 0:
            leader_epoch, end = current.leader_epoch_cache.end_offset_for(epoch, current.log_end_offset)
            target, _ = truncation_target(future, epoch, leader_epoch, end)
            if target < future.log_end_offset:
                future.truncate_to(target)
        if future.log_end_offset > current.log_end_offset:
            future.truncate_to(current.log_end_offset)

    async def _throttle(self, copied: int) -> None:
        """Keep the copy under ``io_max_bytes_per_second`` (shared by the moves); yields to the loop in any case."""
        rate = self.io_max_bytes_per_second
        wait = 0.0
        if 0 < rate < UNLIMITED:
            now = time.monotonic()
            self._window_bytes += copied
            elapsed = now - self._window_start
            wait = self._window_bytes / rate - elapsed
            if elapsed > 1.0 and wait <= 0:
                self._window_start, self._window_bytes = now, 0
        await asyncio.sleep(max(wait, 0.0))
