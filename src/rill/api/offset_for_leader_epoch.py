"""OffsetForLeaderEpoch (23): the end offset of a leader epoch, so clients can detect log truncation."""

from __future__ import annotations

from rill.api._authorized import AclOperation, ResourceType, authorize, authorize_cluster
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey


@handler(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 4)
async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Body) -> Body:
    rm = ctx.services.replica_manager
    topics: list[Body] = []
    follower = request.get("replica_id", -1) >= 0
    follower_denied = follower and not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)
    for t in request["topics"]:
        name = t["topic"]
        denied = follower_denied or (
            not follower and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        )
        parts: list[Body] = []
        for p in t["partitions"]:
            index = p["partition"]
            out: Body = {"partition": index, "error_code": 0, "leader_epoch": -1, "end_offset": -1}
            try:
                if denied:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                partition = rm.leader_partition(TopicPartition(name, index))
                partition.check_leader_epoch(p.get("current_leader_epoch", -1))
                epoch, end_offset = partition.log.leader_epoch_cache.end_offset_for(
                    p["leader_epoch"], partition.log_end_offset
                )
                out.update(leader_epoch=epoch, end_offset=end_offset)
            except KafkaError as e:
                out["error_code"] = e.code
            parts.append(out)
        topics.append({"topic": name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
