"""ListConfigResources (74), as Kafka 4.1+ serves it (KIP-1142): v0 (ListClientMetricsResources of KIP-714) lists
the client metrics subscriptions; v1 lists the config resources of the asked types (none asked: every type it
lists): topics, this broker (as BROKER and as BROKER_LOGGER), the client metrics subscriptions and the groups
with configs of their own. A type it does not list is UNSUPPORTED_VERSION. Needs DESCRIBE_CONFIGS on the
cluster (``rill.api._authorized.CLUSTER_CHECKS``)."""

from __future__ import annotations

from rill.api._group_configs import GROUP
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.telemetry.subscriptions import CLIENT_METRICS

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
LISTED_TYPES = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)


@handler(ApiKey.LIST_CONFIG_RESOURCES, 0, 1)
async def handle_list_config_resources(ctx: RequestContext, request: Body) -> Body:
    asked = set(request.get("resource_types") or ()) if ctx.api_version >= 1 else {CLIENT_METRICS}
    if any(t not in LISTED_TYPES for t in asked):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.UNSUPPORTED_VERSION, "config_resources": []}
    wanted = asked or set(LISTED_TYPES)
    store = ctx.services.metadata
    found: list[tuple[str, int]] = []
    if CLIENT_METRICS in wanted:
        found += [(name, CLIENT_METRICS) for name in sorted(store.client_metrics_configs())]
    if TOPIC in wanted:
        found += [(name, TOPIC) for name in sorted(store.topics())]
    if BROKER in wanted:
        found.append((str(ctx.services.node_id), BROKER))
    if BROKER_LOGGER in wanted:
        found.append((str(ctx.services.node_id), BROKER_LOGGER))
    if GROUP in wanted:
        found += [(name, GROUP) for name in store.groups_with_configs()]
    resources = [{"resource_name": name, "resource_type": rtype} for name, rtype in found]
    return {"throttle_time_ms": 0, "error_code": 0, "config_resources": resources}
