"""Produce (0): validate and append record batches to partition leaders; acks 0, 1 and all.

Every partition is appended first; then, with acks=all, the request waits (in the produce purgatory, up to its
``timeout_ms``) for the partitions whose records are not yet committed, all at once. That wait is the answer's
only: where the context allows it (no client quotas), the handler returns it as a ``DeferredBody`` and the
connection goes on with its next Produce meanwhile, appending it in order and answering both in order, so that a
producer's pipelined requests to a replicated partition are not each held behind the previous one's replication
(Kafka mutes the connection until the answer is sent).

Transactional batches need the request's ``transactional_id`` (without it: TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
as Kafka answers when the id is not authorized) and a producer id. A transactional batch that would open a
transaction on a partition (its producer has none ongoing there) is first put to the replica manager's
``txn_verifier`` (KIP-890), when one is set: any answer other than NO_ERROR is the partition's error, and nothing
is appended.

As in Kafka, Produce v3+ carries exactly one record batch per partition, of magic 2 (and not zstd before v7): a
partition's records that hold more are refused with INVALID_RECORD before anything else looks at them, so every
check here (the transactional id's WRITE ACL, the producer id, KIP-890 verification) sees the whole of what would
be written. The coordinators' internal topics (``__consumer_offsets``, ``__transaction_state``) are written by
their coordinators only, through the replica manager: a Produce to one is refused with INVALID_TOPIC_EXCEPTION
(Kafka lets a client whose client id is ``__admin_client`` through; Rill lets none, since a client id proves
nothing)."""

from __future__ import annotations

import asyncio
import logging
import struct

from rill.api._authorized import AclOperation, ResourceType, authorize
from rill.api._topics import LeaderHints, resolve_topic_name
from rill.api.context import RequestContext
from rill.api.registry import Body, DeferredBody, handler
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError, RecordValidationError
from rill.log.producer_state import VerificationGuard
from rill.metadata.store import INTERNAL_TOPICS
from rill.network.handler import CloseConnection
from rill.protocol import ApiKey
from rill.records.batch import (
    ATTRIBUTES_POS,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    LENGTH_POS,
    LOG_OVERHEAD,
    MAGIC_POS,
    MAGIC_V2,
    TRANSACTIONAL_MASK,
    parse_header,
)
from rill.records.compression import ZSTD
from rill.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

_INT32 = struct.Struct(">i")


@handler(ApiKey.PRODUCE, 3, 13)
async def handle_produce(ctx: RequestContext, request: Body) -> Body | DeferredBody | None:
    acks = request["acks"]
    version = ctx.api_version
    replica_manager = ctx.services.replica_manager
    metrics = ctx.services.metrics
    transactional_id: str | None = request.get("transactional_id")
    failed: list[str] = []  # "topic-partition: error" of each partition refused
    responses: list[Body] = []
    waiting: list[tuple[Body, TopicPartition, int]] = []  # acks=all results whose records are not committed yet
    txn_allowed = transactional_id is None or authorize(
        ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
    )
    for topic_data in request["topic_data"]:
        name = resolve_topic_name(ctx, topic_data)
        writable = name is None or authorize(ctx, AclOperation.WRITE, ResourceType.TOPIC, name)
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
                # Kafka's order: the transactional id's and the topic's authorization, the topic's existence,
                # then the records' shape (one batch of magic 2), so a refusal tells nothing it should not.
                if records is not None and _is_transactional(records) and not txn_allowed:
                    raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                if not writable:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if name is None:
                    code = (
                        ErrorCode.UNKNOWN_TOPIC_ID
                        if topic_data.get("topic_id")
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    )
                    raise KafkaError(code)
                if records is None or len(records) == 0:
                    raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "produce request without records")
                _check_records(records, version)
                if name in INTERNAL_TOPICS:
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {name}")
                tp = TopicPartition(name, index)
                guard = None
                if _is_transactional(records):
                    guard = await _verify_transactional(replica_manager, transactional_id, tp, records)
                info = replica_manager.append_records(tp, records, acks, verification_guard=guard)
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
    if not waiting:
        return _response(ctx, responses)
    timeout_s = max(request.get("timeout_ms", 0), 0) / 1000.0
    answer = _after_commit(ctx, replica_manager, waiting, responses, timeout_s)
    return DeferredBody(answer) if ctx.may_defer else await answer


