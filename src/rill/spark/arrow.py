"""The source's schema (Spark's Kafka source schema), and record batches turned into Arrow batches.

Spark checks that every Arrow batch a Python reader yields has exactly the declared schema, so the Arrow
types here mirror the Spark DDL: ``int`` is int32, ``long`` int64, ``timestamp`` ``timestamp[us, tz=UTC]``,
and every field is nullable.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from rill.records.record import CONTROL_MASK, HEADER, decode_batch_records, iter_batch_views

SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key:string,value:binary>>"

HEADER_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))

_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]


def schema_ddl(include_headers: bool) -> str:
    return f"{SCHEMA_DDL}, {HEADERS_DDL}" if include_headers else SCHEMA_DDL


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


class ArrowBatcher:
    """Accumulates decoded records of one topic-partition into column lists and emits ``pa.RecordBatch``es
    of about ``rows_per_batch`` rows."""

    def __init__(self, topic: str, partition: int, *, include_headers: bool, rows_per_batch: int = 32768) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.rows_per_batch = rows_per_batch
        self.schema = arrow_schema(include_headers)
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.ts_types: list[int] = []
        self.headers: list[list[dict[str, Any]]] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add_fetched(self, records: bytes | memoryview, start: int, until: int) -> int:
        """Decode every complete batch in ``records`` (a Fetch response's records) and keep the records with
        ``start <= offset < until``. Returns the offset after the last complete batch (``start`` when there
        was none): the next fetch position."""
        next_offset = start
        keys, values, offsets, stamps, types = (
            self.keys,
            self.values,
            self.offsets,
            self.timestamps,
            self.ts_types,
        )
        for view in iter_batch_views(records):
            base, _len, _ple, _magic, _crc, attrs, lod, _bts, _mts, _pid, _pe, _seq, _cnt = HEADER.unpack_from(view, 0)
            last = base + lod
            if last < start:
                continue
            next_offset = max(next_offset, last + 1)
            if attrs & CONTROL_MASK:
                continue
            ts_type = (attrs >> 3) & 1
            for r in decode_batch_records(view, verify_crc=False):
                off = r.offset
                if off < start or off >= until:
                    continue
                keys.append(r.key)
                values.append(r.value)
                offsets.append(off)
                stamps.append(r.timestamp * 1000)
                types.append(ts_type)
                if self.include_headers:
                    self.headers.append([{"key": k, "value": v} for k, v in r.headers])
            if next_offset >= until:
                break
        return next_offset

    def full(self) -> bool:
        return len(self.offsets) >= self.rows_per_batch

    def drain(self) -> Iterator[pa.RecordBatch]:
        """Emit what is buffered (in batches of at most ``rows_per_batch`` rows) and clear."""
        n = len(self.offsets)
        if n == 0:
            return
        cols: list[pa.Array] = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([self.topic] * n, pa.string()),
            pa.array([self.partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            pa.array(self.ts_types, pa.int32()),
        ]
        if self.include_headers:
            cols.append(pa.array(self.headers, HEADER_TYPE))
        batch = pa.RecordBatch.from_arrays(cols, schema=self.schema)
        self._reset()
        step = self.rows_per_batch
        for i in range(0, n, step):
            yield batch.slice(i, step)
