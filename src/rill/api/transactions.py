"""Transaction APIs answered by the transaction coordinator: AddPartitionsToTxn (24), AddOffsetsToTxn (25),
EndTxn (26), DescribeTransactions (65), ListTransactions (66). InitProducerId is in ``init_producer_id``,
TxnOffsetCommit (answered by the group coordinator) in ``txn_offset_commit``."""

from __future__ import annotations

import contextlib
from typing import Any

from rill.api._authorized import AclOperation, ResourceType, authorize, authorize_cluster, filter_authorized
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.metadata.store import OFFSETS_TOPIC
from rill.protocol import ApiKey


def txn_coordinator_of(ctx: RequestContext) -> Any:
    return ctx.services.txn_coordinator


def fenced_for_version(code: ErrorCode, version: int, first_version: int) -> ErrorCode:
    """Clients before PRODUCER_FENCED existed (below ``first_version`` of the API) are told
    INVALID_PRODUCER_EPOCH instead, as Kafka does."""
    if code == ErrorCode.PRODUCER_FENCED and version < first_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


# -- AddPartitionsToTxn --------------------------------------------------------------------------------------


def _partitions(topics: list[Body]) -> list[TopicPartition]:
    return [TopicPartition(t["name"], p) for t in topics for p in t["partitions"]]


def _topic_results(results: dict[TopicPartition, ErrorCode]) -> list[Body]:
    by_topic: dict[str, list[Body]] = {}
    for tp, code in results.items():
        by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "partition_error_code": code})
    return [{"name": name, "results_by_partition": parts} for name, parts in by_topic.items()]


def may_write_txn(ctx: RequestContext, transactional_id: str) -> bool:
    return authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


async def _add_one(ctx: RequestContext, txn: Body, verify_only: bool) -> dict[TopicPartition, ErrorCode]:
    coordinator = txn_coordinator_of(ctx)
    tps = _partitions(txn["topics"])
    if not may_write_txn(ctx, txn["transactional_id"]):
        return dict.fromkeys(tps, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    writable = {t for t in {tp.topic for tp in tps} if authorize(ctx, AclOperation.WRITE, ResourceType.TOPIC, t)}
    if len(writable) < len({tp.topic for tp in tps}):  # nothing is added when a topic is refused
        return {tp: ErrorCode.OPERATION_NOT_ATTEMPTED if tp.topic in writable else ErrorCode.TOPIC_AUTHORIZATION_FAILED
                for tp in tps}  # fmt: skip
    if coordinator is None:
        return dict.fromkeys(tps, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    store = ctx.services.metadata
    missing = set()
    for tp in tps:
        topic = store.topic(tp.topic)
        if topic is None or not 0 <= tp.partition < len(topic.partitions):
            missing.add(tp)
    if missing:  # any partition that cannot be added fails the whole request; nothing is added
        return {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in missing else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp in tps}  # fmt: skip
    txn_id, pid, epoch = txn["transactional_id"], txn["producer_id"], txn["producer_epoch"]
    if verify_only:
        code, results = coordinator.verify_partitions(txn_id, pid, epoch, tps)
        if code != ErrorCode.NO_ERROR:
            return dict.fromkeys(tps, code)
        return dict(results)
    code = await coordinator.add_partitions(txn_id, pid, epoch, tps)
    return dict.fromkeys(tps, fenced_for_version(code, ctx.api_version, 2))


@handler(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
async def handle_add_partitions_to_txn(ctx: RequestContext, request: Body) -> Body:
    if ctx.api_version < 4:
        txn = {
            "transactional_id": request["v3_and_below_transactional_id"],
            "producer_id": request["v3_and_below_producer_id"],
            "producer_epoch": request["v3_and_below_producer_epoch"],
            "topics": request["v3_and_below_topics"],
        }
        results = await _add_one(ctx, txn, False)
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(results)}
    out = []
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):  # v4+: a broker's batch of verifications
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "results_by_transaction": []}  # fmt: skip
    for txn in request["transactions"]:
        results = await _add_one(ctx, txn, bool(txn.get("verify_only")))
        out.append({"transactional_id": txn["transactional_id"], "topic_results": _topic_results(results)})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "results_by_transaction": out}


