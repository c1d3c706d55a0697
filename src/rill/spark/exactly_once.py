"""The exactly-once write path of streaming queries (``exactlyOnce=true``): a two-phase commit over Kafka
transactions, in the manner of Flink's Kafka sink.

In a task (executor), for micro-batch ``B`` and Spark partition ``P``:

1. transactional id ``{prefix}-{P}``; InitProducerId with it bumps the id's epoch, which fences any earlier
   writer of that id (a failed attempt, a task of a killed driver) and ends its open transaction: aborted, or
   completed when the coordinator was already committing it;
2. the batch record: group ``{prefix}-{P}`` holds, as the committed offset of partition 0 of the first row's
   topic, the last batch id whose transaction for ``P`` committed. When it is ``B`` or more, this batch's rows
   for ``P`` are already in the topic (a driver died between committing transactions and recording the batch
   in its checkpoint): the task writes nothing;
3. otherwise the rows are written in a transaction, the batch record ``B`` joins it (AddOffsetsToTxn and
   TxnOffsetCommit), everything is sent and acknowledged, and the transaction is left open: the task returns
   its transactional id, producer id and epoch to the driver.

In the driver, ``commit(messages, B)`` ends each task's transaction with EndTxn(commit); the rows and the batch
record become visible together. ``abort`` ends them with EndTxn(abort), and fences the ids of tasks that
returned nothing. A micro-batch replayed with the same id (the driver died before its commit log entry) reads
the same source offsets, so task ``P`` gets the same rows: step 1 aborts what the earlier run left prepared,
step 2 skips what it committed. A reader with ``isolation.level=read_committed`` sees every row once.

Assumptions, as in Flink: a micro-batch's partitioning is deterministic (Spark's planning of the same offsets
gives the same partitions; the ``rill`` source does); ``kafka.transaction.timeout.ms`` (default 60000, at most
the broker's ``transaction.max.timeout.ms``) exceeds the time from a task's write to the driver's commit, or
the coordinator aborts the transaction and the commit fails the batch (which is then replayed); speculative
execution stays off.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from rill.client.transactional import (
    PreparedTransaction,
    TransactionalProducer,
    end_transaction,
    init_transactional_id,
)
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.spark.options import OptionError, SourceOptions

log = logging.getLogger(__name__)

BATCH_ID_PROPERTY = "streaming.sql.batchId"  # the local property Spark's micro-batch engine sets for its tasks


@dataclass(frozen=True)
class TransactionCommit(WriterCommitMessage):
    """What a task hands the driver: its prepared transaction (None when there was nothing to write, or the
    batch was already committed for this task), and counts."""

    transaction: PreparedTransaction | None
    records: int
    batches: int
    already_committed: bool = False


def check_exactly_once(opts: SourceOptions, *, streaming: bool) -> str:
    """The transactional id prefix, or why exactly-once cannot be used."""
    if not streaming:
        raise OptionError(
            "option exactlyOnce applies to streaming writes (writeStream); a batch write is at-least-once"
        )
    if opts.transactional_id_prefix is None:
        raise OptionError("option exactlyOnce needs transactionalIdPrefix (or a checkpointLocation option)")
    return opts.transactional_id_prefix


def task_identity() -> tuple[int, int]:
    """(Spark partition id, micro-batch id) of the running task."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        raise RuntimeError("the exactly-once writer runs in Spark tasks only")
    batch = tc.getLocalProperty(BATCH_ID_PROPERTY)
    if batch is None:
        raise RuntimeError("no micro-batch id in the task: exactlyOnce works with writeStream only")
    return tc.partitionId(), int(batch)


def transactional_id(prefix: str, partition: int) -> str:
    return f"{prefix}-{partition}"


Row = tuple[str, Any, Any, Any, Any]  # topic, value, key, partition, headers


