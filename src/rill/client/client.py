"""A small blocking Kafka client built on Rill's protocol codec.

``KafkaClient`` keeps one ``BrokerConnection`` per broker, a metadata cache, and offers the requests that
Rill's tools and the Spark source need: Metadata, ListOffsets, Fetch, Produce, InitProducerId, CreateTopics,
FindCoordinator, OffsetCommit and OffsetFetch. Every call groups its partitions by leader and sends one
request per leader. Retriable failures (leader moved, connection broke) refresh metadata and retry until
``timeout_s``; other errors come back per partition (``ErrorCode``) or raise ``KafkaError``. ``security``
(``rill.client.security.ClientSecurity``) secures every connection with TLS and/or SASL; an authentication
failure raises ``AuthenticationError`` at once, without retries.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rill.client.connection import BrokerAddress, BrokerConnection, NetworkError, parse_bootstrap
from rill.client.security import ClientSecurity
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
READ_UNCOMMITTED = 0
# OffsetFetch errors after which the coordinator is looked up and asked again.
_COORDINATOR_RETRIES = frozenset(
    {ErrorCode.UNSTABLE_OFFSET_COMMIT, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR}
)


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    leader: int
    leader_epoch: int
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    error: ErrorCode
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    brokers: dict[int, BrokerAddress]
    topics: dict[str, TopicMetadata]


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition of a Fetch response. ``records`` holds whole and possibly one trailing partial batch."""

    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    records: bytes


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    offset: int
    timestamp: int


