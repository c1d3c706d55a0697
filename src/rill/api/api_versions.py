"""ApiVersions (18): the versions of every API this broker handles, derived from the handler registry."""

from __future__ import annotations

from rill.api.context import RequestContext
from rill.api.registry import REGISTRY, Body, handler, supported_versions
from rill.protocol import ApiKey


@handler(ApiKey.API_VERSIONS, 0, 4)
async def handle_api_versions(ctx: RequestContext, request: Body) -> Body:
    # A version too new for us is answered by the dispatcher (error 35 in the v0 format).
    if ctx.api_version >= 3:  # kept for the client metrics subscriptions' ``match`` (KIP-714)
        ctx.client_software.name = request.get("client_software_name") or ""
        ctx.client_software.version = request.get("client_software_version") or ""
    return {"error_code": 0, "api_keys": supported_versions(REGISTRY), "throttle_time_ms": 0}