# -- AddOffsetsToTxn -----------------------------------------------------------------------------------------


@handler(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
async def handle_add_offsets_to_txn(ctx: RequestContext, request: Body) -> Body:
    if not may_write_txn(ctx, request["transactional_id"]):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request["group_id"]):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    coordinator = txn_coordinator_of(ctx)
    groups = ctx.services.group_coordinator
    if coordinator is None or groups is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    with contextlib.suppress(KafkaError):  # the group's partition is the same before and after its creation
        await groups.manager.maybe_create_offsets_topic()
    tp = TopicPartition(OFFSETS_TOPIC, groups.partition_for(request["group_id"]))
    code = await coordinator.add_partitions(
        request["transactional_id"], request["producer_id"], request["producer_epoch"], [tp]
    )
    return {"throttle_time_ms": 0, "error_code": fenced_for_version(code, ctx.api_version, 2)}


# -- EndTxn --------------------------------------------------------------------------------------------------


@handler(ApiKey.END_TXN, 0, 4)
async def handle_end_txn(ctx: RequestContext, request: Body) -> Body:
    if not may_write_txn(ctx, request["transactional_id"]):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    coordinator = txn_coordinator_of(ctx)
    if coordinator is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    code = await coordinator.end_transaction(
        request["transactional_id"], request["producer_id"], request["producer_epoch"], bool(request["committed"])
    )
    return {"throttle_time_ms": 0, "error_code": fenced_for_version(code, ctx.api_version, 2)}


# -- DescribeTransactions / ListTransactions -----------------------------------------------------------------


@handler(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
async def handle_describe_transactions(ctx: RequestContext, request: Body) -> Body:
    coordinator = txn_coordinator_of(ctx)
    states = []
    for txn_id in request["transactional_ids"]:
        entry: Body = {
            "transactional_id": txn_id,
            "transaction_state": "",
            "transaction_timeout_ms": 0,
            "transaction_start_time_ms": -1,
            "producer_id": -1,
            "producer_epoch": -1,
            "topics": [],
        }
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            entry["error_code"] = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            states.append(entry)
            continue
        if coordinator is None:
            entry["error_code"] = ErrorCode.COORDINATOR_NOT_AVAILABLE
            states.append(entry)
            continue
        code, md = coordinator.describe(txn_id)
        entry["error_code"] = code
        if md is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(md.partitions, key=lambda t: (t.topic, t.partition)):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            # only the topics the caller may describe, as Kafka does
            visible = filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, by_topic)
            by_topic = {t: ps for t, ps in by_topic.items() if t in visible}
            entry.update(
                transaction_state=md.state.display,
                transaction_timeout_ms=md.txn_timeout_ms,
                transaction_start_time_ms=md.txn_start_ms,
                producer_id=md.producer_id,
                producer_epoch=md.producer_epoch,
                topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            )
        states.append(entry)
    return {"throttle_time_ms": 0, "transaction_states": states}


@handler(ApiKey.LIST_TRANSACTIONS, 0, 1)
async def handle_list_transactions(ctx: RequestContext, request: Body) -> Body:
    coordinator = txn_coordinator_of(ctx)
    if coordinator is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                "unknown_state_filters": [], "transaction_states": []}  # fmt: skip
    code, unknown, found = coordinator.list_transactions(
        list(request.get("state_filters") or []),
        list(request.get("producer_id_filters") or []),
        request.get("duration_filter", -1) if ctx.api_version >= 1 else -1,
    )
    # only the ids the caller may describe (Describe on the cluster does not stand for it, as in Kafka)
    visible = filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                (md.transactional_id for md in found))  # fmt: skip
    found = [md for md in found if md.transactional_id in visible]
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "unknown_state_filters": unknown,
        "transaction_states": [
            {
                "transactional_id": md.transactional_id,
                "producer_id": md.producer_id,
                "transaction_state": md.state.display,
            }
            for md in found
        ],
    }
