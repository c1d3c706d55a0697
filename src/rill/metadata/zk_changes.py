"""The changes a broker makes to the cluster's metadata in ZooKeeper (the write half of ``ZkMetadataStore``).

Each change is checked against this broker's image first (a refused change writes nothing), written to
ZooKeeper (conditionally on a znode's version where two writers could race), and awaited until the image
shows it (``_wait_until``): a new topic once the controller has elected its partitions' leaders, a deletion once
the controller has removed it, a config once its watch brought it back, a reassignment once the image holds the
topic's assignment at the version written (or a later one).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError

from rill.config import validate_topic_configs
from rill.errors import ErrorCode, KafkaError
from rill.metadata import zk_layout as zl
from rill.metadata.placement import assign_replicas
from rill.metadata.store import (
    BrokerInfo,
    PartitionState,
    TopicState,
    check_new_partitions,
    check_new_topic,
    check_replication_factor,
)
from rill.metadata.zk_client_metrics import ZkClientMetrics
from rill.metadata.zk_tx import after_lost_race, committed


class ZkChanges:
    """The MetadataStore changes of ``ZkMetadataStore``, which provides the state they read."""

    zk: KazooClient
    _node_id: int
    _session_timeout_s: float
    _topics: dict[str, TopicState]
    _by_id: dict[uuid.UUID, TopicState]
    _brokers: dict[int, BrokerInfo]
    _broker_configs: dict[str, str]
    _default_broker_configs: dict[str, str]
    _group_configs: dict[str, dict[str, str]]
    _wait_timeout_s: float
    client_metrics: ZkClientMetrics
    _applied: asyncio.Condition
    _assignment_versions: dict[str, int]
    brokers: Callable[[], list[BrokerInfo]]
    _wait_until: Callable[[Callable[[], bool], str], Awaitable[None]]

    def _place(self, partitions: int, replication_factor: int) -> dict[int, tuple[int, ...]]:
        """Replicas for new partitions over the live brokers; INVALID_REPLICATION_FACTOR when there are fewer
        live brokers than replicas (a new topic, or new partitions of a topic, while brokers are down)."""
        brokers = self.brokers()
        check_replication_factor(replication_factor, len(brokers))
        return assign_replicas(brokers, partitions, replication_factor)

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None = None,
    ) -> TopicState:
        check_new_topic(name, self._topics, num_partitions, replication_factor, assignments, list(self._brokers))
        validate_topic_configs(configs)
        if assignments:
            parts = {p: tuple(r) for p, r in assignments.items()}
        else:
            parts = self._place(num_partitions, replication_factor)
        topic_id = uuid.uuid4()

        def write() -> None:
            tx = self.zk.transaction()
            tx.create(zl.topic_config_path(name), zl.encode_configs(configs))
            tx.create(zl.topic_path(name), zl.encode_assignment(zl.Assignment(topic_id, parts)))
            # The partition list exists with the topic, so a broker that sees the topic can watch it.
            tx.create(zl.partitions_path(name))
            results = tx.commit()
            if any(isinstance(r, NodeExistsError) for r in results):
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot create topic {name}: {failed[0]!r}")

        await asyncio.to_thread(write)

        def created() -> bool:
            t = self._topics.get(name)
            return t is not None and t.topic_id == topic_id and all(p.leader >= 0 for p in t.partitions)

        await self._wait_until(created, f"topic {name}")
        return self._topics[name]

    async def delete_topic(self, name: str) -> TopicState:
        (topic,) = await self.delete_topics([name])
        return topic

    async def delete_topics(self, names: Sequence[str]) -> list[TopicState]:
        topics = []
        for name in dict.fromkeys(names):
            topic = self._topics.get(name)
            if topic is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
            topics.append(topic)

        def write() -> None:
            # Every mark in one transaction: a request that fails deletes nothing.
            for attempt in itertools.count(1):
                tx = self.zk.transaction()
                for t in topics:
                    if self.zk.exists(f"{zl.DELETE_TOPICS}/{t.name}") is None:
                        tx.create(f"{zl.DELETE_TOPICS}/{t.name}")
                if not tx.operations or committed(tx.commit()):
                    return
                after_lost_race(self.zk, attempt, (zl.DELETE_TOPICS,))

        await asyncio.to_thread(write)
        ids = {t.topic_id for t in topics}
        await self._wait_until(lambda: not ids & set(self._by_id), "the deletion")
        return topics

    async def create_partitions(
        self, name: str, total: int, assignments: Sequence[list[int]] | None = None, *, validate_only: bool = False
    ) -> TopicState:
        topic = check_new_partitions(name, self._topics.get(name), total, assignments, list(self._brokers))
        current = len(topic.partitions)
        rf = topic.replication_factor
        if assignments:
            added = {current + i: tuple(r) for i, r in enumerate(assignments)}
        else:
            fresh = self._place(total - current, rf)
            added = {current + p: r for p, r in fresh.items()}
        if validate_only:
            return topic
        parts = {s.partition: s.replicas for s in topic.partitions} | added

        def write() -> None:
            _, stat = self.zk.get(zl.topic_path(name))
            assignment = zl.Assignment(topic.topic_id, parts)
            try:
                self.zk.set(zl.topic_path(name), zl.encode_assignment(assignment), version=stat.version)
            except BadVersionError:
                raise KafkaError(ErrorCode.REASSIGNMENT_IN_PROGRESS, f"topic {name} changed meanwhile") from None

        await asyncio.to_thread(write)

        def grown() -> bool:
            t = self._topics.get(name)
            return t is not None and len(t.partitions) == total and all(p.leader >= 0 for p in t.partitions)

        await self._wait_until(grown, f"the new partitions of {name}")
        return self._topics[name]

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        if name not in self._topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        validate_topic_configs(configs)
        await self._set_configs(zl.topic_config_path(name), configs)
        wanted = dict(configs)
        await self._wait_until(lambda: name not in self._topics or self._topics[name].configs == wanted,
                               f"the configs of {name}")  # fmt: skip

    async def set_broker_configs(self, configs: Mapping[str, str]) -> None:
        await self._set_configs(zl.broker_config_path(self._node_id), configs)
        wanted = dict(configs)
        await self._wait_until(lambda: self._broker_configs == wanted, "the broker configs")

    async def set_default_broker_configs(self, configs: Mapping[str, str]) -> None:
        await self._set_configs(zl.broker_config_path(None), configs)
        wanted = dict(configs)
        await self._wait_until(lambda: self._default_broker_configs == wanted, "the broker configs")

    async def set_group_configs(self, group_id: str, configs: Mapping[str, str]) -> None:
        await self._set_configs(zl.group_config_path(group_id), configs)
        wanted = dict(configs)
        await self._wait_until(lambda: self._group_configs.get(group_id, {}) == wanted, "the group configs")

    def groups_with_configs(self) -> list[str]:
        return sorted(self._group_configs)

    def client_metrics_configs(self) -> Mapping[str, Mapping[str, str]]:
        return self.client_metrics.configs

    async def set_client_metrics_configs(self, name: str, configs: Mapping[str, str]) -> None:
        await self.client_metrics.alter(name, configs, self._wait_timeout_s)

    async def _set_configs(self, path: str, configs: Mapping[str, str]) -> None:
        def write() -> None:
            data = zl.encode_configs(configs)
            try:
                self.zk.set(path, data)
            except NoNodeError:
                self.zk.create(path, data, makepath=True)

        await asyncio.to_thread(write)

    async def allocate_producer_ids(self, count: int) -> int:
        def allocate() -> int:
            while True:
                try:
                    data, stat = self.zk.get(zl.PRODUCER_ID_BLOCK)
                except NoNodeError:
                    try:
                        self.zk.create(zl.PRODUCER_ID_BLOCK, zl.encode_producer_id_block(self._node_id, 0, count - 1))
                        return 0
                    except NodeExistsError:
                        continue
                first = zl.decode_producer_id_block(data)
                block = zl.encode_producer_id_block(self._node_id, first, first + count - 1)
                try:
                    self.zk.set(zl.PRODUCER_ID_BLOCK, block, version=stat.version)
                    return first
                except BadVersionError:
                    continue

        return await asyncio.to_thread(allocate)

    async def elect_leaders(
        self, election_type: int, partitions: list[tuple[str, int]], timeout_s: float
    ) -> set[tuple[str, int]]:
        """Ask the controller for leader elections (0: preferred, 1: unclean) and wait until each partition has
        the leader it asked for; returns the partitions that did not get one within ``timeout_s``."""

        def done(topic: str, p: int) -> bool:
            t = self._topics.get(topic)
            if t is None or p >= len(t.partitions):
                return True
            state = t.partitions[p]
            return state.leader == state.replicas[0] if election_type == 0 else state.leader >= 0

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        data = zl.encode_election(election_type, partitions)
        while True:
            try:
                await asyncio.to_thread(self.zk.create, zl.LEADER_ELECTION, data)
                break
            except NodeExistsError:  # another election is under way: wait for the controller to finish it
                if loop.time() > deadline:
                    return set(partitions)
                await asyncio.sleep(0.1)
        try:
            async with asyncio.timeout_at(deadline):
                async with self._applied:
                    await self._applied.wait_for(lambda: all(done(t, p) for t, p in partitions))
        except TimeoutError:
            pass
        return {(t, p) for t, p in partitions if not done(t, p)}

    async def alter_reassignments(
        self, targets: Mapping[tuple[str, int], Sequence[int] | None]
    ) -> dict[tuple[str, int], KafkaError | None]:
        """Start (target replicas) or cancel (None) partition reassignments, written to the topics' assignments
        for the controller to carry out (KIP-455): the target replicas are added, caught up, then the others
        removed. Returns each partition's error (None when accepted)."""
        out: dict[tuple[str, int], KafkaError | None] = {}
        by_topic: dict[str, dict[int, Sequence[int] | None]] = {}
        for (topic, p), target in targets.items():
            state = self._topics.get(topic)
            if state is None or not 0 <= p < len(state.partitions):
                out[(topic, p)] = KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{p} does not exist")
            elif target is not None and (not target or len(set(target)) != len(target)
                                         or any(r not in self._brokers for r in target)):  # fmt: skip
                out[(topic, p)] = KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                             f"invalid replica assignment {list(target)} for {topic}-{p}")  # fmt: skip
            else:
                by_topic.setdefault(topic, {})[p] = target

        def write(topic: str, wanted: dict[int, Sequence[int] | None]) -> tuple[dict[int, KafkaError | None], int]:
            """The partitions' errors, and the version of the assignment written (-1 when nothing was)."""
            while True:
                data, stat = self.zk.get(zl.topic_path(topic))
                a = zl.decode_assignment(data)
                parts, adding, removing = dict(a.partitions), dict(a.adding), dict(a.removing)
                errors: dict[int, KafkaError | None] = {}
                for p, target in wanted.items():
                    ongoing = bool(adding.get(p) or removing.get(p))
                    original = tuple(r for r in parts[p] if r not in adding.get(p, ()))
                    if target is None:
                        if not ongoing:
                            errors[p] = KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                                                   f"no reassignment of {topic}-{p} is in progress")  # fmt: skip
                            continue
                        parts[p], adding[p], removing[p] = original, (), ()
                    else:
                        new = tuple(target)
                        parts[p] = new + tuple(r for r in original if r not in new)
                        adding[p] = tuple(r for r in new if r not in original)
                        removing[p] = tuple(r for r in original if r not in new)
                    errors[p] = None
                if all(e is not None for e in errors.values()):
                    return errors, -1
                try:
                    written = self.zk.set(zl.topic_path(topic), zl.encode_assignment(
                        zl.Assignment(a.topic_id, parts, adding, removing)), version=stat.version)  # fmt: skip
                    return errors, int(written.version)
                except BadVersionError:
                    continue

        for topic, wanted in by_topic.items():
            errors, version = await asyncio.to_thread(write, topic, wanted)
            out.update({(topic, p): error for p, error in errors.items()})
            if version >= 0:  # answered once this broker's image shows the assignment written, or a later one
                await self._wait_until(self._shows_assignment(topic, version), f"the reassignment of {topic}")
        return out

    def _shows_assignment(self, topic: str, version: int) -> Callable[[], bool]:
        return lambda: topic not in self._topics or self._assignment_versions.get(topic, -1) >= version

    async def alter_partition(self, topic: str, state: PartitionState, isr: Sequence[int]) -> PartitionState:
        """As leader, change a partition's ISR, conditionally on the partition epoch this broker knows
        (Kafka's AlterPartition): a stale epoch is refused with FENCED_LEADER_EPOCH / INVALID_UPDATE_VERSION. A
        write whose answer was lost (ConnectionLoss) is resolved by reading the znode again (again while the
        connection is down, up to the session timeout), as Kafka's conditional update does: found written, it is
        taken; not written, it is made again. A KafkaError means the znode does not hold it (not made, or changed
        since by another writer: OPERATION_NOT_ATTEMPTED when ZooKeeper could not be read before anything was
        sent); any other error leaves its outcome unknown."""
        path = zl.state_path(topic, state.partition)

        def write() -> int:
            try:
                data, stat = self.zk.get(path)
            except ConnectionLoss:  # nothing was sent: known not made
                raise KafkaError(ErrorCode.OPERATION_NOT_ATTEMPTED, f"{path}: ZooKeeper unreachable") from None
            current = zl.decode_state(data, stat.version)
            if current.leader_epoch != state.leader_epoch or current.leader != self._node_id:
                raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH, f"{topic}-{state.partition} has a newer leader")
            new = zl.LeaderAndIsr(state.leader, state.leader_epoch, tuple(isr), current.controller_epoch)
            deadline = time.monotonic() + self._session_timeout_s
            while True:
                try:
                    return int(self.zk.set(path, zl.encode_state(new), version=state.partition_epoch).version)
                except BadVersionError:
                    written = self._state_written(path, new, state.partition_epoch, deadline)
                    if written is None:
                        changed = f"{topic}-{state.partition} changed"
                        raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, changed) from None
                    return written
                except ConnectionLoss:
                    written = self._state_written(path, new, state.partition_epoch, deadline)
                    if written is not None:
                        return written  # made before the answer was lost; else: made again

        version = await asyncio.to_thread(write)
        return PartitionState(state.partition, state.leader, state.leader_epoch, state.replicas, tuple(isr), version)

    def _state_written(self, path: str, wanted: zl.LeaderAndIsr, expected_version: int, deadline: float) -> int | None:
        """After a conditional write of ``wanted`` whose outcome is unknown: its znode version when the znode holds
        it (the write was made), None when the znode is still at ``expected_version`` (it was not);
        INVALID_UPDATE_VERSION when another writer changed it. Reads again while the connection is down, until
        ``deadline``."""
        while True:
            try:
                data, stat = self.zk.get(path)
                break
            except ConnectionLoss:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        found = zl.decode_state(data, stat.version)
        if (found.leader, found.leader_epoch, found.isr) == (wanted.leader, wanted.leader_epoch, wanted.isr) and (
            stat.version > expected_version
        ):
            return int(stat.version)
        if stat.version == expected_version:
            return None
        raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"{path} was changed by another writer")
