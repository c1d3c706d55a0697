"""Group membership APIs: FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14), DescribeGroups (15), ListGroups (16), DeleteGroups (42). The work is done by the group
coordinator; these handlers translate between request bodies and its calls."""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import logging
from typing import Any

from rill.api._authorized import (
    AclOperation,
    ResourceType,
    authorize,
    authorize_cluster,
    authorized_operations,
)
from rill.api._endpoints import broker_endpoints
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.api.share_group_admin import delete_share_groups, is_share_group, list_share_groups
from rill.errors import ErrorCode, KafkaError
from rill.metadata.store import OFFSETS_TOPIC, SHARE_GROUP_STATE_TOPIC, TRANSACTION_STATE_TOPIC
from rill.protocol import ApiKey

log = logging.getLogger(__name__)

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2
CLASSIC_GROUP_TYPE = "classic"
CONSUMER_GROUP_TYPE = "consumer"
CONSUMER_PROTOCOL_TYPE = "consumer"
SHARE_GROUP_TYPE = "share"


def coordinator_of(ctx: RequestContext) -> Any:
    """The broker's group coordinator (None while it is not running)."""
    return ctx.services.group_coordinator


async def writing_coordinator_of(ctx: RequestContext) -> Any:
    """The group coordinator for a request that writes group state (JoinGroup, SyncGroup, OffsetCommit), with
    ``__consumer_offsets`` created first when a client came without a FindCoordinator (which creates it). When
    it cannot be created, the write answers with the coordinator's error."""
    coordinator = ctx.services.group_coordinator
    if coordinator is not None and coordinator.active:
        with contextlib.suppress(KafkaError):
            await coordinator.manager.maybe_create_offsets_topic()
    return coordinator


def may_read_group(ctx: RequestContext, group_id: str) -> bool:
    return authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id)


def _client_host(ctx: RequestContext) -> str:
    return f"/{ctx.client_host}"


# -- FindCoordinator -----------------------------------------------------------------------------------------


async def _find_one(ctx: RequestContext, key: str, key_type: int) -> tuple[ErrorCode, str | None, int, str, int]:
    """(error, message, node id, host, port) for one coordinator key."""
    if key_type == GROUP_KEY_TYPE and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None, -1, "", -1
    if key_type == TRANSACTION_KEY_TYPE and not authorize(
        ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
    ):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None, -1, "", -1
    if key_type == SHARE_KEY_TYPE:
        return await _find_share_coordinator(ctx, key)
    coordinator = coordinator_of(ctx)
    if key_type == TRANSACTION_KEY_TYPE:
        return await _find_transaction_coordinator(ctx, key)
    if key_type != GROUP_KEY_TYPE:
        return ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}", -1, "", -1
    if coordinator is None or not coordinator.active:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None, -1, "", -1
    try:
        await coordinator.manager.maybe_create_offsets_topic()
    except KafkaError as e:  # e.g. no disk space for it: retriable, as Kafka answers until the topic exists
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"cannot create __consumer_offsets: {e.message}", -1, "", -1
    unavailable = coordinator.manager.unavailable_reason(key)
    if unavailable is not None:  # Kafka would have taken the partition offline: clients back off and ask again
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, unavailable, -1, "", -1
    # The coordinator of a group is the leader of its partition of __consumer_offsets.
    store = ctx.services.metadata
    topic = store.topic(OFFSETS_TOPIC)
    partition = coordinator.partition_for(key)
    node_id = ctx.services.node_id
    if topic is not None and partition < len(topic.partitions):
        node_id = topic.partitions[partition].leader
    for broker in broker_endpoints(ctx):
        if broker["node_id"] == node_id:
            return ErrorCode.NO_ERROR, None, node_id, broker["host"], broker["port"]
    return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC}-{partition} has no live leader", -1, "", -1


