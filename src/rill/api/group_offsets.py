"""Committed offsets: OffsetCommit (8), OffsetFetch (9) and OffsetDelete (47), answered by the group
coordinator."""

from __future__ import annotations

import time

from rill.api._authorized import AclOperation, ResourceType, authorize, filter_authorized
from rill.api._topics import partition_errors
from rill.api.context import RequestContext
from rill.api.groups import coordinator_of, writing_coordinator_of
from rill.api.registry import Body, handler
from rill.api.share_group_admin import is_share_group
from rill.common import TopicPartition
from rill.coordinator.group.group_metadata import OffsetAndMetadata
from rill.errors import ErrorCode
from rill.protocol import ApiKey


def _partition_exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    state = ctx.services.metadata.topic(topic)
    return state is not None and 0 <= partition < len(state.partitions)


# -- OffsetCommit ------------------------------------------------------------------------------------------


@handler(ApiKey.OFFSET_COMMIT, 0, 9)
async def handle_offset_commit(ctx: RequestContext, request: Body) -> Body:
    coordinator = await writing_coordinator_of(ctx)
    now = int(time.time() * 1000)
    retention = request.get("retention_time_ms", -1)
    errors: dict[TopicPartition, ErrorCode] = {}
    to_commit: dict[TopicPartition, OffsetAndMetadata] = {}
    group_allowed = authorize(ctx, AclOperation.READ, ResourceType.GROUP, request["group_id"])
    for topic in request["topics"]:
        topic_allowed = authorize(ctx, AclOperation.READ, ResourceType.TOPIC, topic["name"])
        for p in topic["partitions"]:
            tp = TopicPartition(topic["name"], p["partition_index"])
            if not group_allowed:
                errors[tp] = ErrorCode.GROUP_AUTHORIZATION_FAILED
                continue
            if not topic_allowed:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if not _partition_exists(ctx, tp.topic, tp.partition):
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            # v2-v4 may ask for a retention time of their own; otherwise offsets.retention.minutes applies.
            to_commit[tp] = OffsetAndMetadata(
                offset=p["committed_offset"],
                leader_epoch=p.get("committed_leader_epoch", -1),
                metadata=p.get("committed_metadata") or "",
                commit_timestamp=now,
                expire_timestamp=now + retention if retention is not None and retention >= 0 else -1,
            )
    if to_commit:
        if coordinator is None:
            errors.update(dict.fromkeys(to_commit, ErrorCode.COORDINATOR_NOT_AVAILABLE))
        elif is_share_group(ctx, request["group_id"]):
            errors.update(dict.fromkeys(to_commit, ErrorCode.GROUP_ID_NOT_FOUND))
        elif coordinator.consumer.is_consumer_group(request["group_id"]):  # member epochs (KIP-848)
            errors.update(await coordinator.consumer.commit_offsets(request, to_commit, ctx.api_version))
        else:
            errors.update(
                await coordinator.commit_offsets(
                    request["group_id"],
                    request.get("member_id", ""),
                    request.get("group_instance_id"),
                    request.get("generation_id_or_member_epoch", -1),
                    to_commit,
                )
            )
    return {"throttle_time_ms": 0, "topics": partition_errors(request["topics"], errors)}


# -- OffsetFetch -------------------------------------------------------------------------------------------


