"""Consumer group offsets carried to the target (MirrorMaker 2's checkpoints with ``sync.group.offsets``): the
source group's committed offsets, translated through the offset syncs, are committed for the same group on the
target, so the group can fail over to the target and resume where it was, without missing records.

A target group that has members is left alone (its consumers own its offsets), and a translated offset never
moves a target group backwards (it may have consumed on the target already)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from rill.mirror.offset_sync import PartitionSyncs

log = logging.getLogger(__name__)

TIMEOUT_S = 15.0
ACTIVE_STATES = frozenset({"STABLE", "PREPARING_REBALANCE", "COMPLETING_REBALANCE"})


def source_groups(admin: Any, pattern: re.Pattern[str], exclude: set[str]) -> list[str]:
    listed = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    return sorted(g.group_id for g in listed.valid if g.group_id not in exclude and pattern.fullmatch(g.group_id))


def committed_offsets(admin: Any, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT_S)
    listed = result[group].result(TIMEOUT_S)
    return {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions if tp.offset >= 0 and not tp.error}


def _target_state(admin: Any, group: str) -> str:
    described = admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
    return str(described.state.name)


def sync_group_offsets(
    source_admin: Any,
    target_admin: Any,
    groups: list[str],
    syncs: Mapping[tuple[str, int], PartitionSyncs],
    target_name: Callable[[str], str],
) -> int:
    """Translate and commit the groups' offsets for the partitions in ``syncs`` (those this process copies).
    Returns how many partition offsets were written."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    written = 0
    for group in groups:
        source = {tp: off for tp, off in committed_offsets(source_admin, group).items() if tp in syncs}
        if not source:
            continue
        if _target_state(target_admin, group) in ACTIVE_STATES:
            continue
        current = committed_offsets(target_admin, group)
        updates = []
        for (topic, partition), offset in sorted(source.items()):
            translated = syncs[(topic, partition)].translate(offset)
            if translated is None:
                continue
            key = (target_name(topic), partition)
            if current.get(key, -1) >= translated:
                continue
            updates.append(TopicPartition(key[0], partition, translated))
        if not updates:
            continue
        request = [ConsumerGroupTopicPartitions(group, updates)]
        try:
            target_admin.alter_consumer_group_offsets(request, request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
        except Exception as e:  # a member joined meanwhile: its offsets are its own
            log.info("offsets of group %s not written on the target: %s", group, e)
            continue
        written += len(updates)
    return written
