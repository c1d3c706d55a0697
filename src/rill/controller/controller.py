"""The controller: one broker of the cluster, elected through ZooKeeper, that elects partition leaders.

Every broker campaigns: the one that creates the ephemeral ``/controller`` znode is the controller. It creates
it and raises ``/controller_epoch`` in one ZooKeeper transaction (Kafka's multi-op), so that no broker ever holds
``/controller`` without having raised the epoch; a ``/controller`` owned by this broker's session (a transaction
applied but answered with a lost connection) is held. Every write it makes afterwards is a transaction that checks
the epoch znode's version, so a controller that lost its session (a paused "zombie") cannot write over its
successor.

The controller watches the live brokers, the topics' assignments and the deletions asked for, and makes the
partition states agree with them (``reconcile``, idempotent, run after every change it watches). A pass reads
what changed: every topic when the live brokers (or their epochs) changed, when it became the controller, after a
pass that failed and at each imbalance check; otherwise only the topics whose assignment or configs changed or
that appeared, those being reassigned and those with a partition offline. So CreateTopics costs the controller
the new topics' reads, however many topics exist:

- a new partition gets as leader its first live replica, and the live replicas as ISR (with none live, it
  gets no state until one is);
- a partition whose leader is not live (dead, or shutting down) gets a new leader: the first replica, in
  assignment order, that is live and in the ISR, at leader epoch + 1. With none, and
  ``unclean.leader.election.enable`` false (the topic's config, else the cluster-wide dynamic one, else the
  broker's), it stays offline (leader -1) with its ISR kept, so nothing committed
  is lost: it comes back when an ISR member does. With it true, a live replica outside the ISR is taken and the
  records only the old ISR had are lost;
- replicas that are not live leave the ISR (the leader stays);
- a partition with no leader gets one as soon as a member of its ISR is live again;
- a topic marked for deletion is removed (assignment, partition states, configs, the mark);
- a broker registered again since the last pass (a new broker epoch, the zxid that created its registration, as
  KIP-380 has it: a restart or a new session faster than the controller saw it gone) is handled as failed for one
  pass, then as back: the partitions it led get a new leader epoch, it leaves the ISRs, and rejoins them as it
  catches up.

Elections asked for (ElectLeaders writes ``/admin/preferred_replica_election``) are carried out: a preferred
election makes the first replica of the assignment leader when it is live and in the ISR; an unclean one gives
a partition without a leader a live replica. With ``auto.leader.rebalance.enable``, every
``leader.imbalance.check.interval.seconds`` the controller runs a preferred election for the partitions of each
broker that leads fewer than ``leader.imbalance.per.broker.percentage`` percent of its preferred partitions'
share.

A broker shutting down in a controlled way marks its registration (``"shutting_down": true``): it is no longer
live for leadership, so its partitions move to other ISR members before it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from rill.controller.election import Election, elect
from rill.metadata import zk_layout as zl
from rill.metadata.zk_watches import lasting_children_watch

log = logging.getLogger(__name__)

RESIGN_TIMEOUT_S = 2.0


class KafkaController:
    """Campaigns for the controller role on this broker's ZooKeeper client and acts while it holds it."""

    def __init__(
        self,
        zk: KazooClient,
        node_id: int,
        *,
        unclean_leader_election: bool = False,
        auto_rebalance: bool = False,
        imbalance_percentage: int = 10,
        imbalance_check_interval_s: float = 300.0,
    ) -> None:
        self.zk = zk
        self.node_id = node_id
        self.unclean = unclean_leader_election
        self.auto_rebalance = auto_rebalance
        self.imbalance_percentage = imbalance_percentage
        self.imbalance_check_interval_s = imbalance_check_interval_s
        self._rebalance_due = False
        self._reassigning = False
        self.epoch = -1
        self._epoch_version = -1
        self.active = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.elections = 0  # leader elections made (a metric)
        self.unclean_elections = 0  # of which unclean ones
        self.election_time_ms = 0.0  # summed over the elections: from the start of the pass to its write
        self._watched: set[str] = set()  # znodes with a data watch (added on kazoo's threads)
        self._broker_epochs: dict[int, int] = {}  # each live broker's epoch as of the last pass fully written
        # What the next pass reads (set on kazoo's threads, taken by the pass): every topic, or those named.
        self._changes = threading.Lock()
        self._all_topics = True
        self._changed_topics: set[str] = set()
        self._registered_seen: tuple[set[int], set[int], dict[int, int]] | None = None  # as of the last full pass
        self._reassigning_topics: set[str] = set()
        self._offline_topics: set[str] = set()  # with a partition whose ISR has no live member

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
        lasting_children_watch(self.zk, zl.BROKER_IDS, self._on_brokers)
        lasting_children_watch(self.zk, zl.TOPICS, self._on_topics)
        lasting_children_watch(self.zk, zl.DELETE_TOPICS, self._poke)
        self.zk.DataWatch(zl.LEADER_ELECTION, self._poke)

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
        """Watch each topic's assignment, and its configs (``unclean.leader.election.enable`` may change): a
        change of either (and the first answer of the watch: a new topic) makes the next pass read the topic."""
        for name in names:
            for path in (zl.topic_path(name), zl.topic_config_path(name)):
                if path not in self._watched:
                    self._watched.add(path)
                    self.zk.DataWatch(path, self._on_topic_change(name, path))
        return self._poke()

    def _on_topic_change(self, topic: str, path: str) -> Any:
        def on_change(data: bytes | None, *_: Any) -> bool:
            with self._changes:
                self._changed_topics.add(topic)
            self._poke()
            if data is None:  # gone: a topic made again under this name gets a new watch
                self._watched.discard(path)
                return False
            return True

        return on_change

    def _read_all_next(self) -> None:
        with self._changes:
            self._all_topics = True

    def _take_changes(self) -> tuple[bool, set[str]]:
        with self._changes:
            every, topics = self._all_topics, self._changed_topics
            self._all_topics, self._changed_topics = False, set()
        return every, topics

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_check = loop.time() + self.imbalance_check_interval_s
        while True:
            # While a reassignment waits for its new replicas to join the ISR, look again twice a second.
            wait = max(0.0, next_check - loop.time())
            if self._reassigning:
                wait = min(wait, 0.5)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            self._wake.clear()
            if loop.time() >= next_check:
                next_check = loop.time() + self.imbalance_check_interval_s
                self._rebalance_due = self.auto_rebalance
            try:
                await asyncio.to_thread(self._step)
            except Exception:
                log.exception("controller step failed; retrying")
                await asyncio.sleep(0.5)
                self._wake.set()

    def _step(self) -> None:
        if self.active and not self._holds_controller():
            log.info("Broker %d is no longer the controller", self.node_id)
            self.active = False
        if not self.active:
            self._campaign()
        if self.active:
            self.reconcile()

    def _session(self) -> int:
        client_id = self.zk.client_id
        return int(client_id[0]) if client_id is not None else 0

    def _holds_controller(self) -> bool:
        """Whether ``/controller`` is this session's (its owner, not the broker id it names: a previous session of
        this broker is not this one)."""
        try:
            _, stat = self.zk.get(zl.CONTROLLER)
        except NoNodeError:
            return False
        return bool(stat.ephemeralOwner == self._session())

    def _campaign(self) -> None:
        """Become the controller if no one is: create the ephemeral ``/controller`` and raise ``/controller_epoch``
        in one transaction (the epoch's write checks the version read, as Kafka's
        registerControllerAndIncrementControllerEpoch), so that no broker holds ``/controller`` without having
        raised the epoch. A ``/controller`` this session owns is held: a transaction applied but answered with a lost
        connection. The epoch raised by someone else between the read and the write: read again."""
        while True:
            try:
                data, stat = self.zk.get(zl.CONTROLLER_EPOCH)
            except NoNodeError:
                with contextlib.suppress(NodeExistsError):
                    self.zk.create(zl.CONTROLLER_EPOCH, b"0")
                continue
            epoch = int(data.decode()) + 1
            tx = self.zk.transaction()
            tx.create(zl.CONTROLLER, zl.encode_controller(self.node_id), ephemeral=True)
            tx.set_data(zl.CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
            created, bumped = tx.commit()
            if not isinstance(created, Exception) and not isinstance(bumped, Exception):
                self._became_controller(epoch, bumped.version)
                return
            if isinstance(created, NodeExistsError):
                break
            if not isinstance(bumped, BadVersionError):
                raise created if isinstance(created, Exception) else bumped
        held = self._held_epoch()
        if held is not None:
            self._became_controller(*held)

    def _held_epoch(self) -> tuple[int, int] | None:
        """When ``/controller`` is this session's, the controller epoch and its version (raised in the same
        transaction that made it, and by no one since: only the holder of ``/controller`` raises it)."""
        if not self._holds_controller():
            return None
        data, stat = self.zk.get(zl.CONTROLLER_EPOCH)
        log.info("Broker %d holds /controller from a transaction answered with a lost connection", self.node_id)
        return int(data.decode()), stat.version

    def _became_controller(self, epoch: int, epoch_version: int) -> None:
        if epoch != self.epoch:  # a new term: the broker epochs are taken as they are (as Kafka's new controller)
            self._broker_epochs = {}
        self._read_all_next()
        self.epoch, self._epoch_version, self.active = epoch, epoch_version, True
        log.info("Broker %d is the controller (controller epoch %d)", self.node_id, epoch)

    # -- reconciliation (worker thread) --------------------------------------------------------------------

    def live_brokers(self) -> set[int]:
        return self._registered()[0]

    def _registered(self) -> tuple[set[int], set[int], dict[int, int]]:
        """The live brokers, those of them in a controlled shutdown (not live for leadership), and each one's broker
        epoch: the zxid that created its registration, new with each registration (KIP-380)."""
        live: set[int] = set()
        stopping: set[int] = set()
        epochs: dict[int, int] = {}
        for child in self.zk.get_children(zl.BROKER_IDS):
            try:
                data, stat = self.zk.get(f"{zl.BROKER_IDS}/{child}")
                node, down = int(child), bool(json.loads(data).get("shutting_down"))
            except NoNodeError:
                continue
            except (ValueError, AttributeError) as e:  # not a broker id, or not a registration: not live
                log.warning("Skipped the broker registration %s/%s, which cannot be read: %s", zl.BROKER_IDS, child, e)
                continue
            (stopping if down else live).add(node)
            epochs[node] = stat.czxid
        return live, stopping, epochs

    def reconcile(self) -> None:
        """One pass. A broker registered again since the last pass (a new broker epoch: a restart or a new session,
        whether or not this controller saw it gone) counts as not live for this pass, as after a failure: the
        partitions it led get a new leader (or go offline at a new leader epoch), it leaves the ISRs; the next pass
        sees it back (Kafka's bounced brokers)."""
        every, changed = self._take_changes()
        try:
            self._reconcile(every, changed)
        except BaseException:
            self._read_all_next()
            raise

    def _reconcile(self, every: bool, changed: set[str]) -> None:
        started = time.monotonic()
        marked: list[str] = []
        with contextlib.suppress(NoNodeError):  # deleted by an operator: a DeleteTopics makes it again
            marked = self.zk.get_children(zl.DELETE_TOPICS)
        for topic in marked:
            self._delete_topic(topic)
        registered = live, stopping, epochs = self._registered()
        every = every or self._rebalance_due or registered != self._registered_seen
        bounced = {b for b, e in epochs.items() if self._broker_epochs.get(b, e) != e}
        if bounced:
            log.info("Brokers %s registered again (new broker epochs): handled as failed, then back", sorted(bounced))
            live, stopping = live - bounced, stopping - bounced
        if every:
            topics = self.zk.get_children(zl.TOPICS)
            self._reassigning_topics, self._offline_topics = set(), set()
        else:
            topics = sorted(changed | self._reassigning_topics | self._offline_topics)
        self._offline_topics -= set(topics)
        writes: list[Election] = []
        unclean_by_topic: dict[str, bool] = {}
        for topic in topics:
            assignment = self._assignment(topic)
            if assignment is None:
                continue
            for p, replicas in sorted(assignment.partitions.items()):
                try:
                    data, stat = self.zk.get(zl.state_path(topic, p))
                    current: zl.LeaderAndIsr | None = zl.decode_state(data, stat.version)
                    version = stat.version
                except NoNodeError:
                    current, version = None, -1
                except zl.MalformedZnode as e:  # left as it is: rewriting it could lower its leader epoch
                    log.warning("Partition %s-%d skipped: its state cannot be read (%s)", topic, p, e)
                    continue
                unclean = self.unclean
                if current is not None and not any(r in live for r in current.isr):  # only then does it matter
                    if topic not in unclean_by_topic:
                        unclean_by_topic[topic] = self._unclean_for(topic)
                    unclean = unclean_by_topic[topic] and not bounced & set(current.isr)  # a bounce loses nothing
                alive = live
                if current is not None and current.leader in stopping and not any(
                    r in live for r in current.isr if r != current.leader
                ):  # a stopping leader with no one to hand over to leads until it is gone, as in Kafka
                    alive = live | {current.leader}
                change = elect(replicas, current, alive, self.epoch, unclean)
                if change is not None:
                    new, why = change
                    elected = current is not None and new.leader not in (-1, current.leader)
                    unclean = elected and current is not None and new.leader not in current.isr
                    writes.append(Election(topic, p, new, version, why, elected, unclean))
                after = change[0] if change is not None else current
                if after is None or after.leader < 0:  # looked at again by every pass until it has a leader
                    self._offline_topics.add(topic)
        self._complete_reassignments(live, topics)
        requested = self.zk.exists(zl.LEADER_ELECTION)
        writes += self._requested_elections(live, {(w.topic, w.partition) for w in writes})
        if not writes or self._write(writes, started):
            self._broker_epochs = epochs
            if every:
                self._registered_seen = registered
            if bounced:
                self._read_all_next()
                self._poke()  # the next pass sees them live again
        else:
            self._read_all_next()
        if requested is not None:  # done: a request written since (another version) stays for the next pass
            with contextlib.suppress(NoNodeError, BadVersionError):
                self.zk.delete(zl.LEADER_ELECTION, version=requested.version)

    def _complete_reassignments(self, live: set[int], topics: list[str]) -> None:
        """A reassigned partition whose target replicas are all in the ISR gets them as its replicas: the
        others leave (their brokers drop the partition), the ISR keeps only targets, and a leader outside the
        targets hands over to the first live target in the ISR (leader epoch + 1). One transaction per
        partition, checked against the controller epoch, the partition state's and the assignment's versions."""
        self._reassigning = False
        self._reassigning_topics -= set(topics)
        for topic in topics:
            try:
                data, astat = self.zk.get(zl.topic_path(topic))
                a = zl.decode_assignment(data)
            except (NoNodeError, zl.MalformedZnode):
                continue
            for p in sorted(set(a.adding) | set(a.removing)):
                self._reassigning = True
                self._reassigning_topics.add(topic)
                target = tuple(r for r in a.partitions[p] if r not in a.removing.get(p, ()))
                try:
                    s = zl.decode_state(*self._get_state(topic, p))
                except (NoNodeError, zl.MalformedZnode):
                    continue
                if not set(target) <= set(s.isr):
                    continue
                leader, epoch = s.leader, s.leader_epoch
                if leader not in target or leader not in live:
                    candidates = [r for r in target if r in live and r in s.isr]
                    if not candidates:
                        continue
                    leader, epoch = candidates[0], epoch + 1
                new_state = zl.LeaderAndIsr(leader, epoch, tuple(r for r in s.isr if r in target), self.epoch)
                done = zl.Assignment(a.topic_id, {**a.partitions, p: target},
                                     {q: r for q, r in a.adding.items() if q != p},
                                     {q: r for q, r in a.removing.items() if q != p})  # fmt: skip
                tx = self.zk.transaction()
                tx.check(zl.CONTROLLER_EPOCH, self._epoch_version)
                tx.set_data(zl.state_path(topic, p), zl.encode_state(new_state), version=s.partition_epoch)
                tx.set_data(zl.topic_path(topic), zl.encode_assignment(done), version=astat.version)
                if any(isinstance(r, Exception) for r in tx.commit()):
                    self._read_all_next()  # raced with another change: the next pass tries again
                    self._poke()
                    return
                log.info("Partition %s-%d reassigned to %s: leader %d, leader epoch %d, ISR %s", topic, p,
                         list(target), leader, epoch, list(new_state.isr))  # fmt: skip
                data, astat = self.zk.get(zl.topic_path(topic))
                a = zl.decode_assignment(data)

    def _requested_elections(self, live: set[int], pending: set[tuple[str, int]]) -> list[Election]:
        """The elections asked for through ElectLeaders, and those the auto rebalance finds due."""
        try:
            election_type, partitions = zl.decode_election(self.zk.get(zl.LEADER_ELECTION)[0])
        except (NoNodeError, zl.MalformedZnode):  # a request that cannot be read is removed as done
            election_type, partitions = 0, []
        if self._rebalance_due:
            self._rebalance_due = False
            partitions += self._imbalanced(live)
        out: list[Election] = []
        for topic, p in dict.fromkeys(partitions):
            if (topic, p) in pending:
                continue
            try:
                replicas = zl.decode_assignment(self.zk.get(zl.topic_path(topic))[0]).partitions[p]
                data, stat = self.zk.get(zl.state_path(topic, p))
                s = zl.decode_state(data, stat.version)
            except (NoNodeError, KeyError, IndexError, zl.MalformedZnode):
                continue
            if election_type == 0:
                preferred = replicas[0]
                if s.leader == preferred or preferred not in live or preferred not in s.isr:
                    continue
                new = zl.LeaderAndIsr(preferred, s.leader_epoch + 1, s.isr, self.epoch)
                out.append(Election(topic, p, new, stat.version, "preferred leader election", True))
            elif s.leader < 0 or s.leader not in live:
                alive = [r for r in replicas if r in live]
                if alive:
                    new = zl.LeaderAndIsr(alive[0], s.leader_epoch + 1, (alive[0],), self.epoch)
                    out.append(Election(topic, p, new, stat.version, "unclean election asked for", True,
                                        alive[0] not in s.isr))  # fmt: skip
        return out

    def _imbalanced(self, live: set[int]) -> list[tuple[str, int]]:
        """Partitions whose preferred leader is live and not leading, for each broker whose share of such
        partitions passes ``leader.imbalance.per.broker.percentage``."""
        preferred: dict[int, list[tuple[str, int, bool]]] = {}
        for topic in self.zk.get_children(zl.TOPICS):
            assignment = self._assignment(topic)
            if assignment is None:
                continue
            for p, replicas in assignment.partitions.items():
                try:
                    leader = zl.decode_state(*self._get_state(topic, p)).leader
                except (NoNodeError, zl.MalformedZnode):
                    continue
                preferred.setdefault(replicas[0], []).append((topic, p, leader == replicas[0]))
        out: list[tuple[str, int]] = []
        for broker, parts in preferred.items():
            behind = [(t, p) for t, p, leading in parts if not leading]
            if broker in live and behind and len(behind) * 100 > self.imbalance_percentage * len(parts):
                out += behind
        return out

    def _assignment(self, topic: str) -> zl.Assignment | None:
        """A topic's assignment; None when it is gone or cannot be read (logged: written by another tool)."""
        try:
            return zl.decode_assignment(self.zk.get(zl.topic_path(topic))[0])
        except NoNodeError:
            return None
        except zl.MalformedZnode as e:
            log.warning("Topic %s skipped: its assignment cannot be read (%s)", topic, e)
            return None

    def _get_state(self, topic: str, partition: int) -> tuple[bytes, int]:
        data, stat = self.zk.get(zl.state_path(topic, partition))
        return data, stat.version

    def _unclean_for(self, topic: str) -> bool:
        """``unclean.leader.election.enable`` for ``topic``: its topic config, else the cluster-wide dynamic
        broker config, else this broker's own."""
        for path in (zl.topic_config_path(topic), zl.broker_config_path(None)):
            try:
                value = zl.decode_configs(self.zk.get(path)[0]).get("unclean.leader.election.enable")
            except (NoNodeError, zl.MalformedZnode):  # unreadable: no unclean election on its say-so
                continue
            if value is not None:
                return value.strip().lower() == "true"
        return self.unclean

    def _write(self, writes: list[Election], started: float) -> bool:
        """Write partition states in transactions that check the controller epoch (fenced when stale) and each
        state's version; a write that lost a race is retried by the next reconciliation. True when all were made."""
        made = True
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
                    return False
                self._poke()
                made = False
                continue
            took_ms = (time.monotonic() - started) * 1000
            for w in chunk:
                if w.elected:
                    self.elections += 1
                    self.unclean_elections += w.unclean
                    self.election_time_ms += took_ms
                log.info("Partition %s-%d: leader %d, leader epoch %d, ISR %s (%s)", w.topic, w.partition,
                         w.state.leader, w.state.leader_epoch, list(w.state.isr), w.why)  # fmt: skip
        return made

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
