"""DescribeCluster (60)."""

from __future__ import annotations

from rill.api._authorized import authorized_operations
from rill.api._endpoints import broker_endpoints
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.errors import ErrorCode
from rill.protocol import ApiKey


@handler(ApiKey.DESCRIBE_CLUSTER, 0, 2)
async def handle_describe_cluster(ctx: RequestContext, request: Body) -> Body:
    store = ctx.services.metadata
    endpoint_type = request.get("endpoint_type", 1)
    if endpoint_type != 1:  # only brokers are described; controllers are not separate nodes here
        return {
            "error_code": ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            "error_message": "only broker endpoints",
            "cluster_id": store.cluster_id,
        }
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": endpoint_type,
        "cluster_id": store.cluster_id,
        "controller_id": store.controller_id,
        "brokers": broker_endpoints(ctx, "broker_id"),
        "cluster_authorized_operations": authorized_operations(
            "cluster", request.get("include_cluster_authorized_operations", False), ctx
        ),
    }
