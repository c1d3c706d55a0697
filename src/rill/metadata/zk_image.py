"""Reading a broker's image of the cluster from ZooKeeper (blocking calls: run them in a worker thread), and
keeping that image from going back.

A partition state read is older than another when its leader epoch is lower, or the same with a lower partition
epoch (the state znode's version): ``not_older`` keeps the newer of the two, so that a read that raced a newer
one (it was answered before a change the image already shows) never undoes it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent

from rill.metadata import zk_layout as zl
from rill.metadata.store import BrokerInfo, PartitionState, TopicState, is_older, valid_stored_configs

log = logging.getLogger(__name__)

Watcher = Callable[[WatchedEvent], None]
ClusterRead = tuple[dict[int, BrokerInfo], int, dict[str, str], dict[str, str], set[str]]


def read_cluster(zk: KazooClient, node_id: int) -> ClusterRead:
    """The live brokers, the controller's id (-1: none), this broker's and the cluster-wide dynamic configs, and
    the topic names."""
    brokers: dict[int, BrokerInfo] = {}
    for child in zk.get_children(zl.BROKER_IDS):
        try:
            data, _ = zk.get(f"{zl.BROKER_IDS}/{child}")
            brokers[int(child)] = zl.decode_broker(int(child), data)
        except NoNodeError:
            continue
        except ValueError as e:  # MalformedZnode, or a child that is not a broker id
            log.warning("Skipped the broker registration %s/%s, which cannot be read: %s", zl.BROKER_IDS, child, e)
    try:
        controller = zl.decode_controller(zk.get(zl.CONTROLLER)[0])
    except NoNodeError:
        controller = -1
    except zl.MalformedZnode as e:
        log.warning("%s cannot be read: %s", zl.CONTROLLER, e)
        controller = -1
    own = read_configs(zk, zl.broker_config_path(node_id))
    default = read_configs(zk, zl.broker_config_path(None))
    return brokers, controller, own, default, set(zk.get_children(zl.TOPICS))


def read_configs(zk: KazooClient, path: str) -> dict[str, str]:
    try:
        return zl.decode_configs(zk.get(path)[0])
    except NoNodeError:
        return {}


def read_topic(zk: KazooClient, name: str) -> TopicState | None:
    """A topic's assignment, partition states and configs; None when it is gone."""
    versioned = read_topic_versioned(zk, name)
    return None if versioned is None else versioned[0]


def read_topic_versioned(zk: KazooClient, name: str, watch: Watcher | None = None, current: TopicState | None = None
                         ) -> tuple[TopicState, int] | None:  # fmt: skip
    """The topic (as ``read_topic``) and the version of its assignment znode, which a reassignment's write
    waits for in the image; None when it is gone. ``MalformedZnode`` when its assignment cannot be read, or a
    partition state that ``current`` (the image's topic) does not hold (the caller keeps what it had of the topic);
    a partition state that cannot be read but that ``current`` holds is kept as ``current`` has it, with a warning.
    Every partition state is read, whichever cannot be: with ``watch``, each read sets it on its znode (on the
    znode's creation when it is not there yet), so that no partition goes unwatched."""
    try:
        data, assignment_stat = zk.get(zl.topic_path(name))
        assignment = zl.decode_assignment(data)
    except NoNodeError:
        return None
    held = {s.partition: s for s in current.partitions} if current and current.topic_id == assignment.topic_id else {}
    parts: list[PartitionState] = []
    malformed: zl.MalformedZnode | None = None
    for p, replicas in sorted(assignment.partitions.items()):
        got = _get_state(zk, zl.state_path(name, p), watch)
        if got is None:  # the controller has not elected its leader yet
            parts.append(PartitionState(p, -1, -1, replicas, (), -1))
            continue
        try:
            s = zl.decode_state(*got)
        except zl.MalformedZnode as e:
            if p not in held:
                malformed = malformed or e
                continue
            log.warning("Partition %s-%d: kept as it was, its state cannot be read (%s)", name, p, e)
            parts.append(dataclasses.replace(held[p], replicas=replicas, adding_replicas=assignment.adding.get(p, ()),
                                             removing_replicas=assignment.removing.get(p, ())))  # fmt: skip
            continue
        parts.append(PartitionState(p, s.leader, s.leader_epoch, replicas, s.isr, s.partition_epoch,
                                    assignment.adding.get(p, ()), assignment.removing.get(p, ())))  # fmt: skip
    if malformed is not None:
        raise malformed
    configs = valid_stored_configs(name, read_configs(zk, zl.topic_config_path(name)))
    return TopicState(name, assignment.topic_id, tuple(parts), configs), assignment_stat.version


