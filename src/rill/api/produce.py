"""Produce (0): validate and append record batches to partition leaders; acks 0, 1 and all.

Every partition is appended first; then, with acks=all, the request waits (in the produce purgatory, up to its
``timeout_ms``) for the partitions whose records are not yet committed, all at once."""

from __future__ import annotations

import asyncio
import logging

from rill.api._topics import resolve_topic_name
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError, RecordValidationError
from rill.network.handler import CloseConnection
from rill.protocol import ApiKey

log = logging.getLogger(__name__)


@handler(ApiKey.PRODUCE, 3, 13)
async def handle_produce(ctx: RequestContext, request: Body) -> Body | None:
    acks = request["acks"]
    replica_manager = ctx.services.replica_manager
    metrics = ctx.services.metrics
    transactional = request.get("transactional_id") is not None
    failed: list[str] = []  # "topic-partition: error" of each partition refused
    responses: list[Body] = []
    waiting: list[tuple[Body, TopicPartition, int]] = []  # acks=all results whose records are not committed yet
    for topic_data in request["topic_data"]:
        name = resolve_topic_name(ctx, topic_data)
        partition_responses: list[Body] = []
        for pdata in topic_data["partition_data"]:
            index = pdata["index"]
            result: Body = {
                "index": index,
                "base_offset": -1,
                "log_append_time_ms": -1,
                "log_start_offset": -1,
            }
            records = pdata.get("records")
            try:
                if acks not in (0, 1, -1):
                    raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not 0, 1 or -1")
                if transactional:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "transactional produce is not supported yet")
                if name is None:
                    code = (
                        ErrorCode.UNKNOWN_TOPIC_ID
                        if topic_data.get("topic_id")
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    )
                    raise KafkaError(code)
                if records is None or len(records) == 0:
                    raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "produce request without records")
                tp = TopicPartition(name, index)
                info = replica_manager.append_records(tp, records, acks)
                result.update(
                    error_code=0,
                    base_offset=info.first_offset,
                    log_append_time_ms=info.log_append_time,
                    log_start_offset=info.log_start_offset,
                )
                if acks == -1 and replica_manager.committed(tp, info.last_offset + 1) is not ErrorCode.NO_ERROR:
                    waiting.append((result, tp, info.last_offset + 1))
                if metrics is not None and not info.duplicate:
                    metrics.on_produce(name, info.valid_bytes, info.record_count)
            except KafkaError as e:
                failed.append(f"{name or topic_data.get('topic_id')}-{index}: {e.code.name}")
                result["error_code"] = e.code
                if metrics is not None:
                    metrics.on_error("PRODUCE", e.code)
                if e.message != e.code.name:
                    result["error_message"] = e.message
                if isinstance(e, RecordValidationError):
                    result["record_errors"] = [
                        {"batch_index": i, "batch_index_error_message": why} for i, why in e.record_errors
                    ]
                level = logging.DEBUG if e.code.retriable else logging.INFO
                log.log(
                    level,
                    "Produce to %s-%s from %s failed: %s (%s)",
                    name,
                    index,
                    ctx.client,
                    e.code.name,
                    e.message,
                )
            partition_responses.append(result)
        responses.append(
            {
                "name": name or "",
                "topic_id": topic_data.get("topic_id"),
                "partition_responses": partition_responses,
            }
        )
    if acks == 0:
        # The producer reads no response, so an error could not reach it: as Kafka does, the broker
        # closes the connection, and the producer refreshes its metadata and reconnects.
        if failed:
            raise CloseConnection(
                f"an acks=0 Produce from {ctx.client} (correlation id {ctx.correlation_id}) failed,"
                f" closing its connection so that the producer refreshes its metadata: {', '.join(failed)}"
            )
        return None
    if waiting:
        timeout_s = max(request.get("timeout_ms", 0), 0) / 1000.0
        codes = await asyncio.gather(*(replica_manager.wait_for_commit(tp, end, timeout_s) for _, tp, end in waiting))
        for (result, tp, _), code in zip(waiting, codes, strict=True):
            if code:
                result["error_code"] = code
                log.debug("Produce to %s from %s not committed: %s", tp, ctx.client, code.name)
    return {"responses": responses, "throttle_time_ms": 0, "node_endpoints": _leader_hints(ctx, responses)}


def _leader_hints(ctx: RequestContext, responses: list[Body]) -> list[Body]:
    """KIP-951: each partition refused because this broker does not lead it gets the leader (and its epoch) this
    broker knows, and the response the endpoints of those leaders, so that the producer sends there at once rather
    than after a metadata refresh (which, just after a leader change, another broker may still answer with the
    old leader). Tagged fields: older versions and clients that ignore them see nothing."""
    store = ctx.services.metadata
    leaders: set[int] = set()
    for topic in responses:
        state = store.topic(topic["name"]) if topic["name"] else None
        if state is None:
            continue
        for result in topic["partition_responses"]:
            if result.get("error_code") not in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
                continue
            index = result["index"]
            if not 0 <= index < len(state.partitions):
                continue
            partition = state.partitions[index]
            if partition.leader >= 0 and partition.leader != ctx.services.node_id:
                result["current_leader"] = {"leader_id": partition.leader, "leader_epoch": partition.leader_epoch}
                leaders.add(partition.leader)
    return [
        {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
        for b in store.brokers()
        if b.node_id in leaders
    ]
