"""The share-group state files: written and read back; a file the broker did not write (garbage, truncated,
another format) is logged and skipped, never an error."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rill.coordinator.share.share_partition import RecordState, SharePartition, StateBatch
from rill.coordinator.share.share_state import STATE_DIR, ShareStateStore


def test_state_round_trips(tmp_path: Path) -> None:
    store = ShareStateStore(tmp_path)
    sp = SharePartition(10, delivery_count_limit=3)
    sp.acquire("m", [(10, 14)], 0)
    assert sp.acknowledge("m", [(10, 11, [1]), (12, 12, [2]), (13, 13, [3])], 0) == 0
    store.write("g/1 é", {("ab" * 16, 0): (sp.start_offset, sp.snapshot())})
    assert store.groups() == ["g/1 é"]
    start, batches = store.read("g/1 é")[("ab" * 16, 0)]
    restored = SharePartition(0, delivery_count_limit=3)
    restored.restore(start, batches)
    assert restored.start_offset == 12
    assert [restored.state_of(o) for o in range(12, 15)] == [
        RecordState.AVAILABLE, RecordState.ARCHIVED, RecordState.AVAILABLE]  # fmt: skip
    assert restored.records[12].delivery_count == 1
    assert restored.next_fetch_offset() == 12


@pytest.mark.parametrize(
    "content",
    [b"\x00\xff garbage", b'{"version": 1, "partitions": [', b'{"version": 99, "partitions": []}',
     b'{"version": 1, "partitions": [{"topic_id": "x", "partition": 0, "start_offset": "a", "batches": []}]}',
     b'{"version": 1, "partitions": [{"topic_id": "x", "partition": 0, "start_offset": 3, "batches": [[5, 4, 0, 1]]}]}',
     b'{"version": 1, "partitions": [{"topic_id": "x", "partition": 0, "start_offset": 3, "batches": [[3, 4, 9, 1]]}]}',
     b"[]"],
)  # fmt: skip
def test_a_file_the_broker_did_not_write_is_skipped(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / STATE_DIR).mkdir()
    (tmp_path / STATE_DIR / "g.json").write_bytes(content)
    with caplog.at_level(logging.WARNING):
        assert ShareStateStore(tmp_path).read("g") == {}
    assert "starting afresh" in caplog.text


def test_restore_ignores_batches_below_the_start(tmp_path: Path) -> None:
    sp = SharePartition(0)
    sp.restore(5, [StateBatch(0, 6, RecordState.ACKNOWLEDGED, 1), StateBatch(7, 7, RecordState.AVAILABLE, 1)])
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (7, 8, 7)
