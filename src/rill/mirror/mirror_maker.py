"""The mirror's copy loop: a consumer on the source cluster, a producer on the target, in the spirit of
MirrorMaker 2 (each source partition copied into the same partition of the target topic, in order).

Work sharing: every process of a mirror (same ``name``) joins the source consumer group ``rill-mirror-<name>``,
so the source partitions are divided among them and move to the others when one dies.

Delivery (at least once): the mirror's position in each source partition is the group's committed offset on
the source, committed only after the target has acknowledged (acks=all, idempotent producer) every record below
it and the offset syncs describing them. A mirror killed at any point starts again from there, so a record may
be copied twice (the target then holds the repeated range again, in order) but none is missed. A partition
never copied starts at its earliest offset (its end with ``auto.offset.reset=latest``), and that start is
committed as the partition is taken, before anything is copied. The client settings this rests on cannot be
changed through the source and target properties (``client_settings``).

Per partition, the target acknowledges in order (an idempotent producer keeps order), so the source offsets of
the records in flight wait in a queue per partition, and each acknowledgement takes the oldest.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from rill.mirror.client_settings import check_source_props, check_target_props, start_position
from rill.mirror.group_sync import source_groups, sync_group_offsets
from rill.mirror.offset_sync import PartitionSyncs, encode_sync
from rill.mirror.offset_sync_store import OffsetSyncStore
from rill.mirror.topic_sync import matching_topics, sync_topics
from rill.mirror.transactional_copy import TransactionalCopy

log = logging.getLogger(__name__)

TopicPart = tuple[str, int]


@dataclass(slots=True)
class MirrorConfig:
    source: str  # bootstrap servers of the source cluster
    target: str
    topics: str  # a regular expression matched against whole topic names
    groups: str = ".*"  # consumer groups whose offsets are carried over
    name: str = "default"
    prefix: str = ""  # the target topic is prefix + source topic
    refresh_interval_s: float = 10.0  # new topics, partitions and configs
    commit_interval_s: float = 1.0
    group_sync_interval_s: float = 5.0
    batch: int = 5000
    exactly_once: bool = False  # transactions on the target (transactional_copy)
    source_props: dict[str, Any] = field(default_factory=dict)
    target_props: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_source_props(self.source_props, self.exactly_once)
        check_target_props(self.target_props, self.exactly_once)

    @property
    def group_id(self) -> str:
        return f"rill-mirror-{self.name}"

    def target_topic(self, topic: str) -> str:
        return self.prefix + topic


@dataclass(slots=True)
class PartitionStatus:
    """One source partition as this process copies it: the records in flight, and the tallies."""

    target: str  # the target topic
    syncs: PartitionSyncs
    in_flight: deque[tuple[int, int]] = field(default_factory=deque)  # (source offset, timestamp ms), in order
    acked: int = -1  # the source offset below which every copy is acknowledged; -1 before the first
    committed: int = -1  # the position last committed on the source
    copied: int = 0  # records acknowledged by the target
    bytes: int = 0
    latency_ms_sum: float = 0.0  # from the source record's timestamp to the target's acknowledgement
    latency_ms_max: float = 0.0
    timed: int = 0  # records with a timestamp, over which the latency is summed
    position: int = -1  # the next source offset to copy, as last seen; -1 while not copied here
    lag: int = 0  # source high watermark - position, as last seen


@dataclass(slots=True)
class MirrorStats:
    partitions: dict[TopicPart, PartitionStatus] = field(default_factory=dict)  # every partition copied here
    assigned: int = 0  # partitions this process copies now
    group_offsets_written: int = 0

    @property
    def records(self) -> int:
        return sum(p.copied for p in list(self.partitions.values()))

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in list(self.partitions.values()))

    @property
    def latency_ms_avg(self) -> float:
        parts = list(self.partitions.values())
        timed = sum(p.timed for p in parts)
        return sum(p.latency_ms_sum for p in parts) / timed if timed else 0.0

    @property
    def latency_ms_max(self) -> float:
        return max((p.latency_ms_max for p in list(self.partitions.values())), default=0.0)


class MirrorMaker:
    def __init__(self, config: MirrorConfig) -> None:
        self.config = config
        self.stats = MirrorStats()
        self._pattern = re.compile(config.topics)
        self._groups_pattern = re.compile(config.groups)
        self._sync_store = OffsetSyncStore(config.target, config.name, config.group_id, config.target_props,
                                           config.prefix)  # fmt: skip
        self._syncs_topic = self._sync_store.topic
        self._syncs: dict[TopicPart, PartitionSyncs] = {}
        self._copying: dict[TopicPart, PartitionStatus] = {}  # by source (topic, partition)
        self._by_target: dict[TopicPart, PartitionStatus] = {}  # the same, by target (topic, partition)
        self._assigned: set[TopicPart] = set()
        self._topics: list[str] = []
        self._failure: str | None = None
        self._new_syncs: list[tuple[bytes, bytes]] = []  # found by acknowledgements, to be written
        self._lock = threading.Lock()
        self._producer: Any = None  # at least once: one idempotent producer for every partition
        self._txn: TransactionalCopy | None = None  # exactly once: a transactional producer per partition

    # -- clients ------------------------------------------------------------------------------------------

    def _clients(self) -> None:
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient

        c = self.config
        self._source_admin = AdminClient({"bootstrap.servers": c.source, **c.source_props})
        self._target_admin = AdminClient({"bootstrap.servers": c.target, **c.target_props})
        if c.exactly_once:
            self._txn = TransactionalCopy(c.target, c.group_id, c.target_props, self._target_admin, self._on_delivery)
        else:
            self._producer = Producer({
                "bootstrap.servers": c.target,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "on_delivery": self._on_delivery,
                **c.target_props,
            })  # fmt: skip
        self._consumer = Consumer({
            "bootstrap.servers": c.source,
            "isolation.level": "read_committed",
            "partition.assignment.strategy": "cooperative-sticky",
            # A dead process's partitions go to the others within seconds, not the client default of 45 s.
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 1_000,
            **c.source_props,
            "group.id": c.group_id,
            "enable.auto.commit": False,
            # Used only if a committed position goes out of range: a partition's first start is the mirror's.
            "auto.offset.reset": start_position(c.source_props),
        })  # fmt: skip

    # -- callbacks (on this thread, from poll/consume/flush) ---------------------------------------------

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        if self._txn is not None:
            # Each partition's transactional id first (fencing its previous owner and aborting its open
            # transaction), then the syncs its previous owner wrote, then its committed position.
            latest = start_position(self.config.source_props) == "latest"
            for tp in partitions:
                key = (tp.topic, tp.partition)
                end = (lambda tp=tp: self._log_end(consumer, tp)) if latest else None
                tp.offset = self._txn.start(key, self.config.target_topic(tp.topic), end)
        elif partitions:
            self._take_positions(consumer, partitions)
        # The previous owners made their syncs durable before committing the positions copied from here on.
        self._sync_store.catch_up(self._syncs, self._copying.keys())
        with self._lock:
            for tp in partitions:
                self._assigned.add((tp.topic, tp.partition))
            self.stats.assigned = len(self._assigned)
        for tp in partitions:
            key = (tp.topic, tp.partition)
            status = self._copying.get(key) or self._start_copying(key)
            if self._txn is None:  # everything below the committed position is on the target
                status.acked = status.committed = tp.offset
        consumer.incremental_assign(partitions)
        log.info("copying %d more partition(s)", len(partitions))

    @staticmethod
    def _log_end(consumer: Any, tp: Any) -> int:
        from confluent_kafka import TopicPartition

        _low, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=15, cached=False)
        return int(high)

    def _take_positions(self, consumer: Any, partitions: list[Any]) -> None:
        """Set each taken partition's position to its committed one. A partition the mirror has never copied
        starts at its earliest offset (or its end, with ``auto.offset.reset=latest``), and that start is
        committed before anything is copied: a process killed before its first commit leaves the next one
        the same start, not the end of the log at the next one's start (which would skip what came between)."""
        from confluent_kafka import TopicPartition

        committed = consumer.committed([TopicPartition(tp.topic, tp.partition) for tp in partitions], timeout=15)
        latest = start_position(self.config.source_props) == "latest"
        fresh = []
        for tp, position in zip(partitions, committed, strict=True):
            if position.error is not None:
                raise RuntimeError(f"{tp.topic}-{tp.partition}: no committed position: {position.error}")
            if position.offset >= 0:
                tp.offset = position.offset
                continue
            low, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=15,
                                                       cached=False)  # fmt: skip
            tp.offset = high if latest else low
            fresh.append(TopicPartition(tp.topic, tp.partition, tp.offset))
        if fresh:
            consumer.commit(offsets=fresh, asynchronous=False)
            log.info("starting %d partition(s) never copied at their %s offset", len(fresh),
                     "latest" if latest else "earliest")  # fmt: skip

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        # Everything copied from these partitions is made durable and its position committed before another
        # process of the mirror takes them (it starts from the committed position). With transactions, every
        # batch was committed with its position already.
        self._commit(force=True)
        self._drop(partitions)

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        # This process was out of touch with the source group past its session timeout (paused, cut off): the
        # group gave these partitions away, and their positions can no longer be committed. The next owner
        # copies again from the last committed position (at least once). What is in flight is waited for
        # first: its acknowledgements must not be taken for records of a later copy of the same partition.
        log.warning("lost %d partition(s) to the source group (session expired): copying them again from their "
                    "committed positions once they are assigned", len(partitions))  # fmt: skip
        if self._txn is None:
            self._make_durable()
        self._drop(partitions)

    def _drop(self, partitions: list[Any]) -> None:
        with self._lock:
            for tp in partitions:
                key = (tp.topic, tp.partition)
                if self._txn is not None:
                    self._txn.stop(key)
                self._assigned.discard(key)
                status = self._copying.pop(key, None)
                if status is not None:  # another process copies it now, and reports its lag
                    self._by_target.pop((status.target, key[1]), None)
                    status.in_flight.clear()
                    status.position, status.lag = -1, 0
            self.stats.assigned = len(self._assigned)

    def _start_copying(self, key: TopicPart) -> PartitionStatus:
        status = self.stats.partitions.get(key)
        syncs = self._syncs.get(key)
        if syncs is None:
            syncs = self._syncs[key] = PartitionSyncs()
        if status is None:
            status = self.stats.partitions[key] = PartitionStatus(self.config.target_topic(key[0]), syncs)
        self._copying[key] = status
        self._by_target[(status.target, key[1])] = status
        return status

    def _on_delivery(self, err: Any, msg: Any) -> None:
        status = self._by_target.get((msg.topic(), msg.partition()))
        if status is None:  # an offset sync (or a record of a partition revoked meanwhile)
            if err is not None and msg.topic() == self._syncs_topic:
                self._failure = f"an offset sync was not written: {err}"
            return
        source_offset, timestamp = status.in_flight.popleft()
        if err is not None:
            self._failure = f"{msg.topic()}-{msg.partition()}: a record was not written: {err}"
            return
        offset = msg.offset()
        if status.syncs.add(source_offset, offset):
            self._new_syncs.append(encode_sync(status.target, msg.partition(), source_offset, offset))
        status.acked = source_offset + 1
        status.copied += 1
        status.bytes += len(msg)
        if timestamp > 0:
            latency = time.time() * 1000 - timestamp
            status.latency_ms_sum += latency
            status.timed += 1
            if latency > status.latency_ms_max:
                status.latency_ms_max = latency

    # -- the loop ------------------------------------------------------------------------------------------

    def _refresh_topics(self) -> None:
        names = self._source_admin.list_topics(timeout=15).topics
        topics = matching_topics(names, self._pattern)
        sync_topics(self._source_admin, self._target_admin, topics, self.config.target_topic)
        if topics != self._topics:
            self._topics = topics
            if topics:
                self._consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                         on_lost=self._on_lost)  # fmt: skip
            else:
                self._consumer.unsubscribe()
            log.info("mirroring %d topic(s): %s", len(topics), ", ".join(topics))

    def _commit(self, force: bool = False) -> None:
        """Commit the acknowledged positions, once the offset syncs describing them are durable too."""
        from confluent_kafka import TopicPartition

        if self._txn is not None:
            return  # each transaction commits its position
        self._make_durable()
        changed = [(k, s) for k, s in sorted(self._copying.items()) if s.acked >= 0 and s.acked != s.committed]
        if not changed:
            return
        offsets = [TopicPartition(t, p, status.acked) for (t, p), status in changed]
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except Exception as e:
            if not force:
                log.info("commit of the mirror's positions failed (retried): %s", e)
                return
            raise
        for (_key, status), tp in zip(changed, offsets, strict=True):
            status.committed = tp.offset

    def _write_syncs(self) -> None:
        topic = self._syncs_topic
        while self._new_syncs:
            key, value = self._new_syncs[0]
            try:
                self._producer.produce(topic, value, key)
            except BufferError:
                self._producer.poll(0.05)
                continue
            self._new_syncs.pop(0)

    def _make_durable(self) -> None:
        """Wait until the target has acknowledged every record in flight and every offset sync they led to."""
        while True:
            self._write_syncs()
            if self._producer.flush(30) > 0:
                raise RuntimeError("the target did not acknowledge the records in flight within 30 s")
            if self._failure is not None:
                raise RuntimeError(self._failure)
            if not self._new_syncs:
                return

    def _update_lag(self) -> None:
        from confluent_kafka import TopicPartition

        with self._lock:
            assigned = sorted(self._assigned)
        if not assigned:
            return
        positions = self._consumer.position([TopicPartition(t, p) for t, p in assigned])
        for tp in positions:
            key = (tp.topic, tp.partition)
            try:
                _low, high = self._consumer.get_watermark_offsets(tp, cached=True) or (-1, -1)
            except Exception:
                continue
            status = self._copying.get(key)
            if status is None:
                continue
            status.position = tp.offset
            if high >= 0 and tp.offset >= 0:
                status.lag = max(0, high - tp.offset)

    def _copy(self, messages: list[Any]) -> None:
        if self._txn is not None:
            self._copy_in_transactions(messages)
            return
        produce, copying = self._producer.produce, self._copying
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.fatal():
                    raise RuntimeError(f"source consumer: {err}")
                continue
            key = (msg.topic(), msg.partition())
            status = copying.get(key)
            if status is None:
                status = self._start_copying(key)
            ts_type, ts = msg.timestamp()
            status.in_flight.append((msg.offset(), ts))
            try:
                produce(status.target, msg.value(), msg.key(), key[1], timestamp=ts if ts_type else 0,
                        headers=msg.headers())  # fmt: skip
            except (BufferError, KafkaException) as e:
                self._produce_again(status, key[1], msg, ts if ts_type else 0, e)
        self._producer.poll(0)
        self._write_syncs()

    def _copy_in_transactions(self, messages: list[Any]) -> None:
        assert self._txn is not None
        batches: dict[TopicPart, list[Any]] = {}
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.fatal():
                    raise RuntimeError(f"source consumer: {err}")
                continue
            batches.setdefault((msg.topic(), msg.partition()), []).append(msg)
        for key, batch in batches.items():
            status = self._copying.get(key)
            if status is None:  # not assigned through the callback: the mirror cannot know its position
                raise RuntimeError(f"{key[0]}-{key[1]}: records of a partition not taken over")

            def in_flight(offset: int, ts: int, queue: Any = status.in_flight) -> None:
                queue.append((offset, ts))

            self._txn.copy(key, status.target, batch, in_flight, self._take_syncs, self._syncs_topic)

    def _take_syncs(self) -> list[tuple[bytes, bytes]]:
        syncs, self._new_syncs = self._new_syncs, []
        return syncs

    def _produce_again(self, status: PartitionStatus, partition: int, msg: Any, ts: int, error: Exception) -> None:
        """The slow path of a produce: a full queue (wait for acknowledgements), or a partition or topic the
        source has just gained (the target gets it, and the producer learns of it, before the copy goes on)."""
        deadline = time.monotonic() + 60
        while True:
            if isinstance(error, KafkaException):
                if error.args[0].code() not in (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
                    raise error
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{status.target}-{partition} does not exist on the target") from error
                self._refresh_topics()
                self._producer.list_topics(status.target, timeout=10)
                self._producer.poll(0.2)
            else:
                self._producer.poll(0.05)
            try:
                self._producer.produce(status.target, msg.value(), msg.key(), partition, timestamp=ts,
                                       headers=msg.headers())  # fmt: skip
                return
            except (BufferError, KafkaException) as e:
                error = e

    def run(self, stop: threading.Event, on_status: Callable[[MirrorStats], None] | None = None) -> None:
        """Copy until ``stop`` is set; then make what was copied durable, commit, and leave the group."""
        self._clients()
        self._sync_store.ensure_topic(self._target_admin)
        self._sync_store.catch_up(self._syncs, ())
        self._refresh_topics()
        c = self.config
        next_refresh = time.monotonic() + c.refresh_interval_s
        next_commit = time.monotonic() + c.commit_interval_s
        next_groups = time.monotonic() + c.group_sync_interval_s
        try:
            while not stop.is_set():
                self._copy(self._consumer.consume(c.batch, 0.2))
                if self._failure is not None:
                    raise RuntimeError(self._failure)
                now = time.monotonic()
                if now >= next_commit:
                    self._commit()
                    self._update_lag()
                    if on_status is not None:
                        on_status(self.stats)
                    next_commit = now + c.commit_interval_s
                if now >= next_refresh:
                    self._refresh_topics()
                    next_refresh = now + c.refresh_interval_s
                if now >= next_groups:
                    self._sync_groups()
                    next_groups = now + c.group_sync_interval_s
            self._commit(force=True)
            self._sync_groups()
        finally:
            try:  # (its progress is committed above: a close that times out leaves nothing behind)
                self._consumer.close()
            except Exception as e:  # librdkafka's close may raise its error under load
                log.warning("closing the source consumer: %s", e)
            if self._txn is not None:
                self._txn.close()
            self._sync_store.close()

    def _sync_groups(self) -> None:
        with self._lock:
            owned = {k: self._syncs[k] for k in self._assigned if k in self._syncs}
        if not owned:
            return
        try:
            groups = source_groups(self._source_admin, self._groups_pattern, {self.config.group_id})
            written = sync_group_offsets(self._source_admin, self._target_admin, groups, owned,
                                         self.config.target_topic)  # fmt: skip
        except Exception as e:  # the next round tries again
            log.info("group offsets not carried over this round: %s", e)
            return
        self.stats.group_offsets_written += written
