"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37)."""

from __future__ import annotations

import logging
import uuid

from rill.api._authorized import AclOperation, ResourceType, authorize, authorize_cluster
from rill.api._topics import ZERO_UUID
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.common import repeated
from rill.config import BrokerConfig, describe_topic_configs, validate_topic_configs
from rill.errors import ErrorCode, KafkaError
from rill.metadata.store import (
    INTERNAL_TOPICS,
    MAX_PARTITIONS_PER_REQUEST,
    check_assignment,
    topic_collision,
    topic_name_problem,
)
from rill.protocol import ApiKey

log = logging.getLogger(__name__)


def _error(body: Body, e: KafkaError) -> Body:
    body["error_code"] = e.code
    body["error_message"] = e.message
    return body


_TOPIC_AUTHORIZATION_FAILED = KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")


def _duplicate(body: Body, what: str = "name") -> Body:
    """The answer, INVALID_REQUEST, for a topic a request names more than once (left alone, as in Kafka)."""
    return _error(body, KafkaError(ErrorCode.INVALID_REQUEST, f"Duplicate topic {what}."))


def _requested_partitions(ctx: RequestContext, topics: list[Body]) -> int:
    """How many partitions a CreateTopics request asks for in all (the broker default where a topic asks -1)."""
    default = int(ctx.services.config.get("num.partitions"))
    total = 0
    for t in topics:
        if t.get("assignments"):
            total += len(t["assignments"])
        elif t["num_partitions"] == -1:
            total += default
        elif t["num_partitions"] > 0:
            total += t["num_partitions"]
    return total


def _check_partition_budget(ctx: RequestContext, added: int) -> None:
    """Refuse, before any work, a request that would make more partitions than one request may
    (Kafka's bound), or more than this broker's open-files limit can hold."""
    if added > MAX_PARTITIONS_PER_REQUEST:
        raise KafkaError(ErrorCode.POLICY_VIOLATION, "Excessively large number of partitions per request.")
    problem = ctx.services.replica_manager.capacity_problem(added)
    if problem is not None:
        raise KafkaError(ErrorCode.POLICY_VIOLATION, problem)


def _config_entries(config: BrokerConfig, configs: dict[str, str]) -> list[Body]:
    return [
        {"name": e.name, "value": e.value, "read_only": e.read_only, "config_source": e.source,
         "is_sensitive": e.is_sensitive}
        for e in describe_topic_configs(config, configs)
    ]  # fmt: skip


@handler(ApiKey.CREATE_TOPICS, 0, 7)
async def handle_create_topics(ctx: RequestContext, request: Body) -> Body:
    services = ctx.services
    store = services.metadata
    config = services.config
    validate_only = request.get("validate_only", False)
    results: list[Body] = []
    try:
        _check_partition_budget(ctx, _requested_partitions(ctx, request["topics"]))
    except KafkaError as e:  # the whole request is refused, every topic with the same error
        topics = [_error({"name": t["name"], "topic_id": ZERO_UUID}, e) for t in request["topics"]]
        return {"throttle_time_ms": 0, "topics": topics}
    duplicates = repeated([t["name"] for t in request["topics"]])
    for name in duplicates:
        results.append(_duplicate({"name": name, "topic_id": ZERO_UUID}))
    may_create_all = authorize_cluster(ctx, AclOperation.CREATE, log_denied=False)
    for t in request["topics"]:
        name = t["name"]
        if name in duplicates:
            continue
        out: Body = {"name": name, "topic_id": ZERO_UUID, "error_code": 0, "error_message": None}
        try:
            if not may_create_all and not authorize(ctx, AclOperation.CREATE, ResourceType.TOPIC, name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            problem = topic_name_problem(name)
            if problem:
                raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
            if store.topic(name) is not None:
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            problem = topic_collision(name, store.topics())
            if problem:  # also checked by the store; here for validate_only
                raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
            configs = {c["name"]: c["value"] for c in t.get("configs", []) if c["value"] is not None}
            validate_topic_configs(configs)
            assignments = {a["partition_index"]: list(a["broker_ids"]) for a in t.get("assignments", [])}
            num_partitions = t["num_partitions"]
            replication_factor = t["replication_factor"]
            if assignments and (num_partitions != -1 or replication_factor != -1):
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    "Both numPartitions or replicationFactor and replicasAssignments were set.",
                )
            if num_partitions == -1:
                num_partitions = int(config.get("num.partitions"))
            if replication_factor == -1:
                replication_factor = int(config.get("default.replication.factor"))
            if not assignments:
                if num_partitions < 1:
                    raise KafkaError(
                        ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
                    )
                if replication_factor < 1:
                    raise KafkaError(
                        ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
                    )
                if replication_factor > len(store.brokers()):
                    raise KafkaError(
                        ErrorCode.INVALID_REPLICATION_FACTOR,
                        f"Unable to replicate the partition {replication_factor} time(s): "
                        f"The target replication factor of {replication_factor} cannot be reached because only "
                        f"{len(store.brokers())} broker(s) are registered.",
                    )
            if assignments:  # checked here too for validate_only, which the store never sees
                check_assignment(assignments, (b.node_id for b in store.brokers()))
            if validate_only:
                topic_id = uuid.uuid4()  # as Kafka's controller answers: the id the topic would have had
                n = len(assignments) if assignments else num_partitions
                rf = len(next(iter(assignments.values()))) if assignments else replication_factor
            else:
                topic = await store.create_topic(
                    name, num_partitions, replication_factor, configs, assignments or None
                )
                topic_id, n, rf = topic.topic_id, len(topic.partitions), topic.replication_factor
                log.info(
                    "Created topic %s (id %s) with %d partition(s), replication factor %d, configs %s, for %s",
                    name,
                    topic_id,
                    n,
                    rf,
                    configs,
                    ctx.client,
                )
            out["topic_id"] = topic_id
            if authorize(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name, log_denied=False):
                out.update(num_partitions=n, replication_factor=rf, configs=_config_entries(config, configs))
            else:  # KIP-525: partitions, replication and configs only to a caller who may describe the configs
                out.update(num_partitions=-1, replication_factor=-1, configs=[],
                           topic_config_error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)  # fmt: skip
        except KafkaError as e:
            _error(out, e)
        results.append(out)
    return {"throttle_time_ms": 0, "topics": results}