def holds_partitions(topic: TopicState, partitions: Iterable[int]) -> bool:
    """Whether ``topic`` (the image's) has each of ``partitions``."""
    return set(partitions) <= {s.partition for s in topic.partitions}


def read_states(zk: KazooClient, current: TopicState, partitions: Iterable[int], watch: Watcher | None = None
                ) -> TopicState:  # fmt: skip
    """``current`` (the image's topic) with the state znodes of ``partitions`` read again (the reads sent at once,
    then their answers taken; with ``watch``, set on each znode): a partition's replicas come from ``current`` (its
    assignment did not change: a change of it marks the whole topic), a state znode that is gone gives leader -1
    (as ``read_topic_versioned``), and one that cannot be read is skipped with a warning (the image keeps what it
    had of that partition, and of the others). Each of ``partitions`` is one of ``current``'s
    (``holds_partitions``)."""
    index = {s.partition: i for i, s in enumerate(current.partitions)}
    parts = list(current.partitions)
    sent = [(p, zl.state_path(current.name, p)) for p in partitions]
    answers = [(p, path, zk.get_async(path, watch=watch)) for p, path in sent]
    for p, path, answer in answers:
        i = index[p]
        old = parts[i]
        try:
            data, stat = answer.get()
            got: tuple[bytes, int] | None = (data, stat.version)
        except NoNodeError:
            got = _get_state(zk, path, watch)
        try:
            if got is None:
                parts[i] = PartitionState(p, -1, -1, old.replicas, (), -1, old.adding_replicas,
                                          old.removing_replicas)  # fmt: skip
                continue
            s = zl.decode_state(*got)
        except zl.MalformedZnode as e:
            log.warning("Partition %s-%d skipped: its state cannot be read (%s)", current.name, p, e)
            continue
        parts[i] = PartitionState(p, s.leader, s.leader_epoch, old.replicas, s.isr, s.partition_epoch,
                                  old.adding_replicas, old.removing_replicas)  # fmt: skip
    return TopicState(current.name, current.topic_id, tuple(parts), current.configs)


def _get_state(zk: KazooClient, path: str, watch: Watcher | None) -> tuple[bytes, int] | None:
    """A partition state znode's data and version, None when it is not there. With ``watch``: set on the znode,
    or on its creation when it is not there (ZooKeeper sets no watch on a read of a znode that is not there)."""
    while True:
        try:
            data, stat = zk.get(path, watch=watch)
            return data, int(stat.version)
        except NoNodeError:
            if watch is None or zk.exists(path, watch=watch) is None:
                return None
            # Made between the two calls: read it (the watch set by exists fires once more, a read too many).


def not_older(current: TopicState | None, read: TopicState) -> TopicState:
    """``read``, with each partition state older than the image's (``current``) replaced by the image's."""
    if current is None or current.topic_id != read.topic_id:
        return read
    kept = {p.partition: p for p in current.partitions}
    parts = []
    for p in read.partitions:
        old = kept.get(p.partition)
        if old is not None and is_older(p, old):
            log.info("Partition %s-%d: kept leader epoch %d, partition epoch %d over an older read (%d, %d)",
                     read.name, p.partition, old.leader_epoch, old.partition_epoch, p.leader_epoch,
                     p.partition_epoch)  # fmt: skip
            p = old
        parts.append(p)
    return TopicState(read.name, read.topic_id, tuple(parts), read.configs)
