"""What ``rill transactions`` asks the brokers, on Rill's own client (confluent-kafka's AdminClient has no
transaction APIs): ListTransactions (every broker), DescribeTransactions (the id's coordinator),
DescribeProducers (a partition's leader, or a named broker), WriteTxnMarkers (abort, to the leader), and
Kafka's search for hanging transactions."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from rill.cli._common import CliError
from rill.client.client import KafkaClient
from rill.client.transactional import TRANSACTION_KEY_TYPE
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey

ACTIVE_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    coordinator: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int
    partitions: list[TopicPartition] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_sequence: int
    last_timestamp: int
    current_txn_start_offset: int


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    tp: TopicPartition
    producer: ProducerState


def _check(code: int, what: str) -> None:
    err = ErrorCode(code)
    if err != ErrorCode.NONE:
        raise CliError(f"cannot {what}: {err.name}")


def broker_ids(client: KafkaClient) -> list[int]:
    return sorted(client.refresh_metadata(None).brokers)


def list_transactions(
    client: KafkaClient,
    *,
    states: Iterable[str] = (),
    producer_ids: Iterable[int] = (),
    duration_ms: int = -1,
) -> list[ListedTransaction]:
    """ListTransactions on every broker: the transactions each one coordinates."""
    out: list[ListedTransaction] = []
    request = {"state_filters": list(states), "producer_id_filters": list(producer_ids), "duration_filter": duration_ms}
    for node in broker_ids(client):
        _, body = client.connection(node).request(ApiKey.LIST_TRANSACTIONS, request)
        _check(body["error_code"], f"list the transactions of broker {node}")
        for t in body["transaction_states"]:
            out.append(ListedTransaction(t["transactional_id"], node, int(t["producer_id"]), t["transaction_state"]))
    return sorted(out, key=lambda t: t.transactional_id)


def coordinator_of(client: KafkaClient, transactional_id: str) -> int:
    """The broker id coordinating ``transactional_id`` (FindCoordinator key type 1)."""
    for _ in client._retrying(f"FindCoordinator {transactional_id}"):
        _, body = client._any_connection().request(
            ApiKey.FIND_COORDINATOR, {"key": transactional_id, "key_type": TRANSACTION_KEY_TYPE}
        )
        err = ErrorCode(body["error_code"])
        if err == ErrorCode.NONE:
            return int(body["node_id"])
        if not err.retriable:
            raise CliError(f"cannot find the coordinator of {transactional_id}: {err.name}")
    raise AssertionError("unreachable")


def describe_transactions(client: KafkaClient, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
    out: list[TransactionDescription] = []
    by_coordinator: dict[int, list[str]] = defaultdict(list)
    for tid in transactional_ids:
        by_coordinator[coordinator_of(client, tid)].append(tid)
    for node, ids in by_coordinator.items():
        _, body = client.connection(node).request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": ids})
        for t in body["transaction_states"]:
            _check(t["error_code"], f"describe transaction {t['transactional_id']}")
            out.append(
                TransactionDescription(
                    coordinator=node,
                    transactional_id=t["transactional_id"],
                    producer_id=int(t["producer_id"]),
                    producer_epoch=int(t["producer_epoch"]),
                    state=t["transaction_state"],
                    timeout_ms=int(t["transaction_timeout_ms"]),
                    start_time_ms=int(t["transaction_start_time_ms"]),
                    partitions=sorted(
                        (TopicPartition(tp["topic"], p) for tp in t["topics"] for p in tp["partitions"]),
                        key=lambda x: (x.topic, x.partition),
                    ),
                )
            )
    return out


def describe_producers(
    client: KafkaClient, tps: Iterable[TopicPartition], broker_id: int | None = None
) -> dict[TopicPartition, list[ProducerState]]:
    """DescribeProducers on each partition's leader (or on ``broker_id``, which may be a follower)."""
    wanted = list(tps)
    groups: dict[int, list[TopicPartition]] = defaultdict(list)
    for tp in wanted:
        groups[broker_id if broker_id is not None else client.leader_for(tp)].append(tp)
    out: dict[TopicPartition, list[ProducerState]] = {}
    for node, group in groups.items():
        topics: dict[str, list[int]] = defaultdict(list)
        for tp in group:
            topics[tp.topic].append(tp.partition)
        _, body = client.connection(node).request(
            ApiKey.DESCRIBE_PRODUCERS,
            {"topics": [{"name": n, "partition_indexes": ps} for n, ps in topics.items()]},
        )
        for t in body["topics"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p["partition_index"])
                err = ErrorCode(p["error_code"])
                if err != ErrorCode.NONE:
                    why = p.get("error_message") or err.name
                    raise CliError(f"cannot describe the producers of {tp.topic}-{tp.partition}: {why}")
                out[tp] = [
                    ProducerState(
                        int(s["producer_id"]),
                        int(s["producer_epoch"]),
                        int(s["coordinator_epoch"]),
                        int(s["last_sequence"]),
                        int(s["last_timestamp"]),
                        int(s["current_txn_start_offset"]),
                    )
                    for s in p["active_producers"]
                ]
    return out