async def _find_transaction_coordinator(ctx: RequestContext, key: str) -> tuple[ErrorCode, str | None, int, str, int]:
    """The coordinator of a transactional id: the leader of its partition of ``__transaction_state`` (created
    on the first lookup)."""
    coordinator = ctx.services.txn_coordinator
    if not key:
        return ErrorCode.INVALID_REQUEST, "the transactional id is empty", -1, "", -1
    if coordinator is None or not coordinator.active:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None, -1, "", -1
    try:
        await coordinator.manager.maybe_create_topic()
    except KafkaError as e:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"cannot create {TRANSACTION_STATE_TOPIC}: {e.message}", -1, "", -1
    node_id = coordinator.manager.leader_of(key)
    for broker in ctx.services.metadata.brokers():
        if broker.node_id == node_id:
            return ErrorCode.NO_ERROR, None, node_id, broker.host, broker.port
    partition = coordinator.manager.partition_for(key)
    return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{TRANSACTION_STATE_TOPIC}-{partition} has no live leader", -1, "", -1


async def _find_share_coordinator(ctx: RequestContext, key: str) -> tuple[ErrorCode, str | None, int, str, int]:
    """The share coordinator of a share partition, keyed ``groupId:topicId:partition``: the leader of its
    partition of ``__share_group_state`` (created on the first lookup). Brokers ask it: CLUSTER_ACTION."""
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, -1, "", -1
    if ctx.api_version < 6:
        return ErrorCode.INVALID_REQUEST, "key type SHARE needs FindCoordinator v6", -1, "", -1
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not parts[0] or not parts[2].isdigit() or not _is_topic_id(parts[1]):
        return ErrorCode.INVALID_REQUEST, f"{key!r} is not a share coordinator key (groupId:topicId:partition)", \
            -1, "", -1
    coordinator = ctx.services.share_coordinator
    if coordinator is None or not coordinator.active:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None, -1, "", -1
    try:
        await coordinator.maybe_create_topic()
    except KafkaError as e:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"cannot create {SHARE_GROUP_STATE_TOPIC}: {e.message}", \
            -1, "", -1
    partition = coordinator.partition_for_coordinator_key(key)
    node_id = coordinator.leader_of(partition)
    for broker in broker_endpoints(ctx):
        if broker["node_id"] == node_id:
            return ErrorCode.NO_ERROR, None, node_id, broker["host"], broker["port"]
    return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{SHARE_GROUP_STATE_TOPIC}-{partition} has no live leader", \
        -1, "", -1


def _is_topic_id(text: str) -> bool:
    """Whether ``text`` is a topic id as Kafka prints one (URL-safe base64 of its 16 bytes, no padding)."""
    try:
        return len(base64.urlsafe_b64decode(text + "==")) == 16
    except (ValueError, binascii.Error):
        return False


@handler(ApiKey.FIND_COORDINATOR, 0, 6)
async def handle_find_coordinator(ctx: RequestContext, request: Body) -> Body:
    key_type = request.get("key_type", GROUP_KEY_TYPE)
    if ctx.api_version >= 4:
        coordinators = []
        for key in request.get("coordinator_keys", []):
            error, message, node_id, host, port = await _find_one(ctx, key, key_type)
            coordinators.append(
                {
                    "key": key,
                    "node_id": node_id,
                    "host": host,
                    "port": port,
                    "error_code": error,
                    "error_message": message,
                }
            )
        return {"throttle_time_ms": 0, "coordinators": coordinators}
    error, message, node_id, host, port = await _find_one(ctx, request["key"], key_type)
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "error_message": message,
        "node_id": node_id,
        "host": host,
        "port": port,
    }


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ---------------------------------------------------------


