"""GetTelemetrySubscriptions (71) and PushTelemetry (72): client telemetry (KIP-714), answered by the broker's
``rill.telemetry.client_metrics_manager.ClientMetricsManager``. As in Kafka, neither needs an ACL."""

from __future__ import annotations

from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.protocol import ApiKey
from rill.telemetry.client_metrics_manager import ClientInfo


def _client(ctx: RequestContext) -> ClientInfo:
    software = ctx.client_software
    return ClientInfo(ctx.client_id or "", software.name, software.version, ctx.client_host, ctx.client_port)


@handler(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, 0)
async def handle_get_telemetry_subscriptions(ctx: RequestContext, request: Body) -> Body:
    answer = ctx.services.client_metrics.get_subscriptions(request["client_instance_id"], _client(ctx))
    return {"throttle_time_ms": 0, **answer}


@handler(ApiKey.PUSH_TELEMETRY, 0, 0)
async def handle_push_telemetry(ctx: RequestContext, request: Body) -> Body:
    return {"throttle_time_ms": 0, "error_code": ctx.services.client_metrics.push(request, _client(ctx))}
