"""Share groups kept in ``__consumer_offsets`` beside the other groups, as Kafka's coordinator keeps them.

The share-group coordinator follows the leadership of ``__consumer_offsets`` (``follow_leadership``, called before
each request it answers): the groups of a partition another broker now leads are dropped (without releasing
anything: their members live on at the new coordinator), those of a partition it came to lead are replayed from
the log. After a heartbeat changed a group, ``persist`` writes what changed (acks=all, through the group
metadata manager's one write path); ``delete`` writes the group's tombstones. A write that fails is tried again
at the group's next change, and what was not written is what a new coordinator does not know.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from rill.common import TopicPartition
from rill.coordinator.share import share_group_records as records
from rill.coordinator.share.share_group_coordinator import ShareGroupCoordinator, TopicsView
from rill.errors import ErrorCode, KafkaError
from rill.metadata.store import OFFSETS_TOPIC
from rill.records.record import Record

log = logging.getLogger(__name__)

WRITE_BYTES = 512 * 1024  # the most one write of a group's records takes (__consumer_offsets takes 1 MiB batches)


class ShareGroupStore:
    def __init__(self, coordinator: ShareGroupCoordinator, group_coordinator: Any, topics: TopicsView) -> None:
        self.coordinator = coordinator
        self._groups = group_coordinator  # rill.coordinator.group.GroupCoordinator: partitions and writes
        self._topics = topics
        self.stored: dict[str, records.StoredImage] = {}  # what the log holds of each group
        self.loaded: dict[int, int] = {}  # partitions whose groups are here -> the leader epoch they were loaded at
        self._locks: dict[str, asyncio.Lock] = {}

    def follow_leadership(self) -> None:
        manager = self._groups.manager
        led: dict[int, int] = manager.led_partitions()
        if led == self.loaded:
            return
        lost = {p for p, epoch in self.loaded.items() if led.get(p) != epoch}
        gained = {p for p, epoch in led.items() if self.loaded.get(p) != epoch}
        for p in lost:
            del self.loaded[p]
        partition_for = self._groups.partition_for
        for group_id in [g for g in [*self.coordinator.groups, *self.stored] if partition_for(g) in lost]:
            self.coordinator.groups.pop(group_id, None)
            self.stored.pop(group_id, None)
        started = time.monotonic()
        replay = records.ShareGroupReplay()
        count = 0
        loading = set()
        for p in sorted(gained):
            partition = manager.replica_manager.partitions().get(TopicPartition(OFFSETS_TOPIC, p))
            if partition is None:
                continue  # not taken over by the replica manager yet: loaded at a later request
            count += records.load_partition_log(partition.log, replay)
            loading.add(p)
        if not loading:
            return
        now_ms = int(time.time() * 1000)
        for group_id, (group, image) in replay.finish(now_ms, self.coordinator.session_timeout_ms).items():
            if partition_for(group_id) not in loading:
                continue
            self.coordinator.groups[group_id] = group
            self.stored[group_id] = image
            self.coordinator.refresh(group)
        self.loaded.update((p, led[p]) for p in loading)
        log.info("Loaded the share groups of %s partitions %s: %d record(s) in %.1f ms", OFFSETS_TOPIC,
                 sorted(loading), count, (time.monotonic() - started) * 1000)  # fmt: skip

    def lock(self, group_id: str) -> asyncio.Lock:
        """The group's lock: its writes, and a deletion from its first step to its tombstones, one at a time."""
        lock = self._locks.get(group_id)
        if lock is None:
            lock = self._locks[group_id] = asyncio.Lock()
        return lock

    async def persist(self, group_id: str) -> ErrorCode:
        """Write what changed of the group since its last write (nothing when its epoch did not move)."""
        group = self.coordinator.groups.get(group_id)
        stored = self.stored.get(group_id)
        if group is None or (stored is not None and stored.epoch == group.group_epoch):
            return ErrorCode.NO_ERROR
        async with self.lock(group_id):
            self.follow_leadership()  # (it may have moved, and come back, while this waited)
            group = self.coordinator.groups.get(group_id)
            if group is None:
                return ErrorCode.NO_ERROR
            return await self._write_changes(group_id, records.image_of(group, self._topics()))

    async def delete_locked(self, group_id: str) -> ErrorCode:
        """Write the group's tombstones (of every record the log may hold of it); the caller holds its lock."""
        stored = self.stored.get(group_id) or records.StoredImage()
        changes = records.tombstones(group_id, stored)
        code = await self._write(group_id, changes)
        if code == ErrorCode.NO_ERROR:
            self.stored.pop(group_id, None)
        else:
            self.stored[group_id] = records.unknown(stored, changes)
        return code

    async def _write_changes(self, group_id: str, wanted: records.StoredImage) -> ErrorCode:
        """Write the records from what the log holds to ``wanted``, in batches no larger than ``WRITE_BYTES``
        (members first, the epoch last), each one's effect kept as it lands."""
        stored = self.stored.get(group_id) or records.StoredImage()
        changes = records.changes(group_id, stored, wanted)
        while changes:
            batch: list[records.Change] = []
            size = 0
            while changes and (not batch or size + changes[0].size <= WRITE_BYTES):
                size += changes[0].size
                batch.append(changes.pop(0))
            code = await self._write(group_id, batch)
            if code != ErrorCode.NO_ERROR:
                self.stored[group_id] = records.unknown(stored, batch)  # it may have landed: written again
                return code
            stored = self.stored[group_id] = records.applied(stored, wanted, batch)
        return ErrorCode.NO_ERROR

    async def _write(self, group_id: str, changes: list[records.Change]) -> ErrorCode:
        if not changes:
            return ErrorCode.NO_ERROR
        manager = self._groups.manager
        partition = self._groups.partition_for(group_id)
        epoch = self.loaded.get(partition)
        now = int(time.time() * 1000)
        try:
            write = manager._append(group_id, [Record(0, now, c.key, c.value) for c in changes], offsets=False)
        except KafkaError as e:
            log.debug("Share group %s: its records were not written: %s", group_id, e.message)
            return e.code
        code: ErrorCode = await manager.complete(write, offsets=False)  # acks=all: once the ISR has it
        if code == ErrorCode.NO_ERROR and (manager.led_partitions().get(partition) != epoch or epoch is None):
            return ErrorCode.NOT_COORDINATOR  # the coordinator moved meanwhile
        return code