@handler(ApiKey.JOIN_GROUP, 0, 9)
async def handle_join_group(ctx: RequestContext, request: Body) -> Body:
    version = ctx.api_version
    member_id = request["member_id"]
    if not may_read_group(ctx, request["group_id"]):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "member_id": member_id,
                "protocol_name": None if version >= 7 else "", "leader": "", "generation_id": -1}  # fmt: skip
    coordinator = await writing_coordinator_of(ctx)
    if coordinator is None:
        return {
            "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
            "member_id": member_id,
            "protocol_name": None if version >= 7 else "",
            "leader": "",
        }
    if is_share_group(ctx, request["group_id"]):
        return {"error_code": ErrorCode.GROUP_ID_NOT_FOUND, "member_id": member_id,
                "protocol_name": None if version >= 7 else "", "leader": "", "generation_id": -1}  # fmt: skip
    if coordinator.consumer.is_consumer_group(request["group_id"]) and not coordinator.consumer.has_members(
        request["group_id"]
    ):
        # An empty group of the consumer protocol becomes a classic group (its records are deleted, its committed
        # offsets kept), as in Kafka; one with members serves the classic member (GroupCoordinator.join_group).
        converted = await coordinator.consumer.delete_group(request["group_id"])
        if converted not in (ErrorCode.NO_ERROR, ErrorCode.NON_EMPTY_GROUP):
            return {"error_code": converted, "member_id": member_id,
                    "protocol_name": None if version >= 7 else "", "leader": "", "generation_id": -1}  # fmt: skip
    session_timeout = request["session_timeout_ms"]
    rebalance_timeout = request.get("rebalance_timeout_ms", -1)
    if rebalance_timeout < 0:
        rebalance_timeout = session_timeout
    result = await coordinator.join_group(
        group_id=request["group_id"],
        member_id=member_id,
        group_instance_id=request.get("group_instance_id"),
        require_known_member_id=version >= 4,
        client_id=ctx.client_id or "",
        client_host=_client_host(ctx),
        rebalance_timeout_ms=rebalance_timeout,
        session_timeout_ms=session_timeout,
        protocol_type=request["protocol_type"],
        protocols=[(p["name"], bytes(p["metadata"])) for p in request["protocols"]],
        reason=request.get("reason"),
    )
    protocol_name = result.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": protocol_name,
        "leader": result.leader_id,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
            for m in result.members
        ],
    }


@handler(ApiKey.SYNC_GROUP, 0, 5)
async def handle_sync_group(ctx: RequestContext, request: Body) -> Body:
    if not may_read_group(ctx, request["group_id"]):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "assignment": b""}
    coordinator = await writing_coordinator_of(ctx)
    if coordinator is None:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "assignment": b""}
    result = await coordinator.sync_group(
        group_id=request["group_id"],
        generation_id=request["generation_id"],
        member_id=request["member_id"],
        group_instance_id=request.get("group_instance_id"),
        protocol_type=request.get("protocol_type"),
        protocol_name=request.get("protocol_name"),
        assignments={a["member_id"]: bytes(a["assignment"]) for a in request["assignments"]},
    )
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }


@handler(ApiKey.HEARTBEAT, 0, 4)
async def handle_heartbeat(ctx: RequestContext, request: Body) -> Body:
    if not may_read_group(ctx, request["group_id"]):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    coordinator = coordinator_of(ctx)
    if coordinator is None:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    error = coordinator.heartbeat(
        request["group_id"], request["member_id"], request.get("group_instance_id"), request["generation_id"]
    )
    return {"throttle_time_ms": 0, "error_code": error}


@handler(ApiKey.LEAVE_GROUP, 0, 5)
async def handle_leave_group(ctx: RequestContext, request: Body) -> Body:
    if not may_read_group(ctx, request["group_id"]):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "members": []}
    coordinator = coordinator_of(ctx)
    if coordinator is None:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "members": []}
    if ctx.api_version >= 3:
        leaving = [(m["member_id"], m.get("group_instance_id"), m.get("reason")) for m in request["members"]]
    else:
        leaving = [(request["member_id"], None, None)]
    group_id = request["group_id"]
    async with coordinator.consumer.lock(group_id):  # a group changing protocol: before or after, never during
        if coordinator.not_serving(group_id) is None and coordinator.consumer.is_consumer_group(group_id):
            error, results = ErrorCode.NO_ERROR, await coordinator.consumer.classic_leave(group_id, leaving)
        else:
            error, results = coordinator.leave_group(group_id, leaving)
    if ctx.api_version < 3 and error == ErrorCode.NO_ERROR and results:
        error = results[0][2]
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "members": [
            {"member_id": member_id, "group_instance_id": instance_id, "error_code": code}
            for member_id, instance_id, code in results
        ],
    }


# -- ListGroups / DescribeGroups / DeleteGroups --------------------------------------------------------------


