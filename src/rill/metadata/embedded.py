"""The embedded metadata store of a single-node broker.

State lives in the first log directory:

- ``meta.properties``: Kafka's file, ``version=1``, ``cluster.id=<base64 uuid>``, ``node.id=<id>``.
- ``rill-metadata.json``: a JSON snapshot ``{"topics": {name: {"id", "partitions": [[leader, epoch,
  [replicas], [isr]], ...], "configs": {...}}}, "broker_configs": {...}, "next_producer_id": N}``,
  rewritten whole on every change through a temp file, fsync and rename, so a crash leaves either the old
  or the new snapshot.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rill.config import ensure_cluster_id
from rill.errors import ErrorCode, KafkaError
from rill.fsutil import write_atomically
from rill.metadata.store import (
    BrokerInfo,
    MetadataListener,
    PartitionState,
    TopicState,
    topic_collision,
    topic_name_problem,
)

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "rill-metadata.json"
META_PROPERTIES = "meta.properties"


def _read_properties(path: Path) -> dict[str, str]:
    props: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        props[key.strip()] = value.strip()
    return props


class EmbeddedMetadataStore:
    """A :class:`~rill.metadata.store.MetadataStore` for one broker, kept in its data directory."""

    def __init__(self, data_dir: Path, node_id: int, advertised: BrokerInfo, cluster_id: str | None = None) -> None:
        self._dir = data_dir
        self._node_id = node_id
        self._broker = advertised
        self._listeners: list[MetadataListener] = []
        self._topics: dict[str, TopicState] = {}
        self._by_id: dict[uuid.UUID, TopicState] = {}
        self._broker_configs: dict[str, str] = {}
        self._default_broker_configs: dict[str, str] = {}
        self._next_producer_id = 0
        data_dir.mkdir(parents=True, exist_ok=True)
        self._cluster_id = self._load_meta_properties(cluster_id)
        self._load_snapshot()
        self._saved = self._state()

    # -- persistence -------------------------------------------------------------------------------

    def _load_meta_properties(self, wanted: str | None) -> str:
        path = self._dir / META_PROPERTIES
        if path.exists():
            try:
                props = _read_properties(path)
            except UnicodeDecodeError:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{path} is corrupt: not a text file") from None
            stored = props.get("cluster.id")
            stored_node = props.get("node.id")
            for key, value in (("version", props.get("version", "1")), ("node.id", stored_node or "0")):
                if not value.isdigit() or (key == "version" and value not in ("0", "1")):
                    want = "1" if key == "version" else "a node id (a number)"
                    raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{path} is corrupt: {key}={value!r}, not {want}")
            if stored_node is not None and int(stored_node) != self._node_id:
                raise KafkaError(
                    ErrorCode.INCONSISTENT_CLUSTER_ID,
                    f"{path} belongs to node.id {stored_node}, but this broker is node.id {self._node_id}",
                )
            if stored:
                if wanted and wanted != stored:
                    raise KafkaError(
                        ErrorCode.INCONSISTENT_CLUSTER_ID,
                        f"{path} holds cluster.id {stored}, but cluster.id={wanted} was configured",
                    )
                return stored
        cluster_id = ensure_cluster_id(wanted)
        write_atomically(path, f"version=1\ncluster.id={cluster_id}\nnode.id={self._node_id}\n".encode())
        return cluster_id

    def _load_snapshot(self) -> None:
        path = self._dir / SNAPSHOT_FILE
        if not path.exists():
            return
        data = json.loads(path.read_text(encoding="utf-8"))
        for name, t in data.get("topics", {}).items():
            parts = tuple(
                PartitionState(
                    partition=i,
                    leader=p[0],
                    leader_epoch=p[1],
                    replicas=tuple(p[2]),
                    isr=tuple(p[3]),
                )
                for i, p in enumerate(t["partitions"])
            )
            self._put(TopicState(name, uuid.UUID(t["id"]), parts, dict(t.get("configs", {}))))
        self._broker_configs = dict(data.get("broker_configs", {}))
        self._default_broker_configs = dict(data.get("default_broker_configs", {}))
        self._next_producer_id = int(data.get("next_producer_id", 0))

    def _save(self) -> None:
        topics: dict[str, Any] = {}
        for name, t in sorted(self._topics.items()):
            topics[name] = {
                "id": str(t.topic_id),
                "partitions": [[p.leader, p.leader_epoch, list(p.replicas), list(p.isr)] for p in t.partitions],
                "configs": dict(t.configs),
            }
        snapshot = {
            "topics": topics,
            "broker_configs": self._broker_configs,
            "default_broker_configs": self._default_broker_configs,
            "next_producer_id": self._next_producer_id,
        }
        write_atomically(self._dir / SNAPSHOT_FILE, json.dumps(snapshot, indent=1, sort_keys=True).encode())

    def _put(self, topic: TopicState) -> None:
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def _state(self) -> tuple[Any, ...]:
        return (dict(self._topics), dict(self._by_id), dict(self._broker_configs),
                dict(self._default_broker_configs), self._next_producer_id)  # fmt: skip

    def _commit(self) -> None:
        """Write the snapshot of the state as just changed. When it cannot be written (a full disk) the
        change is undone and KAFKA_STORAGE_ERROR raised: what the broker answers and what it finds after a
        restart stay the same."""
        try:
            self._save()
        except OSError as e:
            (self._topics, self._by_id, self._broker_configs, self._default_broker_configs,
             self._next_producer_id) = self._saved  # fmt: skip
            self._saved = self._state()
            with contextlib.suppress(OSError):
                (self._dir / (SNAPSHOT_FILE + ".tmp")).unlink()
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write the cluster metadata in {self._dir}: {e}"
            ) from e
        self._saved = self._state()

    def _changed(self, undo: Callable[[], None] | None = None) -> None:
        """Commit the change and tell the listeners. With ``undo``: when a listener fails (the broker could
        not make a new partition's log: no space, no file descriptors), the change is taken back, committed
        and told again (the partitions made so far go), and the listener's error raised, so a refused
        CreateTopics or CreatePartitions leaves nothing behind that a restart would trip over."""
        self._commit()
        try:
            self._notify()
        except KafkaError:
            if undo is None:
                raise
            undo()
            try:
                self._commit()
                self._notify()
            except KafkaError as e:
                log.error("Could not take back a change the broker could not follow: %s", e.message)
            raise

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    # -- MetadataStore ------------------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def controller_id(self) -> int:
        return self._node_id

    def brokers(self) -> list[BrokerInfo]:
        return [self._broker]

    def topics(self) -> Mapping[str, TopicState]:
        return self._topics

    def topic(self, name: str) -> TopicState | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicState | None:
        return self._by_id.get(topic_id)

    def _new_partition(self, index: int, replicas: list[int] | None) -> PartitionState:
        reps = tuple(replicas) if replicas else (self._node_id,)
        return PartitionState(partition=index, leader=reps[0], leader_epoch=0, replicas=reps, isr=reps)

    def _check_new_assignments(self, topic: TopicState, total: int, assignments: Sequence[list[int]]) -> None:
        """Kafka's checks of a CreatePartitions assignment: one replica list per new partition, each as long as
        the topic's replication factor, of distinct live brokers."""
        added = total - len(topic.partitions)
        if len(assignments) != added:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Increasing the number of partitions by {added} but {len(assignments)} assignments provided.",
            )
        for replicas in assignments:
            self._check_replicas(replicas)
            if len(replicas) != topic.replication_factor:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment {replicas} does not have the topic's replication factor"
                    f" {topic.replication_factor}.",
                )

    def _check_replicas(self, replicas: list[int]) -> None:
        known = {b.node_id for b in self.brokers()}
        unknown = [r for r in replicas if r not in known]
        if unknown or len(set(replicas)) != len(replicas) or not replicas:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"invalid replica assignment {replicas}")

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None = None,
    ) -> TopicState:
        problem = topic_name_problem(name)
        if problem:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        if name in self._topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        collision = topic_collision(name, self._topics)
        if collision:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, collision)
        if assignments:
            if sorted(assignments) != list(range(len(assignments))):
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partition ids must be 0..N-1")
            for reps in assignments.values():
                self._check_replicas(reps)
            parts = tuple(self._new_partition(i, assignments[i]) for i in range(len(assignments)))
        else:
            if num_partitions < 1:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
            if replication_factor < 1:
                raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
            if replication_factor > len(self.brokers()):
                raise KafkaError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"Unable to replicate the partition {replication_factor} time(s): "
                    f"the number of brokers is {len(self.brokers())}.",
                )
            parts = tuple(self._new_partition(i, None) for i in range(num_partitions))
        topic = TopicState(name, uuid.uuid4(), parts, dict(configs))
        self._put(topic)
        self._changed(undo=lambda: self._remove(topic))
        return topic

    def _remove(self, topic: TopicState) -> None:
        self._topics.pop(topic.name, None)
        self._by_id.pop(topic.topic_id, None)

    def delete_topic(self, name: str) -> TopicState:
        topic = self._topics.pop(name, None)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        self._by_id.pop(topic.topic_id, None)
        self._changed()
        return topic

    def create_partitions(
        self, name: str, total: int, assignments: Sequence[list[int]] | None = None, *, validate_only: bool = False
    ) -> TopicState:
        topic = self._topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        current = len(topic.partitions)
        if total <= current:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, {total} would not be an increase.",
            )
        if assignments:
            self._check_new_assignments(topic, total, assignments)
        if validate_only:
            return topic
        added = tuple(
            self._new_partition(i, list(assignments[i - current]) if assignments else None)
            for i in range(current, total)
        )
        self._put(TopicState(topic.name, topic.topic_id, topic.partitions + added, topic.configs))
        self._changed(undo=lambda: self._put(topic))
        return self._topics[name]

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        topic = self._topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        self._put(TopicState(topic.name, topic.topic_id, topic.partitions, dict(configs)))
        self._changed()

    def broker_configs(self) -> Mapping[str, str]:
        return self._broker_configs

    def set_broker_configs(self, configs: Mapping[str, str]) -> None:
        self._broker_configs = dict(configs)
        self._changed()

    def default_broker_configs(self) -> Mapping[str, str]:
        return self._default_broker_configs

    def set_default_broker_configs(self, configs: Mapping[str, str]) -> None:
        self._default_broker_configs = dict(configs)
        self._changed()

    def allocate_producer_ids(self, count: int) -> int:
        first = self._next_producer_id
        self._next_producer_id += count
        self._commit()
        return first

    def add_listener(self, listener: MetadataListener) -> None:
        self._listeners.append(listener)
