"""The brokers as a client sees them: each at its endpoint for the listener the client connected to
(Kafka's rule; a broker without that listener is left out, as Kafka leaves it out)."""

from __future__ import annotations

from typing import Any

from rill.api.context import RequestContext


def broker_endpoints(ctx: RequestContext, node_key: str = "node_id") -> list[dict[str, Any]]:
    out = []
    for b in ctx.services.metadata.brokers():
        address = b.endpoint(ctx.listener_name)
        if address is not None:
            out.append({node_key: b.node_id, "host": address[0], "port": address[1], "rack": b.rack})
    return out
