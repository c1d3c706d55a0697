"""A blocking transactional producer on ``KafkaClient``, and the transaction coordinator's requests on their own.

``TransactionalProducer`` is the idempotent producer with a ``transactional.id``: InitProducerId through the
id's coordinator (FindCoordinator key type 1) fences older instances and ends their open transaction;
``begin_transaction()``, ``send()``, ``send_offsets_to_transaction()`` then ``commit_transaction()`` or
``abort_transaction()``. Partitions join the transaction (AddPartitionsToTxn) before their first batch is
sent; offsets join through AddOffsetsToTxn and TxnOffsetCommit, as Kafka's producers do.

``prepare_commit()`` sends everything and returns a ``PreparedTransaction`` (transactional id, producer id and
epoch) without ending the transaction; ``end_transaction()`` commits or aborts it later from any process, as
Flink's two-phase-commit Kafka sink does. The Spark exactly-once writer relies on this: tasks prepare, the
driver commits.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rill.client.client import KafkaClient
from rill.client.connection import NetworkError
from rill.client.producer import IdempotentProducer
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey

TRANSACTION_KEY_TYPE = 1  # FindCoordinator key type of a transactional id

# Errors after which a coordinator request is sent again (to a coordinator looked up again).
_RETRY = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
    }
)


@dataclass(frozen=True, slots=True)
class PreparedTransaction:
    """What another process needs to end a transaction left open: its ids."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


def _first_error(errors: list[ErrorCode]) -> ErrorCode:
    """The error that decides: OPERATION_NOT_ATTEMPTED only says another partition of the request failed."""
    real = [e for e in errors if e not in (ErrorCode.NONE, ErrorCode.OPERATION_NOT_ATTEMPTED)]
    if real:
        return real[0]
    return ErrorCode.OPERATION_NOT_ATTEMPTED if ErrorCode.OPERATION_NOT_ATTEMPTED in errors else ErrorCode.NONE


def coordinator_request(
    client: KafkaClient,
    key: str,
    api_key: int,
    body: dict[str, Any],
    errors_of: Callable[[dict[str, Any]], list[ErrorCode]],
    *,
    key_type: int = TRANSACTION_KEY_TYPE,
) -> dict[str, Any]:
    """Send ``body`` to the coordinator of ``key`` until it answers without a retriable error (or the client's
    timeout passes); a fatal error raises ``KafkaError``."""
    what = f"{ApiKey(api_key).name} for {key!r}"
    last = ErrorCode.NONE
    for _ in client._retrying(what):
        try:
            _, response = client.coordinator(key, key_type).request(api_key, body)
        except NetworkError:  # the broken connection is closed; the next attempt opens a new one
            last = ErrorCode.NETWORK_EXCEPTION
            continue
        last = _first_error(errors_of(response))
        if last == ErrorCode.NONE:
            return response
        if last not in _RETRY:
            raise KafkaError(last, f"{what}: {last.name}")
    raise AssertionError(f"unreachable ({last.name})")


def init_transactional_id(client: KafkaClient, transactional_id: str, timeout_ms: int) -> tuple[int, int]:
    """InitProducerId for ``transactional_id``: (producer id, epoch), the epoch one above the last instance's,
    whose open transaction the coordinator aborts (or completes, when it was already committing)."""
    body = coordinator_request(
        client,
        transactional_id,
        ApiKey.INIT_PRODUCER_ID,
        {
            "transactional_id": transactional_id,
            "transaction_timeout_ms": timeout_ms,
            "producer_id": -1,
            "producer_epoch": -1,
        },
        lambda r: [ErrorCode(r["error_code"])],
    )
    return int(body["producer_id"]), int(body["producer_epoch"])


def end_transaction(client: KafkaClient, txn: PreparedTransaction, *, commit: bool) -> None:
    """EndTxn: commit or abort the open transaction of ``txn``'s producer. Committing a transaction that this
    producer already committed answers NONE again (the coordinator's rule for a retried EndTxn)."""
    coordinator_request(
        client,
        txn.transactional_id,
        ApiKey.END_TXN,
        {
            "transactional_id": txn.transactional_id,
            "producer_id": txn.producer_id,
            "producer_epoch": txn.producer_epoch,
            "committed": commit,
        },
        lambda r: [ErrorCode(r["error_code"])],
    )


