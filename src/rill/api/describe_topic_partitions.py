"""DescribeTopicPartitions (75, KIP-966): topics and their partitions a page at a time.

The topics asked for (none: every topic the caller may describe) are answered in name order, at most
``min(max.request.partition.size.limit, ResponsePartitionLimit)`` partitions in one answer. When the limit
stops the answer inside a topic, ``NextCursor`` names that topic and its first partition left out; when it
stops it at a topic's end and more topics follow, it names the next topic and partition 0. A request's
``Cursor`` starts the answer there: at that partition of the cursor's topic, and at topics after it. Given
topics must then include the cursor's topic (INVALID_REQUEST otherwise). A named topic the caller may not
describe is answered TOPIC_AUTHORIZATION_FAILED after the others (with a zero topic id, so nothing of it is
told); an unknown one UNKNOWN_TOPIC_OR_PARTITION, or INVALID_TOPIC_EXCEPTION for a name no topic can have.
Rill has no eligible leader replicas (KIP-966's ELR): those lists are empty.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from rill.api._authorized import AclOperation, ResourceType, authorize, authorized_operations
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.errors import ErrorCode
from rill.metadata.store import PartitionState, TopicState, topic_name_problem
from rill.protocol import ApiKey

log = logging.getLogger(__name__)

ZERO_UUID = uuid.UUID(int=0)


def _partition(p: PartitionState, live: set[int]) -> Body:
    return {
        "error_code": ErrorCode.NONE,
        "partition_index": p.partition,
        "leader_id": p.leader if p.leader in live else -1,
        "leader_epoch": p.leader_epoch,
        "replica_nodes": list(p.replicas),
        "isr_nodes": list(p.isr),
        "eligible_leader_replicas": [],
        "last_known_elr": [],
        "offline_replicas": [r for r in p.replicas if r not in live],
    }


def _unknown(name: str) -> Body:
    code = ErrorCode.INVALID_TOPIC_EXCEPTION if topic_name_problem(name) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return {"error_code": code, "name": name, "topic_id": ZERO_UUID, "partitions": []}


def _page(ctx: RequestContext, names: Iterable[str], cursor: Body | None, limit: int) -> Body:
    """Kafka's paging over ``names`` (sorted, authorized): whole topics while they fit, then a cursor."""
    store = ctx.services.metadata
    live = {b.node_id for b in store.brokers()}
    remaining = limit
    topics: list[Body] = []
    next_cursor: Body | None = None
    for name in names:
        if remaining <= 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        topic: TopicState | None = store.topic(name)
        if topic is None:
            topics.append(_unknown(name))
            continue
        start = int(cursor["partition_index"]) if cursor is not None and cursor["topic_name"] == name else 0
        upper = min(len(topic.partitions), start + remaining)
        by_index = {p.partition: p for p in topic.partitions}
        partitions = [_partition(by_index[i], live) for i in range(max(start, 0), upper) if i in by_index]
        topics.append({
            "error_code": ErrorCode.NONE,
            "name": name,
            "topic_id": topic.topic_id,
            "is_internal": topic.internal,
            "partitions": partitions,
            "topic_authorized_operations": authorized_operations("topic", True, ctx, name),
        })  # fmt: skip
        if upper < len(topic.partitions):
            next_cursor = {"topic_name": name, "partition_index": upper}
            break
        remaining -= len(partitions)
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}


@handler(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0)
async def handle_describe_topic_partitions(ctx: RequestContext, request: Body) -> Body:
    store = ctx.services.metadata
    cursor: Body | None = request.get("cursor")
    requested = [str(t["name"]) for t in request.get("topics") or []]
    fetch_all = not requested
    if fetch_all:
        wanted = set(store.topics())
        if cursor is not None:
            wanted = {n for n in wanted if n > cursor["topic_name"]} | {cursor["topic_name"]}
    else:
        wanted = {n for n in requested if cursor is None or n >= cursor["topic_name"]}
        if cursor is not None and cursor["topic_name"] not in wanted:
            return {"throttle_time_ms": 0, "topics": [
                {"error_code": ErrorCode.INVALID_REQUEST, "name": n, "topic_id": ZERO_UUID, "partitions": []}
                for n in sorted(set(requested))
            ]}  # fmt: skip
    refused: list[Body] = []
    allowed: list[str] = []
    for name in sorted(wanted):
        if authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_denied=not fetch_all):
            allowed.append(name)
        elif not fetch_all:
            refused.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name,
                            "topic_id": ZERO_UUID, "partitions": []})  # fmt: skip
    if fetch_all and cursor is not None and store.topic(cursor["topic_name"]) is None:
        allowed = [n for n in allowed if n != cursor["topic_name"]]  # a cursor's topic deleted meanwhile
    limit = min(int(ctx.services.config.get("max.request.partition.size.limit")),
                int(request.get("response_partition_limit", 2000)))  # fmt: skip
    response = _page(ctx, allowed, cursor, limit)
    response["topics"].extend(refused)
    return response
