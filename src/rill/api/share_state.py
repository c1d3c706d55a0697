"""The share coordinator's inter-broker APIs (KIP-932): InitializeShareGroupState (83), ReadShareGroupState (84),
WriteShareGroupState (85), DeleteShareGroupState (86), ReadShareGroupStateSummary (87).

Share-partition leaders send them to the share coordinator of each share partition
(:mod:`rill.coordinator.share.share_persister`); they need CLUSTER_ACTION on the cluster, as Kafka's do
(``CLUSTER_CHECKS``). Each partition is answered on its own: NOT_COORDINATOR when this broker does not lead its
``__share_group_state`` partition, COORDINATOR_LOAD_IN_PROGRESS while it loads it, COORDINATOR_NOT_AVAILABLE
before the topic exists; an empty group id is INVALID_REQUEST for every partition."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.coordinator.share.share_coordinator import ShareCoordinator
from rill.coordinator.share.share_coordinator_shard import (
    DEFAULT_STATE_EPOCH,
    UNINITIALIZED_START_OFFSET,
    PersistedBatch,
    SharePartitionKey,
    WriteRequest,
)
from rill.errors import ErrorCode
from rill.protocol import ApiKey

PartitionCall = Callable[[ShareCoordinator, SharePartitionKey, Body], Awaitable[Body]]


async def _each(ctx: RequestContext, request: Body, call: PartitionCall, defaults: Body) -> Body:
    coordinator: ShareCoordinator | None = ctx.services.share_coordinator
    group_id = request.get("group_id") or ""
    results = []
    for t in request.get("topics") or []:
        parts = []
        for p in t.get("partitions") or []:
            key = SharePartitionKey(group_id, t["topic_id"], p["partition"])
            if not group_id:
                out: Body = {"error_code": ErrorCode.INVALID_REQUEST, "error_message": "The group id must be set."}
            elif coordinator is None:
                out = {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
            else:
                out = await call(coordinator, key, p)
            parts.append({**defaults, "partition": p["partition"], "error_message": None, **out})
        results.append({"topic_id": t["topic_id"], "partitions": parts})
    return {"results": results}


def _code(code: ErrorCode) -> Body:
    return {"error_code": code, "error_message": None if code == ErrorCode.NO_ERROR else code.name}


@handler(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, 0)
async def handle_initialize_share_group_state(ctx: RequestContext, request: Body) -> Body:
    async def call(c: ShareCoordinator, key: SharePartitionKey, p: Body) -> Body:
        return _code(await c.initialize(key, p["state_epoch"], p["start_offset"]))

    return await _each(ctx, request, call, {})


@handler(ApiKey.WRITE_SHARE_GROUP_STATE, 0, 0)
async def handle_write_share_group_state(ctx: RequestContext, request: Body) -> Body:
    async def call(c: ShareCoordinator, key: SharePartitionKey, p: Body) -> Body:
        batches = tuple(PersistedBatch(b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"])
                        for b in p["state_batches"])  # fmt: skip
        if any(b.last_offset < b.first_offset or b.delivery_state not in (0, 2, 4) for b in batches):
            return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": "A state batch is not valid."}
        w = WriteRequest(p["state_epoch"], p["leader_epoch"], p["start_offset"], batches)
        return _code(await c.write(key, w))

    return await _each(ctx, request, call, {})


def _read_body(code: ErrorCode, state: Any, with_batches: bool) -> Body:
    body: Body = {**_code(code), "state_epoch": DEFAULT_STATE_EPOCH, "start_offset": UNINITIALIZED_START_OFFSET}
    if with_batches:
        body["state_batches"] = []
    if state is not None and code == ErrorCode.NO_ERROR:
        body["state_epoch"], body["start_offset"] = state.state_epoch, state.start_offset
        if with_batches:
            body["state_batches"] = [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                                      "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                                     for b in state.batches]  # fmt: skip
    return body


@handler(ApiKey.READ_SHARE_GROUP_STATE, 0, 0)
async def handle_read_share_group_state(ctx: RequestContext, request: Body) -> Body:
    async def call(c: ShareCoordinator, key: SharePartitionKey, p: Body) -> Body:
        code, state = await c.read(key, p["leader_epoch"])
        return _read_body(code, state, True)

    defaults = {"state_epoch": DEFAULT_STATE_EPOCH, "start_offset": UNINITIALIZED_START_OFFSET, "state_batches": []}
    return await _each(ctx, request, call, defaults)


@handler(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, 0)
async def handle_read_share_group_state_summary(ctx: RequestContext, request: Body) -> Body:
    async def call(c: ShareCoordinator, key: SharePartitionKey, p: Body) -> Body:
        code, state = await c.read(key, p["leader_epoch"])
        return _read_body(code, state, False)

    return await _each(ctx, request, call, {"state_epoch": DEFAULT_STATE_EPOCH,
                                            "start_offset": UNINITIALIZED_START_OFFSET})  # fmt: skip


@handler(ApiKey.DELETE_SHARE_GROUP_STATE, 0, 0)
async def handle_delete_share_group_state(ctx: RequestContext, request: Body) -> Body:
    async def call(c: ShareCoordinator, key: SharePartitionKey, p: Body) -> Body:
        return _code(await c.delete(key))

    return await _each(ctx, request, call, {})
