"""ListOffsets (2): earliest, latest, max-timestamp, and by-timestamp offsets of partitions."""

from __future__ import annotations

from rill.api._authorized import AclOperation, ResourceType, authorize
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


@handler(ApiKey.LIST_OFFSETS, 1, 11)
async def handle_list_offsets(ctx: RequestContext, request: Body) -> Body:
    rm = ctx.services.replica_manager
    read_committed = request.get("isolation_level", 0) == 1
    # A replica's request has no isolation level (Kafka): LATEST is the log end, and KIP-207's check is skipped.
    from_replica = request.get("replica_id", -1) >= 0
    topics: list[Body] = []
    for t in request["topics"]:
        name = t["name"]
        denied = not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        parts: list[Body] = []
        for p in t["partitions"]:
            index = p["partition_index"]
            ts = p["timestamp"]
            out: Body = {
                "partition_index": index,
                "error_code": 0,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            try:
                if denied:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                partition = rm.leader_partition(TopicPartition(name, index))
                partition.check_leader_epoch(p.get("current_leader_epoch", -1))
                plog = partition.log
                epoch = partition.leader_epoch
                # KIP-207: a new leader whose high watermark is still below its epoch's start could answer an
                # offset below one its predecessor gave out; it answers OFFSET_NOT_AVAILABLE until then.
                lagging = not from_replica and partition.high_watermark_lagging
                if ts == LATEST_TIMESTAMP:
                    if lagging:
                        raise KafkaError(
                            ErrorCode.OFFSET_NOT_AVAILABLE,
                            f"the high watermark of {name}-{index} is below the start of leader epoch {epoch}",
                        )
                    if from_replica:
                        offset = partition.log_end_offset
                    else:
                        offset = partition.last_stable_offset if read_committed else partition.high_watermark
                    out.update(offset=offset, leader_epoch=epoch)
                elif ts in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                    out.update(offset=partition.log_start_offset, leader_epoch=epoch)
                elif ts == LATEST_TIERED_TIMESTAMP:
                    out.update(offset=-1, leader_epoch=-1)
                elif ts == MAX_TIMESTAMP:
                    # as a lookup by time, only a record a consumer of this isolation level may read
                    max_ts, offset = plog.max_timestamp_and_offset()
                    limit = partition.last_stable_offset if read_committed else partition.high_watermark
                    if 0 <= offset < limit:
                        out.update(offset=offset, timestamp=max_ts, leader_epoch=epoch)
                elif ts < 0:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {ts}")
                else:
                    hit = plog.fetch_offset_by_timestamp(ts)
                    if from_replica:
                        limit = partition.log_end_offset
                    else:
                        limit = partition.last_stable_offset if read_committed else partition.high_watermark
                    if hit is not None and hit[0] < limit:
                        out.update(offset=hit[0], timestamp=hit[1], leader_epoch=epoch)
                    elif lagging:
                        raise KafkaError(ErrorCode.OFFSET_NOT_AVAILABLE, f"{name}-{index}: high watermark lagging")
            except KafkaError as e:
                out["error_code"] = e.code
            parts.append(out)
        topics.append({"name": name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
