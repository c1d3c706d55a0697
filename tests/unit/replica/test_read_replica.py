"""Kafka's RackAwareReplicaSelector rules on a real partition (KIP-392): a replica of the consumer's rack only
when the leader is not in it, only among live in-sync replicas holding the fetch offset, the most caught-up
first; and the follower's side of a consumer's read (its high watermark the limit)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.unit.log.logtest_util import make_batch

from rill.common import TopicPartition
from rill.config.cluster_definitions import LEADER_SELECTOR, RACK_AWARE_REPLICA_SELECTOR
from rill.errors import ErrorCode
from rill.log.log_config import LogConfig
from rill.log.log_manager import LogManager
from rill.metadata.embedded import EmbeddedMetadataStore
from rill.metadata.store import BrokerInfo, PartitionState, TopicState
from rill.records.batch import iter_batches
from rill.records.builder import build_batch
from rill.records.record import Record
from rill.replica.read_replica import RackAwareReplicaSelector, preferred_read_replica, replica_selector
from rill.replica.replica_manager import ReplicaManager

TP = TopicPartition("t", 0)
SELECTOR = RackAwareReplicaSelector()


def _with_partition(tmp_path: Path, state: PartitionState, body: Callable[[ReplicaManager], None]) -> None:
    async def main() -> None:
        manager = LogManager([tmp_path / "logs"], LogConfig())
        manager.startup()
        store = EmbeddedMetadataStore(tmp_path / "logs", 0, BrokerInfo(0, "127.0.0.1", 9092))
        rm = ReplicaManager(0, manager, store, lambda configs: dict(configs))
        rm._host([TopicState("t", uuid.uuid4(), (state,))])
        try:
            body(rm)
        finally:
            rm.shutdown()
            manager.shutdown()
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 20))


def test_the_rack_aware_selector_picks_a_live_in_sync_replica_of_the_consumers_rack(tmp_path: Path) -> None:
    def body(rm: ReplicaManager) -> None:
        rm.append_records(TP, memoryview(bytearray(make_batch(10))), 1)
        partition = rm.get_partition(TP)
        rm.update_follower_fetch_state(TP, 1, 8)
        rm.update_follower_fetch_state(TP, 2, 10)
        rm.update_follower_fetch_state(TP, 3, 10)  # broker 3 is out of the ISR
        racks: dict[int, str | None] = {0: "a", 1: "b", 2: "b", 3: "c"}

        def pick(rack: str, offset: int = 5, live: dict[int, str | None] = racks) -> int:
            return preferred_read_replica(SELECTOR, partition, rack, offset, live, 0)

        assert pick("b") == 2  # both in rack b hold offset 5: the one with the larger log end offset
        assert pick("b", 9) == 2 and pick("b", 10) == 2
        assert pick("b", 11) == -1  # no follower holds it yet
        assert pick("c") == -1  # broker 3 is not in the ISR
        assert pick("a") == -1 and pick("") == -1 and pick("elsewhere") == -1
        assert pick("b", live={0: "a", 1: "b", 3: "c"}) == 1  # broker 2 is not alive
        assert pick("b", live={0: "b", 1: "b", 2: "b"}) == -1  # the leader is in the consumer's rack

    state = PartitionState(0, leader=0, leader_epoch=1, replicas=(0, 1, 2, 3), isr=(0, 1, 2))
    _with_partition(tmp_path, state, body)


def test_of_two_replicas_as_far_along_the_one_caught_up_last_is_chosen(tmp_path: Path) -> None:
    def body(rm: ReplicaManager) -> None:
        rm.append_records(TP, memoryview(bytearray(make_batch(4))), 1)
        partition = rm.get_partition(TP)
        partition.update_follower_fetch_state(1, 4, 1000)
        partition.update_follower_fetch_state(2, 4, 2000)
        racks: dict[int, str | None] = {0: "a", 1: "b", 2: "b"}
        assert preferred_read_replica(SELECTOR, partition, "b", 0, racks, 3000) == 2
        partition.update_follower_fetch_state(1, 4, 2500)
        assert preferred_read_replica(SELECTOR, partition, "b", 0, racks, 3000) == 1

    _with_partition(tmp_path, PartitionState(0, leader=0, leader_epoch=1, replicas=(0, 1, 2), isr=(0, 1, 2)), body)


def test_replica_selector_class_names() -> None:
    assert replica_selector(None) is None and replica_selector("") is None
    assert replica_selector(LEADER_SELECTOR) is None
    assert isinstance(replica_selector(RACK_AWARE_REPLICA_SELECTOR), RackAwareReplicaSelector)
    with pytest.raises(ValueError):
        replica_selector("com.example.NearestSelector")


def _replicate(rm: ReplicaManager, high_watermark: int) -> None:
    """Offsets 0-5 and 6-9 in two batches, as a follower appends them; then the high watermark."""
    plog = rm.get_partition(TP).log
    plog.append_as_follower(build_batch([Record(0, 0, None, b"v", [])] * 6))
    plog.append_as_follower(build_batch([Record(0, 0, None, b"w", [])] * 4, base_offset=6))
    plog.high_watermark = high_watermark


def test_a_follower_serves_consumers_up_to_its_high_watermark(tmp_path: Path) -> None:
    def body(rm: ReplicaManager) -> None:
        _replicate(rm, 6)
        read = rm.read(TP, 0, 1 << 20, client_rack="b")
        assert (read.error, read.high_watermark) == (ErrorCode.NO_ERROR, 6)
        data = b"".join(os.pread(r.fd, r.length, r.position) for r in read.regions)
        assert [h.last_offset for _p, h in iter_batches(data)] == [5]  # never the batch above it
        assert rm.read(TP, 6, 1 << 20, client_rack="").size == 0  # at the high watermark: nothing yet
        assert rm.read(TP, 7, 1 << 20, client_rack="b").error == ErrorCode.OFFSET_NOT_AVAILABLE
        assert rm.read(TP, 11, 1 << 20, client_rack="b").error == ErrorCode.OFFSET_OUT_OF_RANGE
        assert rm.read(TP, 0, 1 << 20).error == ErrorCode.NOT_LEADER_OR_FOLLOWER  # no client metadata
        assert rm.read(TP, 0, 1 << 20, committed_only=False).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert rm.read(TP, 0, 1 << 20, client_rack="b", current_leader_epoch=1).error == ErrorCode.FENCED_LEADER_EPOCH

    state = PartitionState(0, leader=1, leader_epoch=2, replicas=(0, 1), isr=(0, 1))
    _with_partition(tmp_path, state, body)


def test_a_follower_out_of_the_isr_does_not_serve(tmp_path: Path) -> None:
    def body(rm: ReplicaManager) -> None:
        _replicate(rm, 6)
        assert rm.read(TP, 0, 1 << 20, client_rack="b").error == ErrorCode.NOT_LEADER_OR_FOLLOWER

    state = PartitionState(0, leader=1, leader_epoch=2, replicas=(0, 1), isr=(1,))
    _with_partition(tmp_path, state, body)
