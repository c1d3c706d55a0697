"""How a broker follows the topics in ZooKeeper (the following half of ``ZkMetadataStore``), in proportion to the
change.

Each topic has watches on its assignment, its configs, its partition list and each partition's state znode. They
fire on kazoo's threads and only mark, on the event loop, what changed: a partition state's watch marks that
partition, the others mark the whole topic. One task (``_follow``) takes the marks and reads: a topic marked whole
is read whole (assignment, every partition state, configs); a topic with only partitions marked has just those
state znodes read (the reads sent at once, then their answers taken), and its new state is the image's with those
partitions replaced (their replicas are the image's: a change of the assignment marks the whole topic). A state
znode's watch is set by the read of it (a ZooKeeper watch fires once: each read sets it again), so a leader or ISR
change of one partition of a topic of a thousand costs each broker one read, not a thousand (nor two: kazoo's
``DataWatch`` would read it once more on its own thread, one read after another). After a new session every topic
is read whole, which sets every state watch again, and told again; after a connection lost within the session every
topic is read whole too (kazoo drops every watch when the connection is lost, and sets none again).

Being the only task that reads and applies, it never lets a read overtake a newer one; and a partition state read
that is older than the image's (by leader epoch, then partition epoch) is not taken (``not_older``). A state znode
that is gone reads as leader -1 (the image keeps a newer state); one that cannot be read is skipped with a warning,
the others are followed. What a failed pass had to read, whole topics and partitions, stays marked for the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent

from rill.metadata import zk_layout as zl
from rill.metadata.store import TopicState
from rill.metadata.zk_image import holds_partitions, not_older, read_states, read_topic_versioned

log = logging.getLogger("rill.metadata.zookeeper")

RETRY_BACKOFF_S = 0.5


class ZkFollower:
    """Following the topics in ZooKeeper, for ``ZkMetadataStore``, which provides the image and applies deltas."""

    zk: KazooClient
    _topics: dict[str, TopicState]
    _assignment_versions: dict[str, int]
    _applied: asyncio.Condition
    _wake: asyncio.Event
    _dirty_cluster: bool
    _dirty_topics: set[str]  # to read whole
    _dirty_states: dict[str, set[int]]  # topic -> the partitions whose state znode to read
    _tell_all: bool
    _watched_topics: dict[str, object]
    _from_kazoo: Callable[[Callable[[], None]], None]

    async def _refresh_cluster(self) -> None:
        raise NotImplementedError

    async def _apply(self, changed: list[TopicState], deleted: list[TopicState]) -> None:
        raise NotImplementedError

    def _mark_topic(self, topic: str) -> None:
        def mark() -> None:
            self._dirty_topics.add(topic)
            self._wake.set()

        self._from_kazoo(mark)

    def _mark_state(self, topic: str, partition: int) -> None:
        def mark() -> None:
            self._dirty_states.setdefault(topic, set()).add(partition)
            self._wake.set()

        self._from_kazoo(mark)

    def _on_state_event(self, event: WatchedEvent) -> None:
        """A partition state znode's watch fired (kazoo's thread): mark the partition. Set by every read of the
        znode (``read_states``, ``read_topic_versioned``), each read setting it again, so the watch costs no read of
        its own. A lost connection (kazoo then drops every watch, even when the session goes on) or a session that
        ended fires every watch without a path: the full re-read once connected again sets them again."""
        where = zl.parse_state_path(event.path) if event.path else None
        if where is not None:
            self._mark_state(*where)

    def _watch_topic(self, topic: str) -> None:
        """Watches on one topic's assignment, configs and partition list (kazoo thread); they end once the topic is
        no longer watched with this token (a topic made again gets watches of its own). The partition state znodes'
        watches are set by their reads."""
        token = self._watched_topics[topic]

        def on_change(*_: Any) -> bool:
            self._mark_topic(topic)
            return self._watched_topics.get(topic) is token

        self.zk.DataWatch(zl.topic_path(topic), on_change)
        self.zk.DataWatch(zl.topic_config_path(topic), on_change)
        # Not a lasting watch: one would outlive the topic, waiting for good on a name that may never come back.
        with contextlib.suppress(NoNodeError):
            self.zk.ChildrenWatch(zl.partitions_path(topic), lambda _children: on_change())

    async def _follow(self) -> None:
        """Apply what the watches marked, and the full re-read after a new session, in order, until cancelled: the
        only task that reads and applies, so that a read never overtakes a newer one. What a failed pass had to do
        stays marked for the next."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            topics: set[str] = set()
            states: dict[str, set[int]] = {}
            tell_all = False
            try:
                if self._dirty_cluster:
                    self._dirty_cluster = False
                    await self._refresh_cluster()
                tell_all, self._tell_all = self._tell_all, False
                topics, self._dirty_topics = self._dirty_topics, set()
                states, self._dirty_states = self._dirty_states, {}
                if tell_all:
                    await self._refresh_topics(sorted(topics | set(states) | set(self._topics)), tell_all=True)
                else:
                    # A topic the image lacks, or lacks one of the partitions of, is read whole.
                    topics |= {t for t, ps in states.items() if t not in self._topics
                               or not holds_partitions(self._topics[t], ps)}  # fmt: skip
                    if topics:
                        await self._refresh_topics(sorted(topics))
                    partial = {t: ps for t, ps in states.items() if t not in topics and t in self._topics}
                    if partial:
                        await self._refresh_states(partial)
            except Exception:
                log.exception("following the cluster metadata in ZooKeeper failed; retrying")
                self._dirty_cluster = True
                self._tell_all |= tell_all
                self._dirty_topics |= topics
                for t, ps in states.items():
                    self._dirty_states.setdefault(t, set()).update(ps)
                await asyncio.sleep(RETRY_BACKOFF_S)
                self._wake.set()

    async def _refresh_topics(self, names: list[str], *, tell_all: bool = False) -> None:
        """Read ``names`` whole and apply what changed (with ``tell_all``, tell every topic read, changed or not)."""
        versioned = await asyncio.to_thread(self._read_topics, names)
        read = {n: None if v is None else not_older(self._topics.get(n), v[0]) for n, v in versioned.items()}
        changed = [t for n, t in read.items() if t is not None and (tell_all or self._topics.get(n) != t)]
        deleted = [self._topics[n] for n, t in read.items() if t is None and n in self._topics]
        # A topic deleted and made again under its name: the old one goes first.
        deleted += [self._topics[t.name] for t in changed if t.name in self._topics
                    and self._topics[t.name].topic_id != t.topic_id]  # fmt: skip
        if changed or deleted:
            await self._apply(changed, deleted)
        await self._note_assignment_versions(versioned)

    async def _refresh_states(self, marked: Mapping[str, set[int]]) -> None:
        """Read the marked partition states of topics the image holds (with each of those partitions) and apply
        the topics that changed: the image's topic with those partitions replaced, none going back."""
        current = {t: self._topics[t] for t in marked}
        read = await asyncio.to_thread(
            lambda: {t: read_states(self.zk, current[t], sorted(ps), self._on_state_event) for t, ps in marked.items()}
        )
        # Only this task changes the image: ``current`` is still what it holds.
        changed = [new for t, r in read.items() if (new := not_older(current[t], r)) != current[t]]
        if changed:
            await self._apply(changed, [])

    def _read_topics(self, names: list[str]) -> dict[str, tuple[TopicState, int] | None]:
        """Each topic read (None: gone); a topic whose znodes cannot be read is left out (the image keeps what it
        had of it), so that one topic written by another tool holds no other topic up."""
        out: dict[str, tuple[TopicState, int] | None] = {}
        for n in names:
            try:
                out[n] = read_topic_versioned(self.zk, n, self._on_state_event, self._topics.get(n))
            except zl.MalformedZnode as e:
                log.warning("Topic %s skipped: its znodes cannot be read (%s)", n, e)
        return out

    async def _note_assignment_versions(self, versioned: Mapping[str, tuple[TopicState, int] | None]) -> None:
        """Record the assignment versions the image now shows and wake the changes waiting for one (a write that
        left the topic's state as it was changes no state, but moves its version)."""
        for name, v in versioned.items():
            if v is None:
                self._assignment_versions.pop(name, None)
            else:
                self._assignment_versions[name] = v[1]
        async with self._applied:
            self._applied.notify_all()