@handler(ApiKey.DELETE_TOPICS, 0, 6)
async def handle_delete_topics(ctx: RequestContext, request: Body) -> Body:
    store = ctx.services.metadata
    if ctx.api_version >= 6:
        wanted = [(t.get("name"), t.get("topic_id", ZERO_UUID)) for t in request["topics"]]
    else:
        wanted = [(n, ZERO_UUID) for n in request["topic_names"]]
    results: list[Body] = []
    duplicates = repeated([name if name is not None else topic_id for name, topic_id in wanted])
    for key in duplicates:
        if isinstance(key, uuid.UUID):
            results.append(_duplicate({"name": None, "topic_id": key}, "id"))
        else:
            results.append(_duplicate({"name": key, "topic_id": ZERO_UUID}))
    checked: list[tuple[Body, str]] = []
    for name, topic_id in wanted:
        if (name if name is not None else topic_id) in duplicates:
            continue
        out: Body = {"name": name, "topic_id": topic_id, "error_code": 0, "error_message": None}
        try:
            if name is None:
                topic = store.topic_by_id(topic_id) if isinstance(topic_id, uuid.UUID) else None
                if topic is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, f"unknown topic id {topic_id}")
                name = topic.name
                if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
                out["name"] = name
            if not authorize(ctx, AclOperation.DELETE, ResourceType.TOPIC, name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            topic = store.topic(name)
            if topic is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
            if name in INTERNAL_TOPICS:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"internal topic {name} cannot be deleted")
            if not ctx.services.config.get("delete.topic.enable"):
                raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "delete.topic.enable is false")
            out["topic_id"] = topic.topic_id
            checked.append((out, name))
        except KafkaError as e:
            _error(out, e)
        results.append(out)
    if checked:
        await _delete(ctx, checked)
    return {"throttle_time_ms": 0, "responses": results}


async def _delete(ctx: RequestContext, checked: list[tuple[Body, str]]) -> None:
    """Delete the topics that passed the checks in one metadata change (one by one when that is refused:
    a topic deleted meanwhile must not keep the others)."""
    store = ctx.services.metadata
    try:
        await store.delete_topics([name for _, name in checked])
    except KafkaError:
        for out, name in checked:
            try:
                await store.delete_topic(name)
            except KafkaError as e:
                _error(out, e)
    for out, name in checked:
        if not out["error_code"]:
            log.info("Deleted topic %s (id %s) for %s", name, out["topic_id"], ctx.client)


@handler(ApiKey.CREATE_PARTITIONS, 0, 3)
async def handle_create_partitions(ctx: RequestContext, request: Body) -> Body:
    """Duplicates are refused, then each topic is checked for ALTER before anything looks it up (a refused
    caller learns neither whether it exists nor its partition count), then the partition budget of the topics
    that passed."""
    store = ctx.services.metadata
    results: list[Body] = []
    duplicates = repeated([t["name"] for t in request["topics"]])
    for name in duplicates:
        results.append(_duplicate({"name": name}))
    allowed: list[Body] = []
    for t in request["topics"]:
        if t["name"] in duplicates:
            continue
        if authorize(ctx, AclOperation.ALTER, ResourceType.TOPIC, t["name"]):
            allowed.append(t)
        else:
            results.append(_error({"name": t["name"]}, _TOPIC_AUTHORIZATION_FAILED))
    added = 0
    for t in allowed:
        topic = store.topic(t["name"])
        added += max(0, t["count"] - len(topic.partitions)) if topic is not None else 0
    try:
        _check_partition_budget(ctx, added)
    except KafkaError as e:  # the whole request is refused, every topic it may alter with the same error
        return {"throttle_time_ms": 0, "results": results + [_error({"name": t["name"]}, e) for t in allowed]}
    for t in allowed:
        name = t["name"]
        out: Body = {"name": name, "error_code": 0, "error_message": None}
        try:
            topic = store.topic(name)
            if topic is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
            count = t["count"]
            if count <= len(topic.partitions):
                raise KafkaError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"Topic currently has {len(topic.partitions)} partitions, {count} would not be an increase.",
                )
            assignments = [list(a["broker_ids"]) for a in t.get("assignments") or []] or None
            validate_only = request.get("validate_only", False)
            await store.create_partitions(name, count, assignments, validate_only=validate_only)
            if not validate_only:
                log.info("Topic %s now has %d partitions (for %s)", name, count, ctx.client)
        except KafkaError as e:
            _error(out, e)
        results.append(out)
    order = {name: i for i, name in enumerate(dict.fromkeys(t["name"] for t in request["topics"]))}
    results.sort(key=lambda r: order[r["name"]])
    return {"throttle_time_ms": 0, "results": results}
