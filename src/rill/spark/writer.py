"""Writing DataFrames into topics (batch and streaming), like Spark's Kafka sink.

Columns: ``value`` (required, string or binary), ``key`` (optional, string or binary), ``topic`` (string,
required unless the ``topic`` option is set; the option wins), ``partition`` (optional int; otherwise Kafka's
default partitioner), ``headers`` (optional ``array<struct<key:string,value:binary>>``). Other types are
refused before anything is written, as Spark's Kafka sink refuses them; so is the save mode overwrite.
Each task writes through its own idempotent producer, so resends after lost responses are not duplicated;
a task retried by Spark writes its rows again (at-least-once, like Spark's Kafka sink). A streaming write with
``exactlyOnce=true`` writes each micro-batch in transactions committed by the driver (``exactly_once``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from rill.client.producer import IdempotentProducer
from rill.spark.exactly_once import (
    abort_transactions,
    check_exactly_once,
    commit_transactions,
    rows,
    write_transaction,
)
from rill.spark.options import OptionError, SourceOptions

# The type each column must have, as Spark's Kafka sink checks it (nullability aside).
COLUMN_TYPES = {
    "key": ("string", "binary"),
    "value": ("string", "binary"),
    "topic": ("string",),
    "partition": ("int",),
    "headers": ("array<struct<key:string,value:binary>>",),
}
ALLOWED_COLUMNS = frozenset(COLUMN_TYPES)


@dataclass(frozen=True)
class WriteCommit(WriterCommitMessage):
    records: int
    batches: int


def check_schema(schema: StructType, opts: SourceOptions) -> None:
    names = set(schema.fieldNames())
    if "value" not in names:
        raise OptionError("the DataFrame written to rill needs a 'value' column")
    if opts.topic is None and "topic" not in names:
        raise OptionError("set the 'topic' option or give the DataFrame a 'topic' column")
    unknown = names - ALLOWED_COLUMNS
    if unknown:
        raise OptionError(f"columns {sorted(unknown)} cannot be written; allowed: {sorted(ALLOWED_COLUMNS)}")
    for field in schema.fields:
        allowed = COLUMN_TYPES[field.name]
        got = field.dataType.simpleString()
        if got not in allowed:
            raise OptionError(f"column {field.name} has type {got}; {field.name} must be {' or '.join(allowed)}")


def check_save_mode(overwrite: bool) -> None:
    """Records cannot be taken back from a topic: like Spark's Kafka sink, refuse to overwrite."""
    if overwrite:
        raise OptionError(
            "save mode overwrite is not supported by rill (records written to a topic stay there); "
            "use mode('append')"
        )


def as_bytes(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    raise TypeError(f"cannot write a {type(v).__name__} as a record's bytes")


def write_batches(opts: SourceOptions, batches: Iterator[pa.RecordBatch]) -> WriteCommit:
    """Produce every row of ``batches``; returns what was written once all of it is acknowledged."""
    with opts.client("rill-spark-writer") as client:
        producer = IdempotentProducer(client, compression=opts.compression)
        for topic, value, key, partition, hs in rows(opts, batches):
            producer.send(
                topic,
                as_bytes(value),
                as_bytes(key),
                partition=partition,
                headers=[(h["key"], as_bytes(h["value"])) for h in hs] if hs else None,
            )
        producer.flush()
        return WriteCommit(producer.records_sent, producer.batches_sent)


class RillWriter(DataSourceArrowWriter):
    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        check_schema(schema, opts)
        if opts.exactly_once:
            check_exactly_once(opts, streaming=False)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteCommit:
        return write_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Records are visible as soon as they are acknowledged; nothing to publish."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Acknowledged records stay (at-least-once); nothing is staged."""


class RillStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        check_schema(schema, opts)
        if opts.exactly_once:
            check_exactly_once(opts, streaming=True)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self.opts.exactly_once:
            return write_transaction(self.opts, iterator)
        return write_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """At-least-once: nothing to publish (a replayed batch id rewrites its rows). Exactly-once: commit the
        tasks' transactions."""
        if self.opts.exactly_once:
            commit_transactions(self.opts, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """At-least-once: nothing staged. Exactly-once: abort the tasks' transactions."""
        if self.opts.exactly_once:
            abort_transactions(self.opts, messages, batchId)
