"""DeleteRecords (21): advance partitions' log start offsets.

The new log start offsets are written to ``log-start-offset-checkpoint`` before the response goes out, so
records deleted stay deleted after a crash (Kafka writes the checkpoint only every
``log.flush.start.offset.checkpoint.interval.ms``; a single broker has no follower to keep the offset)."""

from __future__ import annotations

import logging

from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.common import TopicPartition
from rill.errors import KafkaError
from rill.protocol import ApiKey

log = logging.getLogger(__name__)


@handler(ApiKey.DELETE_RECORDS, 0, 2)
async def handle_delete_records(ctx: RequestContext, request: Body) -> Body:
    rm = ctx.services.replica_manager
    topics: list[Body] = []
    moved = False
    for t in request["topics"]:
        name = t["name"]
        parts: list[Body] = []
        for p in t["partitions"]:
            index = p["partition_index"]
            out: Body = {"partition_index": index, "low_watermark": -1, "error_code": 0}
            try:
                partition = rm.leader_partition(TopicPartition(name, index))
                before = partition.log.log_start_offset
                out["low_watermark"] = partition.delete_records_before(p["offset"])
                moved = moved or out["low_watermark"] != before
                log.info(
                    "Deleted records of %s-%d before %d for %s", name, index, out["low_watermark"], ctx.client
                )
            except KafkaError as e:
                out["error_code"] = e.code
            parts.append(out)
        topics.append({"name": name, "partitions": parts})
    if moved:
        await rm.persist_log_start_offsets()
    return {"throttle_time_ms": 0, "topics": topics}
