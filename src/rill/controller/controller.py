"""The controller: one broker of the cluster, elected through ZooKeeper, that elects partition leaders.

Every broker campaigns: the one that creates the ephemeral ``/controller`` znode is the controller, and it
raises ``/controller_epoch``; every write it makes afterwards is a ZooKeeper transaction that checks that znode's
version, so a controller that lost its session (a paused "zombie") cannot write over its successor.

The controller watches the live brokers, the topics' assignments and the deletions asked for, and makes the
partition states agree with them (``reconcile``, idempotent, run after every change it watches):

- a new partition gets as leader its first live replica, and the live replicas as ISR;
- a partition whose leader is not live (dead, or shutting down) gets a new leader: the first replica, in
  assignment order, that is live and in the ISR, at leader epoch + 1. With none, and
  ``unclean.leader.election.enable`` false, it stays offline (leader -1) with its ISR kept, so nothing committed
  is lost: it comes back when an ISR member does. With it true, a live replica outside the ISR is taken and the
  records only the old ISR had are lost;
- replicas that are not live leave the ISR (the leader stays);
- a partition with no leader gets one as soon as a member of its ISR is live again;
- a topic marked for deletion is removed (assignment, partition states, configs, the mark).

A broker shutting down in a controlled way marks its registration (``"shutting_down": true``): it is no longer
live for leadership, so its partitions move to other ISR members before it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from rill.metadata import zk_layout as zl

log = logging.getLogger(__name__)

RESIGN_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class Election:
    """One partition state the controller writes: (topic, partition, new state, expected znode version or -1
    for a new znode), and why."""

    topic: str
    partition: int
    state: zl.LeaderAndIsr
    expected_version: int
    why: str


def elect(
    replicas: tuple[int, ...],
    current: zl.LeaderAndIsr | None,
    live: set[int],
    controller_epoch: int,
    unclean: bool,
) -> tuple[zl.LeaderAndIsr, str] | None:
    """The partition state the controller writes given the live brokers, or None when nothing changes."""
    if current is None:
        alive = [r for r in replicas if r in live]
        leader = alive[0] if alive else -1
        return zl.LeaderAndIsr(leader, 0, tuple(alive), controller_epoch), "new partition"
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


class KafkaController:
    """Campaigns for the controller role on this broker's ZooKeeper client and acts while it holds it."""

    def __init__(self, zk: KazooClient, node_id: int, *, unclean_leader_election: bool = False) -> None:
        self.zk = zk
        self.node_id = node_id
        self.unclean = unclean_leader_election
        self.epoch = -1
        self._epoch_version = -1
        self.active = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.elections = 0  # leader elections made (a metric)
        self._watched: set[str] = set()  # znodes with a data watch (added on kazoo's threads)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._run(), name="controller")
        await asyncio.to_thread(self._watch)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.active:
            self.active = False
            # Bounded: with ZooKeeper unreachable the calls wait for a connection (closing the client ends them),
            # and the session's expiry removes /controller anyway.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.to_thread(self._resign), RESIGN_TIMEOUT_S)

    def _resign(self) -> None:
        try:
            data, _ = self.zk.get(zl.CONTROLLER)
            if zl.decode_controller(data) == self.node_id:
                self.zk.delete(zl.CONTROLLER)
        except Exception:
            log.debug("resigning as controller failed", exc_info=True)

    def _poke(self, *_: Any) -> bool:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)
        return True

    def _watch(self) -> None:
        self.zk.DataWatch(zl.CONTROLLER, self._poke)
        self.zk.ChildrenWatch(zl.BROKER_IDS, self._on_brokers)
        self.zk.ChildrenWatch(zl.TOPICS, self._on_topics)
        self.zk.ChildrenWatch(zl.DELETE_TOPICS, self._poke)

    def _on_brokers(self, ids: list[str]) -> bool:
        """A registration's data changes when its broker starts a controlled shutdown: watch each one."""
        for child in ids:
            path = f"{zl.BROKER_IDS}/{child}"
            if path not in self._watched:
                self._watched.add(path)
                self.zk.DataWatch(path, self._on_registration(path))
        return self._poke()

    def _on_registration(self, path: str) -> Any:
        def on_change(data: bytes | None, *_: Any) -> bool:
            self._poke()
            if data is None:  # the broker is gone: a new registration gets a new watch
                self._watched.discard(path)
                return False
            return True

        return on_change

    def _on_topics(self, names: list[str]) -> bool:
        for name in names:
            path = zl.topic_path(name)
            if path not in self._watched:
                self._watched.add(path)
                self.zk.DataWatch(path, self._on_registration(path))
        return self._poke()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await asyncio.to_thread(self._step)
            except Exception:
                log.exception("controller step failed; retrying")
                await asyncio.sleep(0.5)
                self._wake.set()

    def _step(self) -> None:
        if not self.active:
            self._campaign()
        else:
            try:
                holder = zl.decode_controller(self.zk.get(zl.CONTROLLER)[0])
            except NoNodeError:
                holder = -1
            if holder != self.node_id:
                log.info("Broker %d is no longer the controller (now %d)", self.node_id, holder)
                self.active = False
                self._campaign()
        if self.active:
            self.reconcile()

    def _campaign(self) -> None:
        try:
            self.zk.create(zl.CONTROLLER, zl.encode_controller(self.node_id), ephemeral=True)
        except NodeExistsError:
            return
        while True:
            try:
                data, stat = self.zk.get(zl.CONTROLLER_EPOCH)
                epoch = int(data.decode()) + 1
                stat = self.zk.set(zl.CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
            except NoNodeError:
                try:
                    self.zk.create(zl.CONTROLLER_EPOCH, b"1")
                except NodeExistsError:
                    continue
                epoch, stat = 1, self.zk.exists(zl.CONTROLLER_EPOCH)
            break
        self.epoch, self._epoch_version, self.active = epoch, stat.version, True
        log.info("Broker %d is the controller (controller epoch %d)", self.node_id, epoch)

    # -- reconciliation (worker thread) --------------------------------------------------------------------

    def live_brokers(self) -> set[int]:
        live: set[int] = set()
        for child in self.zk.get_children(zl.BROKER_IDS):
            try:
                data, _ = self.zk.get(f"{zl.BROKER_IDS}/{child}")
            except NoNodeError:
                continue
            if not json.loads(data).get("shutting_down"):
                live.add(int(child))
        return live

    def reconcile(self) -> None:
        for topic in self.zk.get_children(zl.DELETE_TOPICS):
            self._delete_topic(topic)
        live = self.live_brokers()
        writes: list[Election] = []
        for topic in self.zk.get_children(zl.TOPICS):
            try:
                assignment = zl.decode_assignment(self.zk.get(zl.topic_path(topic))[0])
            except NoNodeError:
                continue
            for p, replicas in sorted(assignment.partitions.items()):
                try:
                    data, stat = self.zk.get(zl.state_path(topic, p))
                    current: zl.LeaderAndIsr | None = zl.decode_state(data, stat.version)
                    version = stat.version
                except NoNodeError:
                    current, version = None, -1
                change = elect(replicas, current, live, self.epoch, self.unclean)
                if change is not None:
                    writes.append(Election(topic, p, change[0], version, change[1]))
        if writes:
            self._write(writes)

    def _write(self, writes: list[Election]) -> None:
        """Write partition states in transactions that check the controller epoch (fenced when stale) and each
        state's version; a write that lost a race is retried by the next reconciliation."""
        for start in range(0, len(writes), 100):
            tx = self.zk.transaction()
            tx.check(zl.CONTROLLER_EPOCH, self._epoch_version)
            chunk = writes[start : start + 100]
            for w in chunk:
                path = zl.state_path(w.topic, w.partition)
                if w.expected_version < 0:
                    tx.create(path, zl.encode_state(w.state))
                else:
                    tx.set_data(path, zl.encode_state(w.state), version=w.expected_version)
            if chunk[0].expected_version < 0 or any(w.expected_version < 0 for w in chunk):
                for w in chunk:
                    if w.expected_version < 0:
                        self.zk.ensure_path(f"{zl.partitions_path(w.topic)}/{w.partition}")
            results = tx.commit()
            errors = [r for r in results if isinstance(r, Exception)]
            if errors:
                log.info("controller write not made (%s); trying again", type(errors[0]).__name__)
                if not self._still_controller():
                    self.active = False
                    return
                self._poke()
                continue
            for w in chunk:
                if w.why != "new partition":
                    self.elections += 1
                log.info("Partition %s-%d: leader %d, leader epoch %d, ISR %s (%s)", w.topic, w.partition,
                         w.state.leader, w.state.leader_epoch, list(w.state.isr), w.why)  # fmt: skip

    def _still_controller(self) -> bool:
        try:
            _data, stat = self.zk.get(zl.CONTROLLER_EPOCH)
        except NoNodeError:
            return False
        return bool(stat.version == self._epoch_version)

    def _delete_topic(self, topic: str) -> None:
        tx = self.zk.transaction()
        tx.check(zl.CONTROLLER_EPOCH, self._epoch_version)
        try:
            for p in self.zk.get_children(zl.partitions_path(topic)):
                tx.delete(zl.state_path(topic, int(p)))
                tx.delete(f"{zl.partitions_path(topic)}/{p}")
            tx.delete(zl.partitions_path(topic))
        except NoNodeError:
            pass
        if self.zk.exists(zl.topic_path(topic)):
            tx.delete(zl.topic_path(topic))
        if self.zk.exists(zl.topic_config_path(topic)):
            tx.delete(zl.topic_config_path(topic))
        tx.delete(f"{zl.DELETE_TOPICS}/{topic}")
        results = tx.commit()
        errors = [r for r in results if isinstance(r, Exception)]
        if errors:
            log.warning("could not delete topic %s (%r); trying again", topic, errors[0])
            self._poke()
        else:
            log.info("Deleted topic %s", topic)