@handler(ApiKey.LIST_GROUPS, 0, 5)
async def handle_list_groups(ctx: RequestContext, request: Body) -> Body:
    coordinator = coordinator_of(ctx)
    if coordinator is None:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "groups": []}
    types = {t.lower() for t in request.get("types_filter") or []}
    states = {s.lower() for s in request.get("states_filter") or []}
    error, groups = ErrorCode.NO_ERROR, []
    if not types or types & {CLASSIC_GROUP_TYPE, CONSUMER_GROUP_TYPE}:
        error, classic = coordinator.list_groups(set(request.get("states_filter") or []) or None)
        consumer = coordinator.consumer.groups
        groups = [(g, p, s, CLASSIC_GROUP_TYPE) for g, p, s in classic if g not in consumer]
        if error == ErrorCode.NO_ERROR:
            for group in consumer.values():
                state = group.state.value
                if not states or state.lower() in states:
                    groups.append((group.group_id, CONSUMER_PROTOCOL_TYPE, state, CONSUMER_GROUP_TYPE))
    if not types or SHARE_GROUP_TYPE in types:
        share_states = set(request.get("states_filter") or []) or None
        groups += [(gid, "share", state, SHARE_GROUP_TYPE) for gid, state in list_share_groups(ctx, share_states)]
    if types:
        groups = [g for g in groups if g[3] in types]
    if not authorize_cluster(ctx, AclOperation.DESCRIBE, log_denied=False):  # only the groups the caller may describe
        groups = [g for g in groups if authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g[0], False)]
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "groups": [
            {"group_id": gid, "protocol_type": ptype, "group_state": state, "group_type": gtype}
            for gid, ptype, state, gtype in groups
        ],
    }


@handler(ApiKey.DESCRIBE_GROUPS, 0, 6)
async def handle_describe_groups(ctx: RequestContext, request: Body) -> Body:
    coordinator = coordinator_of(ctx)
    described = []
    for group_id in request["groups"]:
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append({"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "group_id": group_id,
                              "group_state": "", "protocol_type": "", "protocol_data": "", "members": []})  # fmt: skip
            continue
        if coordinator is None:
            described.append(
                {
                    "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    "group_id": group_id,
                    "group_state": "",
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                }
            )
            continue
        summary = coordinator.describe_group(group_id)
        error, message = summary.error, None
        if error == ErrorCode.NO_ERROR and coordinator.consumer.is_consumer_group(group_id):
            # Kafka describes consumer groups with ConsumerGroupDescribe only.
            summary = dataclasses.replace(summary, state="Dead", protocol_type="", protocol="", members=())
            if ctx.api_version >= 6:
                error, message = ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a classic group."
        if summary.state == "Dead" and ctx.api_version >= 6 and error == ErrorCode.NO_ERROR:
            error, message = ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        described.append(
            {
                "error_code": error,
                "error_message": message,
                "authorized_operations": authorized_operations(
                    "group",
                    error == ErrorCode.NO_ERROR and request.get("include_authorized_operations", False),
                    ctx,
                    group_id,
                ),
                "group_id": group_id,
                "group_state": summary.state,
                "protocol_type": summary.protocol_type,
                "protocol_data": summary.protocol,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in summary.members
                ],
            }
        )
    return {"throttle_time_ms": 0, "groups": described}


@handler(ApiKey.DELETE_GROUPS, 0, 2)
async def handle_delete_groups(ctx: RequestContext, request: Body) -> Body:
    coordinator = coordinator_of(ctx)
    names = list(request["groups_names"])
    allowed = [n for n in dict.fromkeys(names) if authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, n)]
    shared = await delete_share_groups(ctx, allowed) if allowed else {}
    allowed = [n for n in allowed if n not in shared]
    if coordinator is None:
        results = dict.fromkeys(allowed, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    else:
        results = {}
        for name in [n for n in allowed if coordinator.consumer.is_consumer_group(n)]:  # KIP-848 groups
            results[name] = await coordinator.consumer.delete_group(name)
            if results[name] == ErrorCode.NO_ERROR and name in coordinator.groups:  # and its offsets
                results[name] = (await coordinator.delete_groups([name]))[name]
        classic = [n for n in allowed if n not in results]
        results.update(await coordinator.delete_groups(classic) if classic else {})
    results.update(shared)
    for name in names:
        results.setdefault(name, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    for name, code in results.items():
        if code == ErrorCode.NO_ERROR:
            log.info("Group %s deleted for %s", name, ctx.client)
    return {
        "throttle_time_ms": 0,
        "results": [{"group_id": name, "error_code": results[name]} for name in dict.fromkeys(names)],
    }