class KafkaClient:
    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "rill-client",
        timeout_s: float = 30.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security
        self._conns: dict[int, BrokerConnection] = {}
        self._bootstrap_conn: BrokerConnection | None = None
        self._metadata = ClusterMetadata({}, {})

    # -- connections -------------------------------------------------------------------------------------

    def _any_connection(self) -> BrokerConnection:
        for conn in self._conns.values():
            if not conn.closed:
                return conn
        if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
            return self._bootstrap_conn
        errors: list[str] = []
        for host, port in self.bootstrap:
            try:
                self._bootstrap_conn = BrokerConnection(
                    host, port, client_id=self.client_id, timeout_s=self.timeout_s, security=self.security
                )
                return self._bootstrap_conn
            except NetworkError as e:
                errors.append(e.message)
        raise NetworkError("no bootstrap server reachable: " + "; ".join(errors))

    def connection(self, node_id: int) -> BrokerConnection:
        conn = self._conns.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        addr = self._metadata.brokers.get(node_id)
        if addr is None:
            self.refresh_metadata(None)
            addr = self._metadata.brokers.get(node_id)
            if addr is None:
                raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"unknown broker {node_id}")
        conn = BrokerConnection(
            addr.host, addr.port, client_id=self.client_id, timeout_s=self.timeout_s, security=self.security
        )
        self._conns[node_id] = conn
        return conn

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        if self._bootstrap_conn is not None:
            self._bootstrap_conn.close()
            self._bootstrap_conn = None

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _retrying(self, what: str) -> Iterable[int]:
        """Attempt numbers until the deadline; sleeps with backoff between attempts."""
        deadline = time.monotonic() + self.timeout_s
        attempt = 0
        while True:
            yield attempt
            attempt += 1
            if time.monotonic() >= deadline:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{what}: gave up after {self.timeout_s:.0f}s")
            time.sleep(min(0.05 * (2 ** min(attempt, 5)), 1.0))

    # -- metadata ----------------------------------------------------------------------------------------

    @property
    def cluster(self) -> ClusterMetadata:
        return self._metadata

    def refresh_metadata(self, topics: Iterable[str] | None, *, allow_auto_create: bool = False) -> ClusterMetadata:
        """Metadata for ``topics`` (all topics when None); merged into the cache and returned."""
        conn = self._any_connection()
        names = None if topics is None else [{"name": t} for t in topics]
        _, body = conn.request(ApiKey.METADATA, {"topics": names, "allow_auto_topic_creation": allow_auto_create})
        brokers = {b["node_id"]: BrokerAddress(b["node_id"], b["host"], b["port"]) for b in body["brokers"]}
        fresh: dict[str, TopicMetadata] = {}
        for t in body["topics"]:
            parts = {
                p["partition_index"]: PartitionMetadata(
                    p["partition_index"], p["leader_id"], p["leader_epoch"], ErrorCode(p["error_code"])
                )
                for p in t["partitions"]
            }
            fresh[t["name"]] = TopicMetadata(t["name"], ErrorCode(t["error_code"]), parts)
        merged = fresh if topics is None else {**self._metadata.topics, **fresh}
        self._metadata = ClusterMetadata(brokers or self._metadata.brokers, merged)
        return self._metadata

    def topic(self, name: str, *, allow_auto_create: bool = False) -> TopicMetadata:
        """Metadata of one topic (fresh); raises ``KafkaError`` when it does not exist.

        With ``allow_auto_create`` the Metadata request lets the broker create a missing topic, as Kafka's
        producers ask (``allow.auto.create.topics``); the broker does so when its
        ``auto.create.topics.enable`` is true. A topic whose partitions have no leader yet (just created) is
        asked for again until the client's timeout."""
        for _ in self._retrying(f"metadata of topic {name!r}"):
            md = self.refresh_metadata([name], allow_auto_create=allow_auto_create).topics.get(name)
            if md is None or md.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                why = f"topic {name!r} does not exist"
                if allow_auto_create:
                    why += (
                        " and the broker did not create it (its auto.create.topics.enable is false):"
                        " create the topic first (rill topics create NAME)"
                    )
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, why)
            if md.error == ErrorCode.NONE and md.partitions and all(p.leader >= 0 for p in md.partitions.values()):
                return md
            if md.error != ErrorCode.NONE and not md.error.retriable:
                raise KafkaError(md.error, f"topic {name!r}: {md.error.name}")
        raise AssertionError("unreachable")  # _retrying raises at its deadline

    def partitions_for(self, name: str) -> list[TopicPartition]:
        return [TopicPartition(name, p) for p in sorted(self.topic(name).partitions)]

    def list_topics(self) -> list[str]:
        md = self.refresh_metadata(None)
        return sorted(n for n, t in md.topics.items() if t.error == ErrorCode.NONE)

    def leader_for(self, tp: TopicPartition) -> int:
        t = self._metadata.topics.get(tp.topic)
        if t is None or tp.partition not in t.partitions:
            t = self.refresh_metadata([tp.topic]).topics.get(tp.topic)
        if t is None or tp.partition not in t.partitions:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {tp}")
        leader = t.partitions[tp.partition].leader
        if leader < 0:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"no leader for {tp}")
        return leader

    def _by_leader(self, tps: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
        out: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in tps:
            out[self.leader_for(tp)].append(tp)
        return out

    def _forget(self, node_id: int | None, topics: Iterable[str]) -> None:
        if node_id is not None and node_id in self._conns:
            self._conns.pop(node_id).close()
        for t in set(topics):
            self._metadata.topics.pop(t, None)

    # -- offsets -----------------------------------------------------------------------------------------

    def list_offsets(self, wanted: Mapping[TopicPartition, int]) -> dict[TopicPartition, OffsetAndTimestamp]:
        """ListOffsets for each partition's timestamp (-2 earliest, -1 latest, else the first offset whose
        timestamp is >= it; offset -1 when there is none)."""
        result: dict[TopicPartition, OffsetAndTimestamp] = {}
        pending = dict(wanted)
        for _ in self._retrying("ListOffsets"):
            retry: dict[TopicPartition, int] = {}
            for leader, tps in self._by_leader(pending).items():
                topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
                for tp in tps:
                    topics[tp.topic].append({"partition_index": tp.partition, "timestamp": pending[tp]})
                try:
                    _, body = self.connection(leader).request(
                        ApiKey.LIST_OFFSETS,
                        {
                            "replica_id": -1,
                            "isolation_level": READ_UNCOMMITTED,
                            "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()],
                        },
                    )
                except NetworkError:
                    self._forget(leader, (tp.topic for tp in tps))
                    retry.update({tp: pending[tp] for tp in tps})
                    continue
                for t in body["topics"]:
                    for p in t["partitions"]:
                        tp = TopicPartition(t["name"], p["partition_index"])
                        err = ErrorCode(p["error_code"])
                        if err == ErrorCode.NONE:
                            result[tp] = OffsetAndTimestamp(p["offset"], p["timestamp"])
                        elif err.retriable:
                            self._forget(None, [tp.topic])
                            retry[tp] = pending[tp]
                        else:
                            raise KafkaError(err, f"ListOffsets {tp}: {err.name}")
            if not retry:
                return result
            pending = retry
        raise AssertionError("unreachable")

    def earliest_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: o.offset for tp, o in self.list_offsets(dict.fromkeys(tps, EARLIEST_TIMESTAMP)).items()}

    def latest_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: o.offset for tp, o in self.list_offsets(dict.fromkeys(tps, LATEST_TIMESTAMP)).items()}

    # -- fetch -------------------------------------------------------------------------------------------

    def fetch(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 64 << 20,
        partition_max_bytes: int = 8 << 20,
    ) -> dict[TopicPartition, FetchedPartition]:
        """One Fetch per leader; partitions whose leader failed come back with a retriable error code."""
        out: dict[TopicPartition, FetchedPartition] = {}
        for leader, tps in self._by_leader(offsets).items():
            topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for tp in tps:
                topics[tp.topic].append(
                    {
                        "partition": tp.partition,
                        "fetch_offset": offsets[tp],
                        "partition_max_bytes": partition_max_bytes,
                    }
                )
            try:
                _, body = self.connection(leader).request(
                    ApiKey.FETCH,
                    {
                        "replica_id": -1,
                        "max_wait_ms": max_wait_ms,
                        "min_bytes": min_bytes,
                        "max_bytes": max_bytes,
                        "isolation_level": READ_UNCOMMITTED,
                        "session_id": 0,
                        "session_epoch": -1,
                        "topics": [{"topic": n, "partitions": ps} for n, ps in topics.items()],
                    },
                )
            except NetworkError:
                self._forget(leader, (tp.topic for tp in tps))
                for tp in tps:
                    out[tp] = FetchedPartition(ErrorCode.NETWORK_EXCEPTION, -1, -1, b"")
                continue
            if body.get("error_code", 0):
                raise KafkaError(ErrorCode(body["error_code"]), "Fetch failed")
            for t in body["responses"]:
                for p in t["partitions"]:
                    tp = TopicPartition(t["topic"], p["partition_index"])
                    err = ErrorCode(p["error_code"])
                    if err.retriable:
                        self._forget(None, [tp.topic])
                    recs = p["records"]
                    out[tp] = FetchedPartition(
                        err, p["high_watermark"], p["log_start_offset"], b"" if recs is None else bytes(recs)
                    )
        return out

    # -- produce -----------------------------------------------------------------------------------------

    def init_producer_id(self) -> tuple[int, int]:
        """A fresh idempotent producer id and epoch."""
        for _ in self._retrying("InitProducerId"):
            _, body = self._any_connection().request(
                ApiKey.INIT_PRODUCER_ID,
                {
                    "transactional_id": None,
                    "transaction_timeout_ms": 60000,
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
            )
            err = ErrorCode(body["error_code"])
            if err == ErrorCode.NONE:
                return int(body["producer_id"]), int(body["producer_epoch"])
            if not err.retriable:
                raise KafkaError(err, f"InitProducerId: {err.name}")
        raise AssertionError("unreachable")

    def produce(
        self,
        batches: Mapping[TopicPartition, bytes],
        *,
        acks: int = -1,
        timeout_ms: int = 30000,
        transactional_id: str | None = None,
    ) -> dict[TopicPartition, tuple[ErrorCode, int]]:
        """Send one record batch per partition; returns (error, base offset) per partition (no retries here:
        the producer decides, because only it knows whether a resend is safe)."""
        out: dict[TopicPartition, tuple[ErrorCode, int]] = {}
        for leader, tps in self._by_leader(batches).items():
            topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for tp in tps:
                topics[tp.topic].append({"index": tp.partition, "records": batches[tp]})
            try:
                _, body = self.connection(leader).request(
                    ApiKey.PRODUCE,
                    {
                        "transactional_id": transactional_id,
                        "acks": acks,
                        "timeout_ms": timeout_ms,
                        "topic_data": [{"name": n, "partition_data": ps} for n, ps in topics.items()],
                    },
                )
            except NetworkError:
                self._forget(leader, (tp.topic for tp in tps))
                for tp in tps:
                    out[tp] = (ErrorCode.NETWORK_EXCEPTION, -1)
                continue
            for t in body["responses"]:
                for p in t["partition_responses"]:
                    tp = TopicPartition(t["name"], p["index"])
                    err = ErrorCode(p["error_code"])
                    if err.retriable:
                        self._forget(None, [tp.topic])
                    out[tp] = (err, int(p["base_offset"]))
        return out

    # -- topics ------------------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        replication_factor: int = 1,
        configs: Mapping[str, str] | None = None,
    ) -> bool:
        """Create a topic; False if it already exists. Waits until its metadata shows leaders."""
        _, body = self._any_connection().request(
            ApiKey.CREATE_TOPICS,
            {
                "topics": [
                    {
                        "name": name,
                        "num_partitions": partitions,
                        "replication_factor": replication_factor,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                    }
                ],
                "timeout_ms": int(self.timeout_s * 1000),
                "validate_only": False,
            },
        )
        err = ErrorCode(body["topics"][0]["error_code"])
        if err not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise KafkaError(err, f"CreateTopics {name}: {body['topics'][0].get('error_message') or err.name}")
        for _ in self._retrying(f"waiting for topic {name}"):
            t = self.refresh_metadata([name]).topics.get(name)
            if (
                t is not None
                and t.error == ErrorCode.NONE
                and t.partitions
                and all(p.leader >= 0 for p in t.partitions.values())
            ):
                break
        return err == ErrorCode.NONE

    # -- group offsets -----------------------------------------------------------------------------------

    def coordinator(self, group_id: str, key_type: int = 0) -> BrokerConnection:
        """A connection to the coordinator of a group (``key_type`` 0) or of a transactional id (1)."""
        for _ in self._retrying(f"FindCoordinator {group_id}"):
            _, body = self._any_connection().request(ApiKey.FIND_COORDINATOR, {"key": group_id, "key_type": key_type})
            err = ErrorCode(body["error_code"])
            if err == ErrorCode.NONE:
                node = int(body["node_id"])
                if node not in self._metadata.brokers:
                    self._metadata.brokers[node] = BrokerAddress(node, body["host"], body["port"])
                return self.connection(node)
            if not err.retriable:
                raise KafkaError(err, f"FindCoordinator {group_id}: {err.name}")
        raise AssertionError("unreachable")

    def commit_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int], metadata: str = "") -> None:
        """Commit offsets for a group without joining it (generation -1, like Kafka's admin tools)."""
        topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp, off in offsets.items():
            topics[tp.topic].append(
                {"partition_index": tp.partition, "committed_offset": off, "committed_metadata": metadata}
            )
        request = {
            "group_id": group_id,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()],
        }
        for _ in self._retrying(f"OffsetCommit {group_id}"):
            _, body = self.coordinator(group_id).request(ApiKey.OFFSET_COMMIT, request)
            errors = {ErrorCode(p["error_code"]) for t in body["topics"] for p in t["partitions"]} - {ErrorCode.NONE}
            if not errors:
                return
            fatal = [e for e in errors if not e.retriable]
            if fatal:
                raise KafkaError(fatal[0], f"OffsetCommit {group_id}: {fatal[0].name}")

    def fetch_committed(
        self, group_id: str, tps: Iterable[TopicPartition], *, require_stable: bool = False
    ) -> dict[TopicPartition, int]:
        """Committed offsets of a group (-1 when none). ``require_stable``: offsets pending in an open
        transaction are asked for again (UNSTABLE_OFFSET_COMMIT) until that transaction ends."""
        topics: dict[str, list[int]] = defaultdict(list)
        for tp in tps:
            topics[tp.topic].append(tp.partition)
        request = {
            "group_id": group_id,
            "topics": [{"name": n, "partition_indexes": ps} for n, ps in topics.items()],
            "require_stable": require_stable,
        }
        for _ in self._retrying(f"OffsetFetch {group_id}"):
            _, body = self.coordinator(group_id).request(ApiKey.OFFSET_FETCH, request)
            errors = {ErrorCode(p["error_code"]) for t in body["topics"] for p in t["partitions"]}
            errors.add(ErrorCode(body.get("error_code", 0)))
            if errors & _COORDINATOR_RETRIES:
                continue
            return {
                TopicPartition(t["name"], p["partition_index"]): int(p["committed_offset"])
                for t in body["topics"]
                for p in t["partitions"]
            }
        raise AssertionError("unreachable")