async def _after_commit(
    ctx: RequestContext,
    replica_manager: ReplicaManager,
    waiting: list[tuple[Body, TopicPartition, int]],
    responses: list[Body],
    timeout_s: float,
) -> Body:
    """The answer to an acks=all Produce once every partition's records are committed (or could not be)."""
    codes = await asyncio.gather(*(replica_manager.wait_for_commit(tp, end, timeout_s) for _, tp, end in waiting))
    for (result, tp, _), code in zip(waiting, codes, strict=True):
        if code:
            result["error_code"] = code
            log.debug("Produce to %s from %s not committed: %s", tp, ctx.client, code.name)
    return _response(ctx, responses)


def _response(ctx: RequestContext, responses: list[Body]) -> Body:
    hints = LeaderHints(ctx)
    for topic in responses:
        for result in topic["partition_responses"]:
            hints.add(result, topic["name"] or None, result["index"])
    return {"responses": responses, "throttle_time_ms": 0, "node_endpoints": hints.node_endpoints()}


def _check_records(records: memoryview, version: int) -> None:
    """What Produce v3+ requires of a partition's records (Kafka's ``ProduceRequest.validateRecords``): a batch of
    magic 2 (INVALID_RECORD), not zstd before v7 (UNSUPPORTED_COMPRESSION_TYPE), and exactly one batch: bytes
    after the first one are refused (INVALID_RECORD). Records too short for a batch header, or a first batch
    longer than the records, are left to the log's checks (CORRUPT_MESSAGE)."""
    size = len(records)
    if size < BATCH_HEADER_SIZE:
        return
    if records[MAGIC_POS] != MAGIC_V2:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} are only allowed to contain record batches with magic"
            f" version {MAGIC_V2}, not {records[MAGIC_POS]}",
        )
    if version < 7 and records[ATTRIBUTES_POS + 1] & COMPRESSION_MASK == ZSTD:
        raise KafkaError(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {version} are not allowed to use ZStandard compression",
        )
    end = LOG_OVERHEAD + _INT32.unpack_from(records, LENGTH_POS)[0]
    if BATCH_HEADER_SIZE <= end < size:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} are only allowed to contain exactly one record batch"
            f" per partition ({size - end} bytes follow the first batch of {end})",
        )


def _is_transactional(records: memoryview) -> bool:
    return len(records) >= BATCH_HEADER_SIZE and bool(records[ATTRIBUTES_POS + 1] & TRANSACTIONAL_MASK)


async def _verify_transactional(
    replica_manager: ReplicaManager, transactional_id: str | None, tp: TopicPartition, records: memoryview
) -> VerificationGuard | None:
    """Refuse (KafkaError) transactional records without a transactional id or producer id, or that the
    verifier does not allow to open a transaction on ``tp``; the guard of the verification (for the append to
    check that the transaction did not end meanwhile), None when none was needed."""
    if transactional_id is None:
        raise KafkaError(
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactional records without a transactional id"
        )
    if parse_header(records).producer_id < 0:  # the one batch (``_check_records``)
        raise KafkaError(ErrorCode.INVALID_RECORD, "a transactional batch without a producer id")
    verify = replica_manager.needs_txn_verification(tp, records)
    verifier = replica_manager.txn_verifier
    if verify is not None and verifier is not None:
        code = await verifier(transactional_id, verify.producer_id, verify.producer_epoch, tp)
        if code != ErrorCode.NO_ERROR:
            raise KafkaError(code, f"producer {verify.producer_id} may not start a transaction on {tp}")
    return verify
