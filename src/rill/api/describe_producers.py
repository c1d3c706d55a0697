"""DescribeProducers (61): the active producers of partitions this broker leads (``kafka-transactions.sh
describe-producers``): each one's id, epoch, last sequence and timestamp, coordinator epoch, and the first offset
of its ongoing transaction (-1 when none). A partition this broker does not lead, or of which it holds no replica,
answers NOT_LEADER_OR_FOLLOWER; one the cluster does not have UNKNOWN_TOPIC_OR_PARTITION."""

from __future__ import annotations

from rill.api._authorized import AclOperation, ResourceType, authorize
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey


@handler(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
async def handle_describe_producers(ctx: RequestContext, request: Body) -> Body:
    rm = ctx.services.replica_manager
    topics: list[Body] = []
    for t in request["topics"]:
        parts: list[Body] = []
        for index in t["partition_indexes"]:
            out: Body = {"partition_index": index, "error_code": 0, "error_message": None, "active_producers": []}
            try:
                if not authorize(ctx, AclOperation.READ, ResourceType.TOPIC, t["name"]):
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
                partition = rm.leader_partition(TopicPartition(t["name"], index))
            except KafkaError as e:
                out.update(error_code=e.code, error_message=e.message)
                parts.append(out)
                continue
            out["active_producers"] = [
                {
                    "producer_id": entry.producer_id,
                    "producer_epoch": entry.producer_epoch,
                    "last_sequence": entry.last_seq,
                    "last_timestamp": entry.last_timestamp,
                    "coordinator_epoch": entry.coordinator_epoch,
                    "current_txn_start_offset": entry.current_txn_first_offset,
                }
                for entry in sorted(partition.log.producer_state.producers.values(), key=lambda e: e.producer_id)
            ]
            parts.append(out)
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
