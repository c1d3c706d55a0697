"""Client metrics subscriptions as config resources (CLIENT_METRICS, type 16, of DescribeConfigs, AlterConfigs
and IncrementalAlterConfigs; KIP-714): ``metrics``, ``interval.ms`` and ``match``, checked by
``rill.telemetry.subscriptions`` and kept in the cluster's metadata, so that every broker offers them. Altering
them needs ALTER_CONFIGS on the cluster, describing them DESCRIBE_CONFIGS on the cluster, as in Kafka."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from rill.api.context import RequestContext
from rill.config import ConfigEntry, ConfigSource, ConfigType
from rill.errors import ErrorCode, KafkaError
from rill.telemetry.subscriptions import CONFIG_DEFAULTS, CONFIG_DOCS, INTERVAL_MS, parse_subscription

log = logging.getLogger(__name__)


def client_metrics_entries(ctx: RequestContext, name: str) -> list[ConfigEntry]:
    """A subscription's configs: its own values, or the defaults (DEFAULT_CONFIG)."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
    own = ctx.services.metadata.client_metrics_configs().get(name, {})
    entries = []
    for key, doc in CONFIG_DOCS.items():
        if key in own:
            value, source = own[key], ConfigSource.CLIENT_METRICS_CONFIG
        else:
            value, source = CONFIG_DEFAULTS[key], ConfigSource.DEFAULT_CONFIG
        kind = ConfigType.INT if key == INTERVAL_MS else ConfigType.LIST
        entries.append(ConfigEntry(key, value, source, False, False, kind, (), doc))
    return entries


def current_client_metrics(ctx: RequestContext, name: str) -> dict[str, str]:
    return dict(ctx.services.metadata.client_metrics_configs().get(name, {}))


async def apply_client_metrics_configs(
    ctx: RequestContext, name: str, new: Mapping[str, str], validate_only: bool
) -> None:
    """Replace a subscription's configs with ``new`` (none: the subscription is removed), checked first."""
    parse_subscription(name, new)
    if not validate_only:
        await ctx.services.metadata.set_client_metrics_configs(name, dict(new))
        log.info("Client metrics subscription %s set to %s by %s", name, dict(new), ctx.client)
