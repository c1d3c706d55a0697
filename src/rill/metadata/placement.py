"""Where a new partition's replicas go: Kafka's replica placement.

The brokers are listed alternating by rack (when racks are set: brokers of one rack are interleaved with those
of the others, so consecutive brokers in the list sit in different racks), then the first replica of partition
``p`` goes to broker ``(start + p) % n`` and each further replica ``shift`` brokers on, the shift growing by one
every ``n`` partitions, from a random start; with racks, a follower that would share a rack with another
replica of its partition moves on to the next broker of an unused rack. Leaders (first replicas) spread
evenly, followers of one broker's partitions spread over the others, and each partition's replicas span as
many racks as they can.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from rill.metadata.store import BrokerInfo


def rack_alternated(brokers: Sequence[BrokerInfo]) -> list[int]:
    """Broker ids, taking one broker from each rack in turn (racks and brokers in id order)."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(brokers, key=lambda b: b.node_id):
        by_rack.setdefault(b.rack or "", []).append(b.node_id)
    racks = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    for i in range(max((len(r) for r in racks), default=0)):
        out += [r[i] for r in racks if i < len(r)]
    return out


def assign_replicas(
    brokers: Sequence[BrokerInfo], partitions: int, replication_factor: int, rng: random.Random | None = None
) -> dict[int, tuple[int, ...]]:
    """The replicas of partitions ``0..partitions-1`` over ``brokers`` (at least ``replication_factor``)."""
    ids = rack_alternated(brokers)
    rack = {b.node_id: b.rack or "" for b in brokers}
    racks = len(set(rack.values()))
    n = len(ids)
    if replication_factor > n:
        raise ValueError(f"replication factor {replication_factor} is more than the {n} brokers")
    r = rng or random.Random()
    start = r.randrange(n)
    shift = r.randrange(n)
    out: dict[int, tuple[int, ...]] = {}
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (start + p) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            index = (first + 1 + (shift + j) % (n - 1)) % n
            # With racks, a follower goes to the next broker (from the shifted one) whose rack holds none of
            # this partition's replicas yet, until every rack holds one.
            for step in range(n):
                candidate = ids[(index + step) % n]
                used = {rack[x] for x in replicas}
                if candidate in replicas or (len(used) < racks and rack[candidate] in used):
                    continue
                replicas.append(candidate)
                break
        out[p] = tuple(replicas)
    return out
