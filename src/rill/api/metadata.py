"""Metadata (3): brokers, controller, cluster id, and topics with their partitions' leaders and epochs."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from rill.api._authorized import authorized_operations
from rill.api._endpoints import broker_endpoints
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.errors import ErrorCode, KafkaError
from rill.metadata.store import PartitionState, TopicState, topic_name_problem
from rill.protocol import ApiKey

log = logging.getLogger(__name__)

ZERO_UUID = uuid.UUID(int=0)


def partition_body(p: PartitionState, live: set[int], version: int) -> Body:
    """One partition as Kafka's metadata cache answers it: a leader that is not a live broker (none, or one
    whose registration is gone) is answered as leader -1 with LEADER_NOT_AVAILABLE, the leader epoch, replicas
    and ISR kept; ``offline_replicas`` names the replicas whose broker is not live. Version 0 lists only the
    live replicas and ISR members, with REPLICA_NOT_AVAILABLE when some are left out."""
    replicas, isr = list(p.replicas), list(p.isr)
    error = ErrorCode.NONE
    if version == 0:
        replicas, isr = [r for r in replicas if r in live], [r for r in isr if r in live]
        if len(replicas) < len(p.replicas) or len(isr) < len(p.isr):
            error = ErrorCode.REPLICA_NOT_AVAILABLE
    leader = p.leader
    if leader not in live:
        leader, error = -1, ErrorCode.LEADER_NOT_AVAILABLE
    return {
        "error_code": error,
        "partition_index": p.partition,
        "leader_id": leader,
        "leader_epoch": p.leader_epoch,
        "replica_nodes": replicas,
        "isr_nodes": isr,
        "offline_replicas": [r for r in p.replicas if r not in live],
    }


def topic_body(topic: TopicState, version: int, live: set[int]) -> Body:
    """A topic's entry: its error stays NONE when some of its partitions have no leader (as in Kafka)."""
    return {
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": [partition_body(p, live, version) for p in topic.partitions],
    }


async def maybe_auto_create(ctx: RequestContext, name: str) -> TopicState | None:
    """Create ``name`` with the broker defaults when ``auto.create.topics.enable`` allows it."""
    services = ctx.services
    config = services.config
    if not config.get("auto.create.topics.enable"):
        return None
    if topic_name_problem(name) is not None:
        return None
    try:
        topic = await services.metadata.create_topic(
            name,
            int(config.get("num.partitions")),
            min(int(config.get("default.replication.factor")), len(services.metadata.brokers())),
            {},
        )
    except KafkaError as e:
        if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
        # Another request created it meanwhile (two clients asking for the same new topic at once).
        return services.metadata.topic(name)
    log.info("Auto-created topic %s with %d partition(s) for %s", name, len(topic.partitions), ctx.client)
    return topic


@handler(ApiKey.METADATA, 0, 13)
async def handle_metadata(ctx: RequestContext, request: Body) -> Body:
    version = ctx.api_version
    store = ctx.services.metadata
    requested = request.get("topics")
    if requested and version < 12:
        refused = _id_lookup_before_v12(requested, version)
        if refused is not None:
            return refused
    topics: list[Body] = []
    live = {b.node_id for b in store.brokers()}
    if requested is None or (version == 0 and not requested):
        topics = [topic_body(t, version, live) for _, t in sorted(store.topics().items())]
    else:
        allow_auto = request.get("allow_auto_topic_creation", True) if version >= 4 else True
        for entry in requested:
            name: str | None = entry.get("name")
            topic_id: Any = entry.get("topic_id")
            topic = None
            if not name and topic_id is not None and topic_id != ZERO_UUID:
                # By id: the Java client sends the name as "" rather than null beside an id.
                topic = store.topic_by_id(topic_id)
                if topic is None:
                    topics.append(
                        {"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": topic_id}
                    )
                    continue
            elif name is not None:
                topic = store.topic(name)
                if topic is None:
                    problem = topic_name_problem(name)
                    if problem is not None:
                        topics.append({"error_code": ErrorCode.INVALID_TOPIC_EXCEPTION, "name": name})
                        continue
                    if allow_auto:
                        try:
                            topic = await maybe_auto_create(ctx, name)
                        except KafkaError as e:
                            topics.append({"error_code": e.code, "name": name})
                            continue
                    if topic is None:
                        topics.append(
                            {
                                "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                "name": name,
                                "topic_id": ZERO_UUID,
                            }
                        )
                        continue
            if topic is not None:
                topics.append(topic_body(topic, version, live))
    if request.get("include_topic_authorized_operations", False):
        for t in topics:
            t["topic_authorized_operations"] = authorized_operations("topic", True)
    brokers = broker_endpoints(ctx)
    return {
        "throttle_time_ms": 0,
        "brokers": brokers,
        "cluster_id": store.cluster_id,
        "controller_id": store.controller_id,
        "topics": topics,
        "cluster_authorized_operations": authorized_operations(
            "cluster", request.get("include_cluster_authorized_operations", False)
        ),
    }


def _id_lookup_before_v12(requested: list[Body], version: int) -> Body | None:
    """Metadata v10 and v11 carry a topic id beside each name, but topic ids are looked up only from
    v12, where the response's topic name may be null. As Kafka does, a v10/v11 request with a null
    name or a topic id is answered INVALID_REQUEST for every topic it names (a null name as "")."""
    for entry in requested:
        topic_id = entry.get("topic_id")
        if entry.get("name") is None or (topic_id is not None and topic_id != ZERO_UUID):
            log.debug("Metadata v%d names a topic by id or with a null name: INVALID_REQUEST", version)
            topics: list[Body] = [
                {
                    "error_code": ErrorCode.INVALID_REQUEST,
                    "name": e.get("name") or "",
                    "topic_id": e.get("topic_id") or ZERO_UUID,
                    "is_internal": False,
                    "partitions": [],
                }
                for e in requested
            ]
            return {"throttle_time_ms": 0, "brokers": [], "topics": topics}
    return None
