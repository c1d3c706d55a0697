"""Helpers shared by the storage tests: batch construction and a whole-log model."""

from __future__ import annotations

from pathlib import Path

from rill.log.log import Log
from rill.log.log_config import LogConfig
from rill.records.batch import iter_batches
from rill.records.builder import build_batch
from rill.records.record import Record, decode_records_in

BASE_TS = 1_700_000_000_000


def make_batch(
    n: int = 1,
    *,
    value_size: int = 10,
    ts: int = BASE_TS,
    ts_step: int = 1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    tag: int = 0,
    compression: int = 0,
) -> bytes:
    records = [
        Record(0, ts + i * ts_step, f"k{tag}-{i}".encode(), bytes([(tag + i) % 256]) * value_size)
        for i in range(n)
    ]
    return build_batch(
        records,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        compression=compression,
    )


def small_config(**kw: int | str) -> LogConfig:
    base = {
        "segment_bytes": 4096,
        "index_interval_bytes": 256,
        "segment_index_bytes": 4096,
        "file_delete_delay_ms": 0,
    }
    base.update(kw)
    return LogConfig(**base)  # type: ignore[arg-type]


def open_log(path: Path, config: LogConfig | None = None, **kw: object) -> Log:
    return Log(path, config or small_config(), **kw)  # type: ignore[arg-type]


def all_records(log: Log) -> list[Record]:
    """Every record from the log start, read through the public read path."""
    out: list[Record] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read_bytes(offset, 1 << 20)
        if not data:
            break
        out += [r for r in decode_records_in(data) if r.offset >= offset]
        headers = [h for _, h in iter_batches(data)]
        offset = headers[-1].next_offset
    return out
