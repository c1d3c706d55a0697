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
        self.loaded = dict(led)
        partition_for = self._groups.partition_for
        for group_id in [g for g in [*self.coordinator.groups, *self.stored] if partition_for(g) in lost]:
            self.coordinator.groups.pop(group_id, None)
            self.stored.pop(group_id, None)
        if not gained:
            return
        started = time.monotonic()
        replay = records.ShareGroupReplay()
        count = 0
        for p in sorted(gained):
            partition = manager.replica_manager.partitions().get(TopicPartition(OFFSETS_TOPIC, p))
            if partition is not None:
                count += records.load_partition_log(partition.log, replay)
        now_ms = int(time.time() * 1000)
        for group_id, (group, image) in replay.finish(now_ms, self.coordinator.session_timeout_ms).items():
            if partition_for(group_id) not in gained:
                continue
            self.coordinator.groups[group_id] = group
            self.stored[group_id] = image
            self.coordinator.refresh(group)
        log.info("Loaded the share groups of %s partitions %s: %d record(s) in %.1f ms", OFFSETS_TOPIC,
                 sorted(gained), count, (time.monotonic() - started) * 1000)  # fmt: skip

    def _lock(self, group_id: str) -> asyncio.Lock:
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
        async with self._lock(group_id):
            group = self.coordinator.groups.get(group_id)
            if group is None:
                return ErrorCode.NO_ERROR
            wanted = records.image_of(group, self._topics())
            code = await self._write(group_id, records.changes(group_id, self.stored.get(group_id)
                                                               or records.StoredImage(), wanted))  # fmt: skip
            if code == ErrorCode.NO_ERROR and self.coordinator.groups.get(group_id) is group:
                self.stored[group_id] = wanted
            return code

    async def delete(self, group_id: str) -> ErrorCode:
        """Write the group's tombstones (its records, as the log holds them)."""
        async with self._lock(group_id):
            stored = self.stored.get(group_id) or records.StoredImage()
            code = await self._write(group_id, records.tombstones(group_id, stored))
            if code == ErrorCode.NO_ERROR:
                self.stored.pop(group_id, None)
                self._locks.pop(group_id, None)
            return code

    async def _write(self, group_id: str, kvs: list[records.KeyValue]) -> ErrorCode:
        if not kvs:
            return ErrorCode.NO_ERROR
        manager = self._groups.manager
        now = int(time.time() * 1000)
        try:
            write = manager._append(group_id, [Record(0, now, k, v) for k, v in kvs], offsets=False)
        except KafkaError as e:
            log.debug("Share group %s: its records were not written: %s", group_id, e.message)
            return e.code
        code: ErrorCode = await manager.complete(write, offsets=False)  # acks=all: once the ISR has it
        if code == ErrorCode.NO_ERROR and (moved := self._groups.not_serving(group_id)) is not None:
            return ErrorCode(moved)  # the coordinator moved meanwhile
        return code
