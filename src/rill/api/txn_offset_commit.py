"""TxnOffsetCommit (28): a transactional producer's offsets for a consumer group, answered by the group
coordinator and made visible by the transaction's commit marker."""

from __future__ import annotations

import time

from rill.api._authorized import AclOperation, ResourceType, authorize
from rill.api._topics import partition_errors
from rill.api.context import RequestContext
from rill.api.groups import writing_coordinator_of
from rill.api.registry import Body, handler
from rill.common import TopicPartition
from rill.coordinator.group.group_metadata import OffsetAndMetadata
from rill.errors import ErrorCode
from rill.protocol import ApiKey


@handler(ApiKey.TXN_OFFSET_COMMIT, 0, 4)
async def handle_txn_offset_commit(ctx: RequestContext, request: Body) -> Body:
    coordinator = await writing_coordinator_of(ctx)
    now = int(time.time() * 1000)
    errors: dict[TopicPartition, ErrorCode] = {}
    to_commit: dict[TopicPartition, OffsetAndMetadata] = {}
    store = ctx.services.metadata
    refusal = None  # WRITE on the transactional id and READ on the group, or every partition is refused
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request["transactional_id"]):
        refusal = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request["group_id"]):
        refusal = ErrorCode.GROUP_AUTHORIZATION_FAILED
    for topic in request["topics"]:
        state = store.topic(topic["name"])
        readable = authorize(ctx, AclOperation.READ, ResourceType.TOPIC, topic["name"])
        for p in topic["partitions"]:
            tp = TopicPartition(topic["name"], p["partition_index"])
            if refusal is not None or not readable:
                errors[tp] = refusal or ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if state is None or not 0 <= tp.partition < len(state.partitions):
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            to_commit[tp] = OffsetAndMetadata(
                offset=p["committed_offset"],
                leader_epoch=p.get("committed_leader_epoch", -1),
                metadata=p.get("committed_metadata") or "",
                commit_timestamp=now,
            )
    if to_commit:
        if coordinator is None:
            errors.update(dict.fromkeys(to_commit, ErrorCode.COORDINATOR_NOT_AVAILABLE))
        else:
            member = (request.get("member_id", ""), request.get("group_instance_id"), request.get("generation_id", -1))
            if coordinator.consumer.is_consumer_group(request["group_id"]):  # KIP-848: checked by member epoch
                error = coordinator.consumer.validate_offset_commit(
                    request["group_id"], member[0], member[2], ctx.api_version, transactional=True
                )
                member = ("", None, -1)  # checked: stored as the group's offsets are
                if error != ErrorCode.NO_ERROR:
                    errors.update(dict.fromkeys(to_commit, error))
                    to_commit = {}
            if to_commit:
                errors.update(
                    await coordinator.txn_commit_offsets(
                        request["group_id"], request["transactional_id"], request["producer_id"],
                        request["producer_epoch"], *member, to_commit,
                    )
                )
    return {"throttle_time_ms": 0, "topics": partition_errors(request["topics"], errors)}
