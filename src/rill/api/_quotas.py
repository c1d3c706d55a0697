"""Client quotas on the request path (Kafka's KafkaApis throttling, KIP-219).

After a handler has answered, the request is measured against the client's quotas: a Produce's request bytes
against ``producer_byte_rate``, the time the request took on the event loop against ``request_percentage``
(a Fetch's response bytes against ``consumer_byte_rate`` are measured by the Fetch handler, which answers a
throttled fetch empty; a ShareFetch's by its handler too, whose throttled response still carries the records it
acquired). When one is exceeded, the response goes back at once with the largest throttle time in
``throttle_time_ms``, and the connection is muted for that long; a throttled Fetch is answered empty (its bytes
taken back from the fetch quota), whichever quota throttled it. Replication (fetches from followers) and the
SASL exchange and the transaction markers brokers send are never throttled; an acks=0 Produce only by its byte rate.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, cast

from rill.api.registry import DeferredBody
from rill.metadata.client_quotas import sanitize
from rill.protocol import ApiKey

if TYPE_CHECKING:
    from rill.api.context import RequestContext
    from rill.api.registry import Body, HandlerFn
    from rill.network.handler import ConnectionInfo
    from rill.quota import ClientQuotaManager, QuotaManagers

EXEMPT = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.WRITE_TXN_MARKERS})
"""The SASL exchange, and requests only brokers send (Kafka's cluster actions)."""
FETCHES = frozenset({ApiKey.FETCH, ApiKey.SHARE_FETCH})
"""The APIs whose responses the fetch quota measures (in their handlers)."""
QUOTA_BYTES = "_quota_bytes"
"""The key of a Fetch response (not encoded) holding the bytes its fetch quota counted."""
NANOS_TO_PERCENTAGE = 100.0 / 1e9
"""A request that keeps the loop busy for one second is 100% of one thread."""


def quota_user(ctx: RequestContext) -> str:
    """The quota user of a request: its connection's principal's name, sanitized as Kafka's Session does."""
    return _sanitized(ctx.principal.name)


@functools.lru_cache(maxsize=4096)
def _sanitized(name: str) -> str:
    return sanitize(name)


def quota_client_id(ctx: RequestContext) -> str:
    return ctx.client_id or ""


def is_follower_fetch(ctx: RequestContext, request: Body) -> bool:
    replica_id = request.get("replica_id", -1)
    if replica_id < 0 and ctx.api_version >= 15:
        replica_id = (request.get("replica_state") or {}).get("replica_id", -1)
    return bool(replica_id >= 0)


class _Timed:
    """Awaits a coroutine and adds up the time its steps ran (not the time it waited)."""

    __slots__ = ("coro", "ns")

    def __init__(self, coro: Awaitable[Any]) -> None:
        self.coro = coro
        self.ns = 0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = cast(Coroutine[Any, Any, Any], self.coro)
        value: Any = None
        error: BaseException | None = None
        while True:
            start = time.perf_counter_ns()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                self.ns += time.perf_counter_ns() - start
                return stop.value
            self.ns += time.perf_counter_ns() - start
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as e:  # handed to the coroutine, as `await` does (a cancellation)
                value, error = None, e


async def handle_with_quotas(
    quotas: QuotaManagers,
    ctx: RequestContext,
    fn: HandlerFn,
    request: Body,
    request_bytes: int,
    conn: ConnectionInfo,
    decode_ns: int,
) -> Body | None:
    """Run the handler and apply the client's quotas to its request (see the module's description)."""
    api_key = ctx.api_key
    request_quota = api_key not in EXEMPT and quotas.request.enabled
    if request_quota:
        timed = _Timed(fn(ctx, request))
        answer = await timed
        loop_ns = timed.ns + decode_ns
    else:
        answer = await fn(ctx, request)
        loop_ns = 0
    # A handler defers its answer only when its context allows it, which it does not under quotas.
    response = await answer.wait if isinstance(answer, DeferredBody) else answer
    if api_key in EXEMPT:
        return response
    throttle, manager = 0, None
    user = client_id = ""
    produce = api_key == ApiKey.PRODUCE
    if produce and quotas.produce.enabled:
        user, client_id = quota_user(ctx), quota_client_id(ctx)
        throttle = quotas.produce.record_and_get_throttle_ms(user, client_id, request_bytes)
        manager = quotas.produce
    elif api_key in FETCHES and response is not None and response.get("throttle_time_ms", 0) > 0:
        user, client_id = quota_user(ctx), quota_client_id(ctx)
        throttle, manager = int(response["throttle_time_ms"]), quotas.fetch
    exempt = (produce and request.get("acks") == 0) or (api_key == ApiKey.FETCH and is_follower_fetch(ctx, request))
    if request_quota and not exempt:
        if not user:
            user, client_id = quota_user(ctx), quota_client_id(ctx)
        request_throttle = quotas.request.record_and_get_throttle_ms(user, client_id, loop_ns * NANOS_TO_PERCENTAGE)
        if request_throttle > throttle:
            throttle, manager = request_throttle, quotas.request
    if api_key == ApiKey.FETCH and response is not None:
        counted = response.pop(QUOTA_BYTES, 0)
        if throttle > 0 and response["responses"]:  # a throttled fetch is answered empty, as Kafka does
            response["responses"] = []
            if counted:
                quotas.fetch.unrecord(user or quota_user(ctx), client_id or quota_client_id(ctx), counted)
    if throttle > 0 and manager is not None:
        _throttle(manager, user, client_id, throttle, response, conn)
    return response


def _throttle(
    manager: ClientQuotaManager, user: str, client_id: str, throttle: int, response: Body | None, conn: ConnectionInfo
) -> None:
    manager.throttle(user, client_id, throttle)
    if response is not None:
        response["throttle_time_ms"] = throttle
    conn.throttle.mute_ms = throttle
