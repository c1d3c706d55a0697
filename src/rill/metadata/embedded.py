"""The embedded metadata store of a single-node broker.

State lives in the first log directory:

- ``meta.properties``: Kafka's file, ``version=1``, ``cluster.id=<base64 uuid>``, ``node.id=<id>``.
- ``rill-metadata.json`` and ``rill-metadata.log``: a snapshot and the journal of changes after it
  (:mod:`rill.metadata.journal`). The snapshot is ``{"offset": N, "topics": {name: {"id", "partitions":
  [[leader, epoch, [replicas], [isr]], ...], "configs": {...}}}, "broker_configs": {...},
  "default_broker_configs": {...}, "next_producer_id": N}``; each journal line is one change: a topic's whole
  new state (``topic``), a deletion (``delete_topic``), a broker config set (``broker_configs``,
  ``default_broker_configs``), a consumer group's configs (``group_configs``), a client metrics subscription's
  configs (``client_metrics``; the snapshot's ``client_metrics`` holds them all), the next free producer id
  (``producer_ids``), or client quotas set or removed
  (``client_quotas``: entity path -> quota key -> value or null; the snapshot's ``client_quotas`` holds them all).

A change is checked first (a refused one raises ``KafkaError`` and changes nothing), then made durable (one
journal line and an fsync in a worker thread), then applied to the state here, and then told to the
listeners. Changes are made one at a time. When a listener cannot follow a change it was told of (a new
partition's log cannot be made: no space, no file descriptors), the change is taken back by a second change,
and the listener's error raised. A stored value that no longer validates (a config this version refuses) is
logged and set aside at load; it never stops a start, nor does a change of the journal that cannot be applied
(logged and skipped). A snapshot that cannot be read does: it is the whole state, and the error names it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rill.config import ensure_cluster_id, validate_topic_configs
from rill.errors import ErrorCode, KafkaError
from rill.fsutil import write_atomically
from rill.metadata.client_quotas import ClientQuotas, QuotaChanges
from rill.metadata.client_quotas import changes_from_json as quota_changes_from_json
from rill.metadata.client_quotas import changes_to_json as quota_changes_to_json
from rill.metadata.journal import JOURNAL_FILE, SNAPSHOT_FILE, MetadataJournal
from rill.metadata.store import (
    BrokerInfo,
    MetadataDelta,
    MetadataListener,
    PartitionState,
    TopicState,
    check_new_partitions,
    check_new_topic,
    valid_stored_configs,
)
from rill.metadata.user_credentials import CredentialChanges, UserCredentials, changes_from_json, changes_to_json
from rill.security.acl import AccessControlEntry, AclCache, ResourcePattern, pattern_to_json
from rill.security.scram import ScramCredential

log = logging.getLogger(__name__)

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


def _topic_to_json(t: TopicState) -> dict[str, Any]:
    return {
        "id": str(t.topic_id),
        "partitions": [[p.leader, p.leader_epoch, list(p.replicas), list(p.isr)] for p in t.partitions],
        "configs": dict(t.configs),
    }


def _topic_from_json(name: str, t: Mapping[str, Any]) -> TopicState:
    parts = tuple(
        PartitionState(partition=i, leader=p[0], leader_epoch=p[1], replicas=tuple(p[2]), isr=tuple(p[3]))
        for i, p in enumerate(t["partitions"])
    )
    return TopicState(name, uuid.UUID(t["id"]), parts, valid_stored_configs(name, dict(t.get("configs", {}))))


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
        self._group_configs: dict[str, dict[str, str]] = {}
        self._client_metrics: dict[str, dict[str, str]] = {}
        self._next_producer_id = 0
        self._credentials = UserCredentials()
        self._acls = AclCache()
        self._quotas = ClientQuotas()
        self._offset = 0
        self._lock = asyncio.Lock()
        data_dir.mkdir(parents=True, exist_ok=True)
        self._cluster_id = self._load_meta_properties(cluster_id)
        self._journal = MetadataJournal(data_dir)
        snapshot, changes = self._journal.load()
        try:
            if snapshot is not None:
                self._load_snapshot(snapshot)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            self._journal.close_now()
            path = data_dir / SNAPSHOT_FILE
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{path} is corrupt: {type(e).__name__}: {e}") from None
        for change in changes:
            try:
                self._replay(change)
            except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:  # a change no broker wrote
                log.error("%s: skipped change %s, which cannot be applied: %s: %s", data_dir / JOURNAL_FILE,
                          change.get("offset"), type(e).__name__, e)  # fmt: skip

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

    def _load_snapshot(self, data: Mapping[str, Any]) -> None:
        self._offset = int(data.get("offset", 0))
        for name, t in data.get("topics", {}).items():
            self._put(_topic_from_json(name, t))
        self._broker_configs = dict(data.get("broker_configs", {}))
        self._default_broker_configs = dict(data.get("default_broker_configs", {}))
        self._group_configs = {g: dict(c) for g, c in data.get("group_configs", {}).items()}
        self._client_metrics = {str(n): _strings(c) for n, c in data.get("client_metrics", {}).items()}
        self._next_producer_id = int(data.get("next_producer_id", 0))
        self._credentials = UserCredentials.from_json(data.get("scram_credentials", {}))
        self._acls = AclCache.from_json(data.get("acls", []))
        self._quotas = ClientQuotas.from_json(data.get("client_quotas", {}))

    def _replay(self, change: Mapping[str, Any]) -> None:
        kind = change.get("type")
        if kind == "topic":
            self._put(_topic_from_json(change["name"], change["topic"]))
        elif kind in ("delete_topic", "delete_topics"):
            for name in change.get("names", [change.get("name")]):
                topic = self._topics.get(name)
                if topic is not None:
                    self._remove(topic)
        elif kind == "broker_configs":
            self._broker_configs = dict(change["configs"])
        elif kind == "default_broker_configs":
            self._default_broker_configs = dict(change["configs"])
        elif kind == "group_configs":
            if change["configs"]:
                self._group_configs[change["group"]] = dict(change["configs"])
            else:
                self._group_configs.pop(change["group"], None)
        elif kind == "client_metrics":
            if change["configs"]:
                self._client_metrics[str(change["name"])] = _strings(change["configs"])
            else:
                self._client_metrics.pop(change["name"], None)
        elif kind == "producer_ids":
            self._next_producer_id = int(change["next"])
        elif kind == "user_scram":
            self._credentials.apply(changes_from_json(change["users"]))
        elif kind == "acls":
            self._acls.load(change.get("resources", []))
        elif kind == "client_quotas":
            self._quotas.apply(quota_changes_from_json(change["entities"]))
        else:
            log.error("skipped a metadata change of unknown type %r", kind)
        self._offset = int(change["offset"])

    def _encoder(self) -> Any:
        """A function that encodes the current state, reading only values that no later change mutates."""
        topics = dict(self._topics)
        broker, default = dict(self._broker_configs), dict(self._default_broker_configs)
        groups = {g: dict(c) for g, c in self._group_configs.items()}
        client_metrics = {n: dict(c) for n, c in self._client_metrics.items()}
        next_pid, offset = self._next_producer_id, self._offset
        credentials = self._credentials.to_json()
        acls = self._acls.to_json()
        quotas = self._quotas.to_json()

        def encode() -> bytes:
            snapshot = {
                "offset": offset,
                "topics": {name: _topic_to_json(t) for name, t in sorted(topics.items())},
                "broker_configs": broker,
                "default_broker_configs": default,
                "group_configs": groups,
                "client_metrics": client_metrics,
                "next_producer_id": next_pid,
                "scram_credentials": credentials,
                "acls": acls,
                "client_quotas": quotas,
            }
            return json.dumps(snapshot, separators=(",", ":"), sort_keys=True).encode()  # the C encoder: no indent

        return encode

    async def _write(self, change: dict[str, Any]) -> None:
        """Make ``change`` durable (the caller holds the lock and applies it after). A full disk refuses it
        with KAFKA_STORAGE_ERROR, and nothing of it remains."""
        change["offset"] = self._offset + 1
        try:
            await self._journal.append(change)
        except OSError as e:
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write the cluster metadata in {self._dir}: {e}"
            ) from e
        self._offset += 1

    def _after_write(self) -> None:
        self._journal.maybe_snapshot(len(self._topics), self._offset, self._encoder())

    async def _notify(self, delta: MetadataDelta) -> None:
        for listener in list(self._listeners):
            await listener(delta)

    def _put(self, topic: TopicState) -> None:
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def _remove(self, topic: TopicState) -> None:
        self._topics.pop(topic.name, None)
        self._by_id.pop(topic.topic_id, None)

    async def _put_topic(self, topic: TopicState, before: TopicState | None) -> None:
        """Write, apply and tell a topic's new state. When a listener cannot follow it, the topic goes back to
        ``before`` (removed when None) by a second change, and the listener's error is raised."""
        await self._write({"type": "topic", "name": topic.name, "topic": _topic_to_json(topic)})
        self._put(topic)
        self._after_write()
        try:
            await self._notify(MetadataDelta(self._offset, changed=(topic,)))
        except KafkaError:
            try:
                if before is None:
                    await self._write({"type": "delete_topic", "name": topic.name})
                    self._remove(topic)
                    await self._notify(MetadataDelta(self._offset, deleted=(topic,)))
                else:
                    await self._write({"type": "topic", "name": topic.name, "topic": _topic_to_json(before)})
                    self._put(before)
                    await self._notify(MetadataDelta(self._offset, changed=(before,)))
            except KafkaError as e:
                log.error("Could not take back a change the broker could not follow: %s", e.message)
            raise

    async def close(self) -> None:
        await self._journal.close()

    def close_now(self) -> None:
        self._journal.close_now()

    # -- MetadataStore ------------------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def controller_id(self) -> int:
        return self._node_id

    @property
    def offset(self) -> int:
        return self._offset

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

    def _check_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignments: Mapping[int, list[int]] | None,
    ) -> tuple[PartitionState, ...]:
        check_new_topic(name, self._topics, num_partitions, replication_factor, assignments,
                        [b.node_id for b in self.brokers()])  # fmt: skip
        if assignments:
            return tuple(self._new_partition(i, assignments[i]) for i in range(len(assignments)))
        return tuple(self._new_partition(i, None) for i in range(num_partitions))

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None = None,
    ) -> TopicState:
        async with self._lock:
            parts = self._check_new_topic(name, num_partitions, replication_factor, assignments)
            validate_topic_configs(configs)
            topic = TopicState(name, uuid.uuid4(), parts, dict(configs))
            await self._put_topic(topic, None)
            return topic

    async def delete_topic(self, name: str) -> TopicState:
        (topic,) = await self.delete_topics([name])
        return topic

    async def delete_topics(self, names: Sequence[str]) -> list[TopicState]:
        async with self._lock:
            topics = []
            for name in dict.fromkeys(names):
                topic = self._topics.get(name)
                if topic is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
                topics.append(topic)
            await self._write({"type": "delete_topics", "names": [t.name for t in topics]})
            for topic in topics:
                self._remove(topic)
            self._after_write()
            await self._notify(MetadataDelta(self._offset, deleted=tuple(topics)))
            return topics

    async def create_partitions(
        self, name: str, total: int, assignments: Sequence[list[int]] | None = None, *, validate_only: bool = False
    ) -> TopicState:
        async with self._lock:
            topic = check_new_partitions(name, self._topics.get(name), total, assignments,
                                         [b.node_id for b in self.brokers()])  # fmt: skip
            current = len(topic.partitions)
            if validate_only:
                return topic
            added = tuple(
                self._new_partition(i, list(assignments[i - current]) if assignments else None)
                for i in range(current, total)
            )
            grown = TopicState(topic.name, topic.topic_id, topic.partitions + added, topic.configs)
            await self._put_topic(grown, topic)
            return grown

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        async with self._lock:
            topic = self._topics.get(name)
            if topic is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
            validate_topic_configs(configs)
            await self._put_topic(TopicState(topic.name, topic.topic_id, topic.partitions, dict(configs)), topic)

    def broker_configs(self) -> Mapping[str, str]:
        return self._broker_configs

    async def set_broker_configs(self, configs: Mapping[str, str]) -> None:
        async with self._lock:
            await self._write({"type": "broker_configs", "configs": dict(configs)})
            self._broker_configs = dict(configs)
            self._after_write()
            await self._notify(MetadataDelta(self._offset, broker_configs=True))

    def default_broker_configs(self) -> Mapping[str, str]:
        return self._default_broker_configs

    def group_configs(self, group_id: str) -> Mapping[str, str]:
        return self._group_configs.get(group_id, {})

    async def set_group_configs(self, group_id: str, configs: Mapping[str, str]) -> None:
        async with self._lock:
            await self._write({"type": "group_configs", "group": group_id, "configs": dict(configs)})
            if configs:
                self._group_configs[group_id] = dict(configs)
            else:
                self._group_configs.pop(group_id, None)
            self._after_write()

    def groups_with_configs(self) -> list[str]:
        return sorted(self._group_configs)

    def client_metrics_configs(self) -> Mapping[str, Mapping[str, str]]:
        return self._client_metrics

    async def set_client_metrics_configs(self, name: str, configs: Mapping[str, str]) -> None:
        async with self._lock:
            await self._write({"type": "client_metrics", "name": name, "configs": dict(configs)})
            if configs:
                self._client_metrics[name] = dict(configs)
            else:
                self._client_metrics.pop(name, None)
            self._after_write()

    async def set_default_broker_configs(self, configs: Mapping[str, str]) -> None:
        async with self._lock:
            await self._write({"type": "default_broker_configs", "configs": dict(configs)})
            self._default_broker_configs = dict(configs)
            self._after_write()
            await self._notify(MetadataDelta(self._offset, broker_configs=True))

    async def allocate_producer_ids(self, count: int) -> int:
        async with self._lock:
            first = self._next_producer_id
            await self._write({"type": "producer_ids", "next": first + count})
            self._next_producer_id = first + count
            self._after_write()
            return first

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._credentials.get(user, mechanism)

    def scram_credentials(self, user: str) -> Mapping[str, ScramCredential]:
        return self._credentials.of(user)

    def scram_users(self) -> list[str]:
        return self._credentials.users()

    async def alter_scram_credentials(self, changes: CredentialChanges) -> None:
        async with self._lock:
            await self._write({"type": "user_scram", "users": changes_to_json(changes)})
            self._credentials.apply(changes)
            self._after_write()

    def acls(self) -> AclCache:
        return self._acls

    async def alter_acls(self, changes: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> None:
        async with self._lock:
            resources = [pattern_to_json(p, entries) for p, entries in changes.items()]
            await self._write({"type": "acls", "resources": resources})
            for pattern, entries in changes.items():
                self._acls.set_resource(pattern, entries)
            self._after_write()

    def client_quotas(self) -> ClientQuotas:
        return self._quotas

    async def alter_client_quotas(self, changes: QuotaChanges) -> None:
        async with self._lock:
            await self._write({"type": "client_quotas", "entities": quota_changes_to_json(changes)})
            self._quotas.apply(changes)
            self._after_write()

    def add_listener(self, listener: MetadataListener) -> None:
        self._listeners.append(listener)


def _strings(configs: Mapping[str, Any]) -> dict[str, str]:
    """Stored configs as strings (a value another tool wrote as a number is its text)."""
    return {str(k): str(v) for k, v in configs.items()}