def _fetch_group(
    ctx: RequestContext,
    group_id: str,
    topics: list[Body] | None,
    require_stable: bool = False,
    member: tuple[str | None, int] = (None, -1),
) -> tuple[ErrorCode, list[tuple[str, list[Body]]]]:
    """A group's committed offsets as (topic, partition entries), in request order (or sorted for all). Needs
    DESCRIBE on the group; a topic the caller may not describe is answered TOPIC_AUTHORIZATION_FAILED when
    named, and left out of "all"."""
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    coordinator = coordinator_of(ctx)
    wanted = None if topics is None else [TopicPartition(t["name"], i) for t in topics for i in t["partition_indexes"]]
    if coordinator is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
    if coordinator.not_serving(group_id) is None and coordinator.consumer.is_consumer_group(group_id):
        error = coordinator.consumer.validate_offset_fetch(group_id, *member)  # member epochs (KIP-848)
        if error != ErrorCode.NO_ERROR:
            return error, []
    error, offsets = coordinator.fetch_offsets(group_id, wanted)
    if error != ErrorCode.NO_ERROR:
        return error, []
    order = wanted if wanted is not None else sorted(offsets, key=lambda tp: (tp.topic, tp.partition))
    visible = filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (tp.topic for tp in order))
    by_topic: dict[str, list[Body]] = {}
    for tp in order:
        if tp.topic not in visible:
            if wanted is not None:
                refused = {"partition_index": tp.partition, "committed_offset": -1, "committed_leader_epoch": -1,
                           "metadata": "", "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}  # fmt: skip
                by_topic.setdefault(tp.topic, []).append(refused)
            continue
        om = offsets.get(tp)
        if require_stable and coordinator.has_pending_txn_offsets(group_id, tp):
            # v7+: a transaction that commits offsets of this partition is still open
            by_topic.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": -1,
                    "committed_leader_epoch": -1,
                    "metadata": "",
                    "error_code": ErrorCode.UNSTABLE_OFFSET_COMMIT,
                }
            )
            continue
        by_topic.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "committed_offset": om.offset if om is not None else -1,
                "committed_leader_epoch": om.leader_epoch if om is not None else -1,
                "metadata": om.metadata if om is not None else "",
                "error_code": ErrorCode.NO_ERROR,
            }
        )
    return ErrorCode.NO_ERROR, list(by_topic.items())


@handler(ApiKey.OFFSET_FETCH, 0, 9)
async def handle_offset_fetch(ctx: RequestContext, request: Body) -> Body:
    if ctx.api_version >= 8:
        groups = []
        for g in request["groups"]:
            member = (g.get("member_id"), g.get("member_epoch", -1))
            error, topics = _fetch_group(
                ctx, g["group_id"], g.get("topics"), bool(request.get("require_stable")), member
            )
            groups.append(
                {
                    "group_id": g["group_id"],
                    "error_code": error,
                    "topics": [{"name": name, "partitions": parts} for name, parts in topics],
                }
            )
        return {"throttle_time_ms": 0, "groups": groups}
    requested = request.get("topics")
    error, topics = _fetch_group(ctx, request["group_id"], requested, bool(request.get("require_stable")))
    if error != ErrorCode.NO_ERROR and ctx.api_version < 2:
        # v0-v1 have no top-level error: report it on every requested partition.
        topics = [
            (
                t["name"],
                [
                    {"partition_index": i, "committed_offset": -1, "metadata": "", "error_code": error}
                    for i in t["partition_indexes"]
                ],
            )
            for t in requested or []
        ]
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics],
    }


# -- OffsetDelete ------------------------------------------------------------------------------------------


@handler(ApiKey.OFFSET_DELETE, 0, 0)
async def handle_offset_delete(ctx: RequestContext, request: Body) -> Body:
    if not authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, request["group_id"]):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "throttle_time_ms": 0, "topics": []}
    coordinator = coordinator_of(ctx)
    if coordinator is None:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "throttle_time_ms": 0, "topics": []}
    errors: dict[TopicPartition, ErrorCode] = {}
    candidates = []
    for topic in request["topics"]:
        for p in topic["partitions"]:
            tp = TopicPartition(topic["name"], p["partition_index"])
            if not authorize(ctx, AclOperation.READ, ResourceType.TOPIC, tp.topic):
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif _partition_exists(ctx, tp.topic, tp.partition):
                candidates.append(tp)
            else:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    subscribed = coordinator.consumer.subscribed_topics(request["group_id"])  # a live consumer group's (KIP-848)
    for tp in [tp for tp in candidates if tp.topic in subscribed]:
        errors[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
        candidates.remove(tp)
    error, results = await coordinator.delete_offsets(request["group_id"], candidates)
    if error != ErrorCode.NO_ERROR:
        return {"error_code": error, "throttle_time_ms": 0, "topics": []}
    errors.update(results)
    topics = partition_errors(request["topics"], errors)
    return {"error_code": ErrorCode.NO_ERROR, "throttle_time_ms": 0, "topics": topics}