class TransactionalProducer(IdempotentProducer):
    """An idempotent producer whose records are written in transactions; see the module docstring."""

    def __init__(
        self,
        client: KafkaClient,
        transactional_id: str,
        *,
        transaction_timeout_ms: int = 60000,
        compression: int = 0,
        batch_size: int = 1 << 20,
    ) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self._in_transaction = False
        self._txn_partitions: set[TopicPartition] = set()
        self._txn_groups: set[str] = set()
        super().__init__(client, compression=compression, batch_size=batch_size)

    def _init_producer_id(self) -> tuple[int, int]:
        assert self.transactional_id is not None
        return init_transactional_id(self.client, self.transactional_id, self.transaction_timeout_ms)

    @property
    def prepared(self) -> PreparedTransaction:
        assert self.transactional_id is not None
        return PreparedTransaction(self.transactional_id, self.producer_id, self.producer_epoch)

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction

    @property
    def transaction_started(self) -> bool:
        """Whether the coordinator knows of the current transaction (a partition or a group joined it)."""
        return bool(self._txn_partitions or self._txn_groups)

    def begin_transaction(self) -> None:
        if self._in_transaction:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, "a transaction is already open")
        self._in_transaction = True
        self._txn_partitions = set()
        self._txn_groups = set()

    def _require_transaction(self) -> None:
        if not self._in_transaction:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, "no open transaction: call begin_transaction() first")

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        self._require_transaction()
        super().send(topic, value, key, partition=partition, headers=headers, timestamp_ms=timestamp_ms)

    def _before_send(self, tps: list[TopicPartition]) -> None:
        self._require_transaction()
        new = [tp for tp in tps if tp not in self._txn_partitions]
        if not new:
            return
        topics: dict[str, list[int]] = defaultdict(list)
        for tp in new:
            topics[tp.topic].append(tp.partition)
        assert self.transactional_id is not None
        coordinator_request(
            self.client,
            self.transactional_id,
            ApiKey.ADD_PARTITIONS_TO_TXN,
            {
                "v3_and_below_transactional_id": self.transactional_id,
                "v3_and_below_producer_id": self.producer_id,
                "v3_and_below_producer_epoch": self.producer_epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            },
            lambda r: [
                ErrorCode(p["partition_error_code"])
                for t in r["results_by_topic_v3_and_below"]
                for p in t["results_by_partition"]
            ],
        )
        self._txn_partitions.update(new)

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group_id: str, *, metadata: str = ""
    ) -> None:
        """Commit ``offsets`` for ``group_id`` as part of the transaction (visible when it commits)."""
        self._require_transaction()
        assert self.transactional_id is not None
        if group_id not in self._txn_groups:
            coordinator_request(
                self.client,
                self.transactional_id,
                ApiKey.ADD_OFFSETS_TO_TXN,
                {
                    "transactional_id": self.transactional_id,
                    "producer_id": self.producer_id,
                    "producer_epoch": self.producer_epoch,
                    "group_id": group_id,
                },
                lambda r: [ErrorCode(r["error_code"])],
            )
            self._txn_groups.add(group_id)
        topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp, offset in offsets.items():
            topics[tp.topic].append(
                {"partition_index": tp.partition, "committed_offset": offset, "committed_metadata": metadata}
            )
        coordinator_request(
            self.client,
            group_id,
            ApiKey.TXN_OFFSET_COMMIT,
            {
                "transactional_id": self.transactional_id,
                "group_id": group_id,
                "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch,
                "generation_id": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            },
            lambda r: [ErrorCode(p["error_code"]) for t in r["topics"] for p in t["partitions"]],
            key_type=0,
        )

    def prepare_commit(self) -> PreparedTransaction:
        """Send every buffered record and leave the transaction open, to be ended by ``end_transaction``."""
        self._require_transaction()
        self.flush()
        self._in_transaction = False
        return self.prepared

    def commit_transaction(self) -> None:
        self._require_transaction()
        self.flush()
        if self.transaction_started:
            end_transaction(self.client, self.prepared, commit=True)
        self._in_transaction = False

    def abort_transaction(self) -> None:
        """Drop what is still buffered and abort what was sent."""
        self._require_transaction()
        self._buffers = {}
        if self.transaction_started:
            end_transaction(self.client, self.prepared, commit=False)
        self._in_transaction = False

    def close(self) -> None:
        """Leaves an open transaction to its coordinator's timeout (as Kafka's producers do on close)."""
        self._buffers = {}
