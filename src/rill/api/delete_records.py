"""DeleteRecords (21): advance partitions' log start offsets.

Compute, make durable, then apply: the new log start offsets are written to ``log-start-offset-checkpoint``
(fsynced) before any of them moves, so records deleted stay deleted after a crash (Kafka writes the
checkpoint only every ``log.flush.start.offset.checkpoint.interval.ms``; a single broker has no follower to
keep the offset). A partition whose checkpoint cannot be written (a full disk) is answered
KAFKA_STORAGE_ERROR and keeps its log start offset, in memory and on disk."""

from __future__ import annotations

import logging

from rill.api._authorized import AclOperation, ResourceType, authorize
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey
from rill.replica.partition import Partition

log = logging.getLogger(__name__)


@handler(ApiKey.DELETE_RECORDS, 0, 2)
async def handle_delete_records(ctx: RequestContext, request: Body) -> Body:
    rm = ctx.services.replica_manager
    topics: list[Body] = []
    moving: list[tuple[Body, Partition, int]] = []  # (response entry, partition, new log start offset)
    for t in request["topics"]:
        name = t["name"]
        denied = not authorize(ctx, AclOperation.DELETE, ResourceType.TOPIC, name)
        parts: list[Body] = []
        for p in t["partitions"]:
            index = p["partition_index"]
            out: Body = {"partition_index": index, "low_watermark": -1, "error_code": 0}
            try:
                if denied:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                partition = rm.leader_partition(TopicPartition(name, index))
                target = partition.delete_records_target(p["offset"])
                if target > partition.log_start_offset:
                    moving.append((out, partition, target))
                else:
                    out["low_watermark"] = partition.log_start_offset
            except KafkaError as e:
                out["error_code"] = e.code
            parts.append(out)
        topics.append({"name": name, "partitions": parts})
    if moving:
        targets: dict[TopicPartition, int] = {}
        for _, partition, target in moving:
            targets[partition.tp] = max(target, targets.get(partition.tp, target))
        failed = await rm.persist_log_start_offsets(targets)
        # No await from here on: the offsets written move now, before any checkpoint is read again.
        for out, partition, _ in moving:
            if partition.tp in failed:
                out["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            try:
                if rm.leader_partition(partition.tp) is not partition:  # gone while the checkpoint was written
                    raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                partition.log.maybe_increment_log_start_offset(targets[partition.tp])
            except KafkaError as e:
                out["error_code"] = e.code
                continue
            out["low_watermark"] = partition.log_start_offset
            log.info("Deleted records of %s before %d for %s", partition.tp, out["low_watermark"], ctx.client)
    return {"throttle_time_ms": 0, "topics": topics}
