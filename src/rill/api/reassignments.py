"""AlterPartitionReassignments (45) and ListPartitionReassignments (46): moving partitions between brokers.

A reassignment names a partition's target replicas (or None to cancel one under way). The controller adds the
target replicas, which catch up as followers; once all are in the ISR it makes them the replicas, moving the
leadership when the leader is not among them, and the other brokers drop the partition (KIP-455). A single
broker (no ZooKeeper) has nowhere to move a partition: a target other than its replicas is refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey


@handler(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 0)
async def handle_alter_partition_reassignments(ctx: RequestContext, request: Body) -> Body:
    store = ctx.services.metadata
    targets: dict[tuple[str, int], Sequence[int] | None] = {}
    for t in request["topics"]:
        for p in t["partitions"]:
            replicas = p.get("replicas")
            targets[(t["name"], p["partition_index"])] = None if replicas is None else list(replicas)
    alter = getattr(store, "alter_reassignments", None)
    if alter is not None:
        errors: dict[tuple[str, int], KafkaError | None] = await alter(targets)
    else:
        errors = {tp: _single_broker(ctx, tp, target) for tp, target in targets.items()}
    by_topic: dict[str, list[Body]] = {}
    for (topic, p), error in errors.items():
        by_topic.setdefault(topic, []).append({
            "partition_index": p,
            "error_code": error.code if error else 0,
            "error_message": error.message if error else None,
        })
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "responses": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}  # fmt: skip


def _single_broker(ctx: RequestContext, tp: tuple[str, int], target: Sequence[int] | None) -> KafkaError | None:
    state = ctx.services.metadata.topic(tp[0])
    if state is None or not 0 <= tp[1] < len(state.partitions):
        return KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp[0]}-{tp[1]} does not exist")
    if target is None:
        return KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {tp[0]}-{tp[1]} is in progress")
    if tuple(target) != state.partitions[tp[1]].replicas:
        return KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "a single broker has nowhere to move a partition")
    return None


@handler(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0)
async def handle_list_partition_reassignments(ctx: RequestContext, request: Body) -> Body:
    store = ctx.services.metadata
    wanted = request.get("topics")
    names = [t["name"] for t in wanted] if wanted is not None else sorted(store.topics())
    indexes = {t["name"]: set(t["partition_indexes"]) for t in wanted} if wanted is not None else {}
    topics: list[Body] = []
    for name in names:
        state = store.topic(name)
        if state is None:
            continue
        ongoing = [
            {"partition_index": p.partition, "replicas": list(p.replicas), "adding_replicas": list(p.adding_replicas),
             "removing_replicas": list(p.removing_replicas)}
            for p in state.partitions
            if (p.adding_replicas or p.removing_replicas) and (name not in indexes or p.partition in indexes[name])
        ]  # fmt: skip
        if ongoing:
            topics.append({"name": name, "partitions": ongoing})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "topics": topics}
