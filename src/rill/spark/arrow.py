"""The source's schema (Spark's Kafka source schema), and fetched records turned into Arrow batches.

Spark checks that every Arrow batch a Python reader yields has exactly the declared schema, so the Arrow
types here mirror the Spark DDL: ``int`` is int32, ``long`` int64, ``timestamp`` ``timestamp[us, tz=UTC]``,
and every field is nullable.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from rill.records.columnar import RecordColumns, decode_columns

SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key:string,value:binary>>"

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
HEADER_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))

_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
]


def schema_ddl(include_headers: bool) -> str:
    return f"{SCHEMA_DDL}, {HEADERS_DDL}" if include_headers else SCHEMA_DDL


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


_evens = pa.py_buffer(array("i"))


def _even_numbers(n: int) -> pa.Buffer:
    """A buffer holding at least the int32s 0, 2, 4, ... 2n-2 (grown on demand, shared between calls)."""
    global _evens
    if _evens.size < 4 * n:
        _evens = pa.py_buffer(array("i", range(0, 2 * max(n, 1 << 16), 2)))
    return _evens


def _binary_column(data: pa.Buffer, bounds: array[int], nulls: list[int], n: int) -> pa.Array:
    """Cut ``n`` binary values out of ``data`` in one vectorised step.

    ``bounds`` holds (start, end) per row, ascending. Read as Arrow offsets they describe ``2n - 1`` slots
    that alternate value, gap, value, ...: taking every other slot yields the values, copied once into a
    compact binary array."""
    if n == 0:
        return pa.array([], pa.binary())
    if bounds.typecode == "i":  # int32 offsets: Arrow's take on binary is far faster than on large_binary
        wide = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(bounds), data])
    else:
        wide = pa.Array.from_buffers(pa.large_binary(), 2 * n - 1, [None, pa.py_buffer(bounds), data])
    compact = wide.take(pa.Array.from_buffers(pa.int32(), n, [None, _even_numbers(n)])).cast(pa.binary())
    if not nulls:
        return compact
    # Null rows were cut as empty values; mark them null by giving the result a validity bitmap.
    bitmap = bytearray(b"\xff" * ((n + 7) // 8))
    for row in nulls:
        bitmap[row >> 3] &= ~(1 << (row & 7)) & 0xFF
    _, offsets, values = compact.buffers()
    return pa.Array.from_buffers(pa.binary(), n, [pa.py_buffer(bitmap), offsets, values], null_count=len(nulls))


def columns_to_arrow(cols: RecordColumns, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch with the source's schema from decoded columns (headers when the schema has them)."""
    n = len(cols)
    data = pa.py_buffer(cols.data)
    arrays: list[pa.Array] = [
        _binary_column(data, cols.key_bounds, cols.key_nulls, n),
        _binary_column(data, cols.value_bounds, cols.value_nulls, n),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(cols.offsets)]),
        pc.multiply(pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(cols.timestamps)]), 1000).cast(
            TIMESTAMP_TYPE
        ),
        pa.Array.from_buffers(pa.int8(), n, [None, pa.py_buffer(cols.timestamp_types)]).cast(pa.int32()),
    ]
    if len(schema) > len(arrays):
        headers = cols.headers or []
        arrays.append(pa.array([[{"key": k, "value": v} for k, v in hs] for hs in headers], HEADER_TYPE))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class ArrowBatcher:
    """Turns the records of one topic-partition's fetches into ``pa.RecordBatch``es of at most
    ``rows_per_batch`` rows, decoding each fetch column-wise (``rill.records.columnar``)."""

    def __init__(self, topic: str, partition: int, *, include_headers: bool, rows_per_batch: int = 32768) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.rows_per_batch = rows_per_batch
        self.schema = arrow_schema(include_headers)
        self._batches: list[pa.RecordBatch] = []
        self._rows = 0

    def __len__(self) -> int:
        return self._rows

    def add_fetched(self, records: bytes | memoryview, start: int, until: int) -> int:
        """Decode every complete batch in ``records`` (a Fetch response's records) and keep the records with
        ``start <= offset < until``. Returns the offset after the last complete batch (``start`` when there
        was none): the next fetch position."""
        cols = decode_columns(records, start, until, include_headers=self.include_headers)
        if len(cols):
            self._batches.append(columns_to_arrow(cols, self.topic, self.partition, self.schema))
            self._rows += len(cols)
        return cols.next_offset

    def full(self) -> bool:
        return self._rows >= self.rows_per_batch

    def drain(self) -> Iterator[pa.RecordBatch]:
        """Emit what is buffered (in batches of at most ``rows_per_batch`` rows) and clear."""
        batches, self._batches, self._rows = self._batches, [], 0
        step = self.rows_per_batch
        for batch in batches:
            for i in range(0, batch.num_rows, step):
                yield batch.slice(i, step)
