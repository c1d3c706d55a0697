"""The controller's choice of a partition's state given the live brokers (no I/O): Kafka's partition state
machine, reduced to what a ZooKeeper-mode controller writes."""

from __future__ import annotations

from dataclasses import dataclass

from rill.metadata import zk_layout as zl


@dataclass(frozen=True, slots=True)
class Election:
    """One partition state the controller writes: (topic, partition, new state, expected znode version or -1
    for a new znode), and why."""

    topic: str
    partition: int
    state: zl.LeaderAndIsr
    expected_version: int
    why: str
    elected: bool = False  # a new leader for an existing partition (counted as an election)
    unclean: bool = False  # ... taken from outside the ISR


def elect(
    replicas: tuple[int, ...],
    current: zl.LeaderAndIsr | None,
    live: set[int],
    controller_epoch: int,
    unclean: bool,
) -> tuple[zl.LeaderAndIsr, str] | None:
    """The partition state the controller writes given the live brokers, or None when nothing changes."""
    if current is None or (current.leader == -1 and not current.isr):
        # Never led (an empty ISR holds nothing committed): its live replicas start it; with none live it
        # waits for one, as Kafka's NewPartition does (a state with an empty ISR could never get a leader).
        alive = [r for r in replicas if r in live]
        if not alive:
            return None
        epoch = 0 if current is None else current.leader_epoch + 1
        return zl.LeaderAndIsr(alive[0], epoch, tuple(alive), controller_epoch), "new partition"
    isr_live = [r for r in current.isr if r in live]
    if current.leader in live:
        if len(isr_live) == len(current.isr):
            return None
        new = zl.LeaderAndIsr(current.leader, current.leader_epoch, tuple(isr_live), controller_epoch)
        return new, f"replicas {sorted(set(current.isr) - set(isr_live))} are not live"
    candidates = [r for r in replicas if r in live and r in current.isr]
    if candidates:
        leader = candidates[0]
        isr = tuple(r for r in current.isr if r in live)
        return zl.LeaderAndIsr(leader, current.leader_epoch + 1, isr, controller_epoch), (
            f"leader {current.leader} is not live"
        )
    if unclean:
        alive = [r for r in replicas if r in live]
        if alive:
            return zl.LeaderAndIsr(alive[0], current.leader_epoch + 1, (alive[0],), controller_epoch), (
                "unclean election: no ISR member is live"
            )
    if current.leader == -1:
        return None
    # Offline: no live ISR member. The ISR is kept, so that only one of them can lead again.
    return zl.LeaderAndIsr(-1, current.leader_epoch + 1, current.isr, controller_epoch), "no ISR member is live"
