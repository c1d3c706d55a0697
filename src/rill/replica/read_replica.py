"""Fetch from the closest replica (KIP-392): which replica a consumer should read a partition from.

The leader consults the broker's ``replica.selector.class`` for a consumer's fetch that carries client metadata
(Fetch v11+, with the consumer's ``client.rack`` as its ``rack_id``). The replicas it chooses among are the
leader itself and the followers that are in the ISR, alive (registered) and hold the fetch offset (their log
start and log end offsets, as their last fetches reported them, around it). Kafka's two selectors:

- ``LeaderSelector``: always the leader (the same as leaving the config unset);
- ``RackAwareReplicaSelector``: the leader when the consumer gave no rack, when no replica is in its rack, or
  when the leader is in it; otherwise the replica of that rack with the largest log end offset (of two alike,
  the one caught up most recently).

A choice other than the leader answers the partition with no records and that replica as
``preferred_read_replica``; the consumer then fetches from it, and a follower serves such fetches up to its high
watermark (``ReplicaManager.read``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from rill.config.cluster_definitions import LEADER_SELECTOR, RACK_AWARE_REPLICA_SELECTOR
from rill.replica.partition import Partition


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica a selector may choose: its broker, that broker's rack, its log end offset and how long ago it
    was last caught up with the leader (0 for the leader)."""

    node_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int


class ReplicaSelector(Protocol):
    def select(self, client_rack: str, leader: ReplicaView, replicas: list[ReplicaView]) -> ReplicaView: ...


class RackAwareReplicaSelector:
    """Kafka's RackAwareReplicaSelector."""

    def select(self, client_rack: str, leader: ReplicaView, replicas: list[ReplicaView]) -> ReplicaView:
        if not client_rack or leader.rack == client_rack:
            return leader
        same_rack = [r for r in replicas if r.rack == client_rack]
        if not same_rack:
            return leader
        return max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_caught_up_ms))


def replica_selector(class_name: str | None) -> ReplicaSelector | None:
    """The selector ``replica.selector.class`` names; None when only the leader serves consumers (unset, or
    ``LeaderSelector``), so that the fetch path does not consult one at all."""
    if not class_name or class_name == LEADER_SELECTOR:
        return None
    if class_name == RACK_AWARE_REPLICA_SELECTOR:
        return RackAwareReplicaSelector()
    raise ValueError(f"replica.selector.class {class_name!r} is not a selector Rill has")


def preferred_read_replica(
    selector: ReplicaSelector,
    partition: Partition,
    client_rack: str,
    fetch_offset: int,
    racks: Mapping[int, str | None],
    now_ms: int,
) -> int:
    """As leader of ``partition``: the replica ``selector`` prefers for a consumer in ``client_rack`` reading from
    ``fetch_offset``, or -1 for the leader itself. ``racks`` maps each live broker to its rack."""
    isr = partition.state.isr
    candidates = [
        ReplicaView(r, racks[r], f.log_end_offset, now_ms - f.last_caught_up_ms)
        for r, f in partition.followers.items()
        if r in isr and r in racks and f.log_start_offset <= fetch_offset <= f.log_end_offset
    ]
    leader = ReplicaView(partition.node_id, racks.get(partition.node_id), partition.log_end_offset, 0)
    chosen = selector.select(client_rack, leader, [*candidates, leader])
    return -1 if chosen is leader else chosen.node_id
