"""Keeping the target's topics like the source's: created with the same partition count and topic configs,
partitions added when the source adds some, configs copied when they change (MirrorMaker 2's topic and config
sync, with its default of leaving some configs to the target cluster)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# Configs that belong to the target cluster's own operation, not to the data (MirrorMaker 2 leaves them out too).
EXCLUDED_CONFIGS = frozenset({
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms",
    "message.timestamp.type",
    "unclean.leader.election.enable",
    "min.insync.replicas",
})  # fmt: skip
TIMEOUT_S = 15.0


def is_mirrorable(topic: str) -> bool:
    """Internal topics (``__consumer_offsets``, ``__transaction_state``, ...) and mirrors' own topics are never
    copied, whatever the pattern says (copying a mirror's state would loop between two clusters)."""
    return not topic.startswith("__") and not topic.startswith("mirror.") and topic != "_schemas"


def matching_topics(names: Iterable[str], pattern: re.Pattern[str]) -> list[str]:
    return sorted(t for t in names if is_mirrorable(t) and pattern.fullmatch(t))


@dataclass(frozen=True, slots=True)
class TopicShape:
    partitions: int
    configs: dict[str, str]


def source_shapes(admin: Any, topics: list[str]) -> dict[str, TopicShape]:
    """Partition counts and the topic-level configs set on the source (not broker defaults)."""
    from confluent_kafka.admin import ConfigResource, ConfigSource  # type: ignore[attr-defined]

    metadata = admin.list_topics(timeout=TIMEOUT_S).topics
    shapes: dict[str, TopicShape] = {}
    if not topics:
        return shapes
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics if t in metadata]
    described = admin.describe_configs(resources, request_timeout=TIMEOUT_S) if resources else {}
    for resource, future in described.items():
        entries = future.result(TIMEOUT_S)
        configs = {
            name: entry.value
            for name, entry in entries.items()
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            and name not in EXCLUDED_CONFIGS
            and entry.value is not None
        }
        shapes[resource.name] = TopicShape(len(metadata[resource.name].partitions), configs)
    return shapes


def sync_topics(source_admin: Any, target_admin: Any, topics: list[str], target_name: Any) -> dict[str, int]:
    """Create missing target topics, add partitions the source has gained, and copy changed configs. Returns
    the partition count of each source topic. ``target_name(topic)`` names the copy on the target."""
    from confluent_kafka.admin import NewPartitions, NewTopic  # type: ignore[attr-defined]

    shapes = source_shapes(source_admin, topics)
    existing = target_admin.list_topics(timeout=TIMEOUT_S).topics
    create = [
        NewTopic(target_name(t), shape.partitions, config=shape.configs)
        for t, shape in shapes.items()
        if target_name(t) not in existing
    ]
    for name, future in (target_admin.create_topics(create, request_timeout=TIMEOUT_S).items() if create else ()):
        try:
            future.result(TIMEOUT_S)
            log.info("created %s on the target", name)
        except Exception as e:  # another mirror process may have created it at the same moment
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise
    grow = [
        NewPartitions(target_name(t), shape.partitions)
        for t, shape in shapes.items()
        if target_name(t) in existing and len(existing[target_name(t)].partitions) < shape.partitions
    ]
    for name, future in (target_admin.create_partitions(grow, request_timeout=TIMEOUT_S).items() if grow else ()):
        future.result(TIMEOUT_S)
        log.info("added partitions to %s on the target", name)
    _sync_configs(target_admin, {target_name(t): s for t, s in shapes.items() if target_name(t) in existing})
    return {t: s.partitions for t, s in shapes.items()}


def _sync_configs(target_admin: Any, shapes: dict[str, TopicShape]) -> None:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
    )

    if not shapes:
        return
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in shapes]
    current: dict[str, dict[str, str]] = {}
    for resource, future in target_admin.describe_configs(resources, request_timeout=TIMEOUT_S).items():
        entries = future.result(TIMEOUT_S)
        dynamic = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        current[resource.name] = {n: e.value for n, e in entries.items() if e.source == dynamic}
    changes = []
    for topic, shape in shapes.items():
        ops = [
            ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET)
            for n, v in shape.configs.items()
            if current.get(topic, {}).get(n) != v
        ]
        if ops:
            changes.append(ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=ops))
    for resource, future in (target_admin.incremental_alter_configs(changes).items() if changes else ()):
        future.result(TIMEOUT_S)
        log.info("copied configs of %s to the target", resource.name)
