"""Writing records into the log of an internal topic, which clients may not produce to: as its coordinator does
(through the replica manager of a running thread-mode broker, on its loop), or straight into the files of a
stopped broker (bytes no coordinator would write included: keyless records, any key and value)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import rill.testing
from rill.common import TopicPartition
from rill.log.log import Log
from rill.log.log_config import LogConfig
from rill.records.builder import build_batch
from rill.records.record import Record

KeyValue = tuple[bytes | None, bytes | None]


def _batches(records: Sequence[KeyValue], per_batch: int) -> list[bytes]:
    now = int(time.time() * 1000)
    return [
        build_batch([Record(j, now, k, v) for j, (k, v) in enumerate(records[i : i + per_batch])])
        for i in range(0, len(records), per_batch)
    ]


def append_as_coordinator(
    b: rill.testing.TestBroker, tp: TopicPartition, records: Sequence[KeyValue], per_batch: int = 1000
) -> None:
    """Append ``records`` to ``tp`` as leader, with acks=all, through the broker's replica manager."""
    broker = b.broker
    loop = broker._background.get_loop()

    async def append() -> None:
        for batch in _batches(records, per_batch):
            broker.replica_manager.append_records(tp, memoryview(bytearray(batch)), -1)

    asyncio.run_coroutine_threadsafe(append(), loop).result(60)


def append_on_disk(log_dir: Path, tp: TopicPartition, records: Sequence[KeyValue], per_batch: int = 100) -> None:
    """Append ``records`` to the log of ``tp`` in ``log_dir`` while no broker runs on it (the log is opened
    with the default configs, so any record goes in, keyless ones too)."""
    plog = Log(log_dir / f"{tp.topic}-{tp.partition}", LogConfig())
    try:
        epoch = max(plog.leader_epoch_cache.latest_epoch, 0)
        for batch in _batches(records, per_batch):
            plog.append(bytearray(batch), leader_epoch=epoch)
        plog.flush()
    finally:
        plog.close()
