"""Sending a transaction's commit or abort markers to the leaders of its partitions (Kafka's
TransactionMarkerChannelManager).

Each partition's marker goes to the partition's current leader: appended here (``ReplicaManager.append_txn_marker``)
when this broker leads it, otherwise in a WriteTxnMarkers request over the broker-to-broker channel (one request
per leader for all of that leader's partitions of the transaction). A partition whose leader is unknown, has
moved (NOT_LEADER_OR_FOLLOWER) or cannot take the marker yet is retried after a backoff with the leader looked
up again; a partition whose topic was deleted is dropped. ``send`` returns once every marker is acknowledged
(the coordinator then writes the transaction's completion), or False when sending stopped: the coordinator was
fenced (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED) or no longer coordinates the id.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from rill.cluster.network_client import NetworkClient
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.metadata.store import MetadataStore
from rill.protocol import ApiKey
from rill.replica.replica_manager import ReplicaManager
from rill.security.inter_broker import client_config

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.1
MARKER_REQUEST_TIMEOUT_MS = 30000

_RETRIABLE = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.UNKNOWN_SERVER_ERROR,
})  # fmt: skip
_FENCED = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})
_SKIPPED = frozenset({ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.UNKNOWN_PRODUCER_ID,
                      ErrorCode.INVALID_PRODUCER_ID_MAPPING})  # fmt: skip


class TransactionMarkerChannelManager:
    def __init__(
        self, node_id: int, metadata: MetadataStore, replica_manager: ReplicaManager, config: object = None
    ) -> None:
        self.node_id = node_id
        self._config = config  # the broker's: the inter-broker listener's TLS and SASL settings
        self.metadata = metadata
        self.replica_manager = replica_manager
        self._client: NetworkClient | None = None
        self.markers_sent = 0  # acknowledged markers, local and remote
        self.in_flight = 0  # transactions whose markers are being sent

    @property
    def client(self) -> NetworkClient:
        """The channel to the other brokers (made on first use), with their current addresses."""
        if self._client is None:
            self._client = NetworkClient(client_config(f"broker-{self.node_id}-txn-coordinator", self._config))
        for b in self.metadata.brokers():
            if b.node_id != self.node_id:
                self._client.set_node(b.node_id, b.host, b.port)
        return self._client

    def _leader(self, tp: TopicPartition) -> int | None:
        """The leader of ``tp`` (-1 when it has none now), or None when the partition no longer exists."""
        topic = self.metadata.topic(tp.topic)
        if topic is None or tp.partition >= len(topic.partitions):
            return None
        return topic.partitions[tp.partition].leader

    async def send(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: set[TopicPartition],
        still_valid: Callable[[], bool],
    ) -> bool:
        pending = set(partitions)
        attempts = 0
        self.in_flight += 1
        try:
            while pending:
                if not still_valid():
                    log.info("%s: markers not sent further: the coordinator moved", transactional_id)
                    return False
                by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
                for tp in list(pending):
                    leader = self._leader(tp)
                    if leader is None:
                        log.info("%s: %s no longer exists; its marker is dropped", transactional_id, tp)
                        pending.discard(tp)
                    elif leader >= 0:
                        by_leader[leader].append(tp)
                results = await asyncio.gather(*(
                    self._send_to(leader, tps, producer_id, producer_epoch, coordinator_epoch, commit)
                    for leader, tps in by_leader.items()
                ))  # fmt: skip
                for codes in results:
                    for tp, code in codes.items():
                        if code == ErrorCode.NO_ERROR or code in _SKIPPED:
                            pending.discard(tp)
                            self.markers_sent += code == ErrorCode.NO_ERROR
                        elif code in _FENCED:
                            log.warning("%s: the marker for %s was refused (%s): this coordinator is fenced",
                                        transactional_id, tp, code.name)  # fmt: skip
                            return False
                        elif code not in _RETRIABLE:
                            log.error("%s: the marker for %s failed: %s; retrying", transactional_id, tp, code.name)
                if pending:
                    attempts += 1
                    if attempts % 50 == 1:
                        waiting = sorted(map(str, pending))
                        log.info("%s: markers for %s not written yet; retrying", transactional_id, waiting)
                    await asyncio.sleep(RETRY_BACKOFF_S)
            return True
        finally:
            self.in_flight -= 1

    async def _send_to(
        self,
        leader: int,
        tps: list[TopicPartition],
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> dict[TopicPartition, ErrorCode]:
        if leader == self.node_id:
            codes = await asyncio.gather(*(
                self._append_local(tp, producer_id, producer_epoch, coordinator_epoch, commit) for tp in tps
            ))  # fmt: skip
            return dict(zip(tps, codes, strict=True))
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append(tp.partition)
        body = {
            "markers": [
                {
                    "producer_id": producer_id,
                    "producer_epoch": producer_epoch,
                    "transaction_result": commit,
                    "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
                    "coordinator_epoch": coordinator_epoch,
                }
            ]
        }
        try:
            response = await self.client.request(
                leader, ApiKey.WRITE_TXN_MARKERS, body, timeout_ms=MARKER_REQUEST_TIMEOUT_MS
            )
        except KafkaError as e:
            log.debug("WriteTxnMarkers to broker %d failed: %s", leader, e)
            return dict.fromkeys(tps, ErrorCode.NETWORK_EXCEPTION)
        except OSError as e:
            log.debug("WriteTxnMarkers to broker %d failed: %s", leader, e)
            return dict.fromkeys(tps, ErrorCode.NETWORK_EXCEPTION)
        out = dict.fromkeys(tps, ErrorCode.UNKNOWN_SERVER_ERROR)
        markers: list[Any] = response.body.get("markers", []) if response is not None else []
        for marker in markers:
            for topic in marker.get("topics", []):
                for p in topic.get("partitions", []):
                    tp = TopicPartition(topic["name"], p["partition_index"])
                    if tp in out:
                        out[tp] = ErrorCode(p["error_code"])
        return out

    async def _append_local(
        self, tp: TopicPartition, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool
    ) -> ErrorCode:
        try:
            code = await self.replica_manager.append_txn_marker(
                tp, producer_id, producer_epoch, coordinator_epoch, commit
            )
            return ErrorCode(code)
        except KafkaError as e:
            return e.code

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()
