"""The consumer group protocol of KIP-848: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69). The
work is done by the consumer group coordinator (``GroupCoordinator.consumer``)."""

from __future__ import annotations

import uuid
from typing import Any

from rill.api._authorized import AclOperation, ResourceType, authorize, authorized_operations
from rill.api.context import RequestContext
from rill.api.groups import writing_coordinator_of
from rill.api.registry import Body, handler
from rill.api.share_group_admin import is_share_group
from rill.coordinator.group.consumer_group import Assignment, ConsumerGroup
from rill.coordinator.group.consumer_group_heartbeat import HeartbeatRequest
from rill.errors import ErrorCode
from rill.protocol import ApiKey


def _owned(entries: list[Body] | None) -> dict[uuid.UUID, list[int]] | None:
    if entries is None:
        return None
    owned: dict[uuid.UUID, list[int]] = {}
    for e in entries:
        owned.setdefault(e["topic_id"], []).extend(e["partitions"])
    return owned


@handler(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
async def handle_consumer_group_heartbeat(ctx: RequestContext, request: Body) -> Body:
    def refuse(error: ErrorCode, message: str | None = None) -> Body:
        return {"throttle_time_ms": 0, "error_code": error, "error_message": message, "member_id": None,
                "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}  # fmt: skip

    group_id = request["group_id"]
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return refuse(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    names = request.get("subscribed_topic_names")
    if names is not None:
        denied = [n for n in names if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, n, False)]
        if denied:
            return refuse(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"Topics not authorized: {', '.join(sorted(denied))}")
    coordinator = await writing_coordinator_of(ctx)
    if coordinator is None:
        return refuse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if is_share_group(ctx, group_id):
        return refuse(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
    result = await coordinator.consumer.heartbeat(
        HeartbeatRequest(
            group_id=group_id,
            member_id=request["member_id"],
            member_epoch=request["member_epoch"],
            instance_id=request.get("instance_id"),
            rack_id=request.get("rack_id"),
            rebalance_timeout_ms=request.get("rebalance_timeout_ms", -1),
            subscribed_topic_names=names,
            subscribed_topic_regex=request.get("subscribed_topic_regex"),
            server_assignor=request.get("server_assignor"),
            owned=_owned(request.get("topic_partitions")),
            client_id=ctx.client_id or "",
            client_host=f"/{ctx.client_host}",
        )
    )
    if result.error != ErrorCode.NO_ERROR:
        return refuse(result.error, result.message)
    assignment = None
    if result.assignment is not None:
        assignment = {
            "topic_partitions": [
                {"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(result.assignment.items(), key=str)
            ]
        }
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NO_ERROR,
        "error_message": None,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval_ms": result.heartbeat_interval_ms,
        "assignment": assignment,
    }


def _described(ctx: RequestContext, assignment: Assignment) -> Body:
    entries = []
    for topic_id, partitions in assignment.items():
        topic = ctx.services.metadata.topic_by_id(topic_id)
        entries.append({"topic_id": topic_id, "topic_name": topic.name if topic is not None else "",
                        "partitions": sorted(partitions)})  # fmt: skip
    entries.sort(key=lambda e: (e["topic_name"], str(e["topic_id"])))
    return {"topic_partitions": entries}


def describe_group(ctx: RequestContext, group: ConsumerGroup, include_operations: bool) -> Body:
    members = []
    for member in sorted(group.members.values(), key=lambda m: m.member_id):
        members.append(
            {
                "member_id": member.member_id,
                "instance_id": member.instance_id,
                "rack_id": member.rack_id,
                "member_epoch": member.member_epoch,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "subscribed_topic_names": list(member.subscribed_topic_names),
                "subscribed_topic_regex": member.subscribed_topic_regex,
                "assignment": _described(ctx, member.assigned),
                "target_assignment": _described(ctx, group.target.get(member.member_id, {})),
                "member_type": 0 if member.classic is not None else 1,  # the protocol it uses (v1+)
            }
        )
    return {
        "error_code": ErrorCode.NO_ERROR,
        "error_message": None,
        "group_id": group.group_id,
        "group_state": group.state.value,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor_name": group.assignor_name,
        "members": members,
        "authorized_operations": authorized_operations("group", include_operations, ctx, group.group_id),
    }


@handler(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1)
async def handle_consumer_group_describe(ctx: RequestContext, request: Body) -> Body:
    coordinator: Any = ctx.services.group_coordinator
    described = []
    for group_id in request["group_ids"]:

        def error(code: ErrorCode, message: str | None = None, gid: str = group_id) -> Body:
            return {"error_code": code, "error_message": message, "group_id": gid, "group_state": "",
                    "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": []}  # fmt: skip

        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(error(ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        if coordinator is None:
            described.append(error(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        if (code := coordinator.not_serving(group_id)) is not None:
            described.append(error(code))
            continue
        group = coordinator.consumer.groups.get(group_id)
        if group is None:
            classic = group_id in coordinator.groups
            message = f"Group {group_id} is not a consumer group." if classic else f"Group {group_id} not found."
            described.append(error(ErrorCode.GROUP_ID_NOT_FOUND, message))
            continue
        described.append(describe_group(ctx, group, bool(request.get("include_authorized_operations"))))
    return {"throttle_time_ms": 0, "groups": described}
