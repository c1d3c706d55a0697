"""Configs of groups (GROUP resources of DescribeConfigs, AlterConfigs, IncrementalAlterConfigs), as Kafka 4 has
them: ``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms`` override the broker's
``group.consumer.*`` settings for one group, within the broker's ``group.consumer.min.*``/``max.*`` bounds;
``share.auto.offset.reset`` and ``share.isolation.level`` say where a share group starts reading a partition and
whether it delivers records of aborted transactions (``rill.coordinator.share.share_group_config``). They are
kept in the cluster's metadata, so they apply on whichever broker coordinates the group or leads its partitions."""

from __future__ import annotations

from collections.abc import Mapping

from rill.api.context import RequestContext
from rill.config import ConfigEntry, ConfigSource, ConfigType
from rill.coordinator.share import share_group_config
from rill.coordinator.share.share_group_config import ShareGroupConfigError
from rill.errors import ErrorCode, KafkaError

GROUP = 32
GROUP_CONFIGS = {
    "consumer.session.timeout.ms": "The timeout to detect client failures when using the consumer group protocol.",
    "consumer.heartbeat.interval.ms": "The heartbeat interval given to the members of a consumer group.",
}
SHARE_GROUP_CONFIGS = {  # name -> (default, doc)
    share_group_config.AUTO_OFFSET_RESET: (
        share_group_config.AUTO_OFFSET_RESET_DEFAULT,
        "The strategy to initialize the share-partition start offset: earliest, latest, or "
        "by_duration:<duration> (an ISO-8601 duration, PnDTnHnMn.nS, not negative).",
    ),
    share_group_config.ISOLATION_LEVEL: (
        share_group_config.ISOLATION_LEVEL_DEFAULT,
        "Whether the share group delivers only committed transactional records (read_committed) or all of them "
        "(read_uncommitted).",
    ),
}


def _broker_value(ctx: RequestContext, name: str, bound: str = "") -> int:
    setting = name.removeprefix("consumer.")
    return int(ctx.services.config.get(f"group.consumer.{bound}{setting}"))


def group_entries(ctx: RequestContext, group_id: str) -> list[ConfigEntry]:
    """The group's configs: its own values, or the broker's (DEFAULT_CONFIG)."""
    own = ctx.services.metadata.group_configs(group_id)
    entries = []
    for name, doc in GROUP_CONFIGS.items():
        if name in own:
            value, source = own[name], ConfigSource.GROUP_CONFIG
        else:
            value, source = str(_broker_value(ctx, name)), ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(name, value, source, False, False, ConfigType.INT, (), doc))
    for name, (default, doc) in SHARE_GROUP_CONFIGS.items():
        if name in own:
            value, source = own[name], ConfigSource.GROUP_CONFIG
        else:
            value, source = default, ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(name, value, source, False, False, ConfigType.STRING, (), doc))
    return entries


async def apply_group_configs(
    ctx: RequestContext, group_id: str, new: Mapping[str, str], validate_only: bool
) -> None:
    """Replace a group's configs with ``new``, every name and value checked first (INVALID_CONFIG)."""
    if not group_id:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "the group id is empty")
    for name, value in new.items():
        if name in SHARE_GROUP_CONFIGS:
            try:
                share_group_config.validate(name, value)
            except ShareGroupConfigError as e:
                raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
            continue
        if name not in GROUP_CONFIGS:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
        try:
            number = int(value)
        except ValueError:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}") from None
        low, high = _broker_value(ctx, name, "min."), _broker_value(ctx, name, "max.")
        if not low <= number <= high:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"{name} must be between group.consumer.min.{name.removeprefix('consumer.')} ({low}) "
                             f"and group.consumer.max.{name.removeprefix('consumer.')} ({high})")  # fmt: skip
    if not validate_only:
        await ctx.services.metadata.set_group_configs(group_id, dict(new))