def rows(opts: SourceOptions, batches: Iterator[pa.RecordBatch]) -> Iterator[Row]:
    """The rows of Arrow batches to write, with their topic (the ``topic`` option wins over the column)."""
    for batch in batches:
        cols = {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
        n = batch.num_rows
        values = cols["value"]
        keys = cols.get("key") or [None] * n
        topics = [opts.topic] * n if opts.topic is not None else cols["topic"]
        parts = cols.get("partition") or [None] * n
        headers = cols.get("headers") or [None] * n
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise OptionError("a row has a null topic and no 'topic' option is set")
            yield topic, values[i], keys[i], parts[i], headers[i]


def write_transaction(opts: SourceOptions, batches: Iterator[pa.RecordBatch]) -> TransactionCommit:
    """A task's side: write its rows of this micro-batch in a transaction left open for the driver."""
    from rill.spark.writer import as_bytes

    prefix = check_exactly_once(opts, streaming=True)
    partition, batch_id = task_identity()
    txn_id = transactional_id(prefix, partition)
    pending = rows(opts, batches)
    first = next(pending, None)
    if first is None:
        return TransactionCommit(None, 0, 0)
    with opts.client("rill-spark-writer") as client:
        producer = TransactionalProducer(
            client, txn_id, transaction_timeout_ms=opts.transaction_timeout_ms, compression=opts.compression
        )
        record_tp = TopicPartition(first[0], 0)
        last = client.fetch_committed(txn_id, [record_tp], require_stable=True).get(record_tp, -1)
        if last >= batch_id:
            log.info("batch %d of %s already committed (record %d): not written again", batch_id, txn_id, last)
            return TransactionCommit(None, 0, 0, already_committed=True)
        producer.begin_transaction()
        for topic, value, key, part, hs in itertools.chain([first], pending):
            producer.send(
                topic,
                as_bytes(value),
                as_bytes(key),
                partition=part,
                headers=[(h["key"], as_bytes(h["value"])) for h in hs] if hs else None,
            )
        producer.send_offsets_to_transaction(
            {record_tp: batch_id}, txn_id, metadata=f"rill spark exactly-once: batch {batch_id}"
        )
        prepared = producer.prepare_commit()
        return TransactionCommit(prepared, producer.records_sent, producer.batches_sent)


def _prepared(messages: list[WriterCommitMessage | None]) -> list[PreparedTransaction]:
    return [m.transaction for m in messages if isinstance(m, TransactionCommit) and m.transaction is not None]


def commit_transactions(opts: SourceOptions, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
    """The driver's side: commit every task's transaction. Committing one again (a commit replayed after a
    failure) answers success; a transaction the coordinator aborted meanwhile fails the batch, which Spark
    then replays."""
    with opts.client("rill-spark-writer") as client:
        for txn in _prepared(messages):
            try:
                end_transaction(client, txn, commit=True)
            except KafkaError as e:
                raise KafkaError(
                    e.code,
                    f"micro-batch {batch_id}: cannot commit the transaction of {txn.transactional_id}: {e} "
                    "(aborted by its timeout? raise kafka.transaction.timeout.ms)",
                ) from e


def abort_transactions(opts: SourceOptions, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
    """Abort the prepared transactions; fence the ids of the tasks that failed (their transactions, if any,
    are aborted by the coordinator when the epoch is bumped)."""
    prefix = check_exactly_once(opts, streaming=True)
    with opts.client("rill-spark-writer") as client:
        for txn in _prepared(messages):
            try:
                end_transaction(client, txn, commit=False)
            except KafkaError as e:  # already fenced or timed out: aborted either way
                if e.code not in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
                    log.warning("micro-batch %d: abort of %s failed: %s", batch_id, txn.transactional_id, e)
        for partition, m in enumerate(messages):
            if m is None:
                try:
                    init_transactional_id(client, transactional_id(prefix, partition), opts.transaction_timeout_ms)
                except KafkaError as e:
                    log.warning("micro-batch %d: cannot fence %s: %s", batch_id, transactional_id(prefix, partition), e)