def abort_transaction(
    client: KafkaClient, tp: TopicPartition, producer_id: int, producer_epoch: int, coordinator_epoch: int
) -> None:
    """WriteTxnMarkers(abort) for one producer on one partition, sent to the partition's leader."""
    leader = client.leader_for(tp)
    _, body = client.connection(leader).request(
        ApiKey.WRITE_TXN_MARKERS,
        {
            "markers": [
                {
                    "producer_id": producer_id,
                    "producer_epoch": producer_epoch,
                    "transaction_result": False,
                    "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}],
                    "coordinator_epoch": coordinator_epoch,
                }
            ]
        },
    )
    for marker in body["markers"]:
        for t in marker["topics"]:
            for p in t["partitions"]:
                _check(p["error_code"], f"abort the transaction of producer {producer_id} on {tp.topic}-{tp.partition}")


def partitions_led_by(client: KafkaClient, broker_id: int) -> list[TopicPartition]:
    md = client.refresh_metadata(None)
    if broker_id not in md.brokers:
        raise CliError(f"broker {broker_id} is not in the cluster (brokers: {sorted(md.brokers)})")
    return sorted(
        (
            TopicPartition(t.name, p.partition)
            for t in md.topics.values()
            for p in t.partitions.values()
            if p.leader == broker_id
        ),
        key=lambda tp: (tp.topic, tp.partition),
    )


def find_hanging(
    client: KafkaClient, tps: list[TopicPartition], max_timeout_ms: int, broker_id: int | None = None
) -> list[OpenTransaction]:
    """Kafka's rule: a transaction open on a partition for longer than the maximum transaction timeout whose
    producer has no coordinator-side transaction in progress that includes that partition."""
    now = int(time.time() * 1000)
    candidates = [
        OpenTransaction(tp, s)
        for tp, states in describe_producers(client, tps, broker_id).items()
        for s in states
        if s.current_txn_start_offset >= 0 and now - s.last_timestamp >= max_timeout_ms
    ]
    if not candidates:
        return []
    listed = list_transactions(client, producer_ids={c.producer.producer_id for c in candidates})
    ids_by_producer: dict[int, list[str]] = defaultdict(list)
    for t in listed:
        ids_by_producer[t.producer_id].append(t.transactional_id)
    descriptions: dict[str, TransactionDescription] = {}
    wanted = sorted({tid for ids in ids_by_producer.values() for tid in ids})
    if wanted:
        try:
            descriptions = {d.transactional_id: d for d in describe_transactions(client, wanted)}
        except (CliError, KafkaError):
            descriptions = {}
    hanging: list[OpenTransaction] = []
    for c in candidates:
        live = [
            d
            for tid in ids_by_producer.get(c.producer.producer_id, [])
            if (d := descriptions.get(tid)) is not None
            and d.producer_id == c.producer.producer_id
            and d.state in ACTIVE_STATES
            and c.tp in d.partitions
        ]
        if not live:
            hanging.append(c)
    return hanging
