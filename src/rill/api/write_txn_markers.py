"""WriteTxnMarkers (27): the transaction coordinator asks the leaders of a transaction's partitions to write its
COMMIT or ABORT marker.

Every partition of every marker is written at once (``ReplicaManager.append_txn_marker``: leadership and
``min.insync.replicas`` checked, the marker appended, then awaited until the high watermark passes it, up to
``request.timeout.ms``); each answers its own error code, as Kafka's handler does (NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, NOT_ENOUGH_REPLICAS,
REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR)."""

from __future__ import annotations

import asyncio
import logging

from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.common import TopicPartition
from rill.errors import ErrorCode
from rill.protocol import ApiKey

log = logging.getLogger(__name__)


@handler(ApiKey.WRITE_TXN_MARKERS, 0, 1)
async def handle_write_txn_markers(ctx: RequestContext, request: Body) -> Body:
    rm = ctx.services.replica_manager
    results: list[Body] = []
    pending: list[tuple[Body, asyncio.Future[ErrorCode]]] = []
    for marker in request["markers"]:
        pid, epoch = marker["producer_id"], marker["producer_epoch"]
        commit, coordinator_epoch = bool(marker["transaction_result"]), marker["coordinator_epoch"]
        topics: list[Body] = []
        for t in marker["topics"]:
            parts: list[Body] = []
            for index in t["partition_indexes"]:
                result: Body = {"partition_index": index, "error_code": ErrorCode.NO_ERROR}
                tp = TopicPartition(t["name"], index)
                pending.append(
                    (result, asyncio.ensure_future(rm.append_txn_marker(tp, pid, epoch, coordinator_epoch, commit)))
                )
                parts.append(result)
            topics.append({"name": t["name"], "partitions": parts})
        results.append({"producer_id": pid, "topics": topics})
    if pending:
        codes = await asyncio.gather(*(f for _, f in pending))
        for (result, _), code in zip(pending, codes, strict=True):
            result["error_code"] = code
            if code:
                log.info("Marker from %s on partition %d: %s", ctx.client, result["partition_index"], code.name)
    return {"markers": results}
