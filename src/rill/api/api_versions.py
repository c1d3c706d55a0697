"""ApiVersions (18): the versions of every API this broker handles, derived from the handler registry."""

from __future__ import annotations

import re

from rill.api.context import RequestContext
from rill.api.registry import REGISTRY, Body, handler, supported_versions
from rill.errors import ErrorCode
from rill.protocol import ApiKey

# A client's software name and version (v3+): letters, digits, '.' and '-', a letter or digit first and last.
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?")


@handler(ApiKey.API_VERSIONS, 0, 4)
async def handle_api_versions(ctx: RequestContext, request: Body) -> Body:
    # A version too new for us is answered by the dispatcher (error 35 in the v0 format).
    if ctx.api_version >= 3:  # kept for the client metrics subscriptions' ``match`` (KIP-714)
        name = request.get("client_software_name") or ""
        version = request.get("client_software_version") or ""
        if not (_SOFTWARE.fullmatch(name) and _SOFTWARE.fullmatch(version)):  # Kafka's check
            return {"error_code": ErrorCode.INVALID_REQUEST, "api_keys": [], "throttle_time_ms": 0}
        ctx.client_software.name = name
        ctx.client_software.version = version
    return {"error_code": 0, "api_keys": supported_versions(REGISTRY), "throttle_time_ms": 0}
