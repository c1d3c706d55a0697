"""AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92): set or forget the share-partition start offsets of an
empty share group (KIP-932), as Kafka 4.2 serves them (version 0).

Alter needs READ on the group and on each topic; Delete DELETE on the group and READ on each topic. Both are
answered by the group's coordinator (NOT_COORDINATOR elsewhere, so a reset never goes by a broker that does not know
the group's members). A group with members answers NON_EMPTY_GROUP, a group id that belongs to a consumer group
GROUP_ID_NOT_FOUND, both for the whole request. Every partition is checked before anything is written: a topic the
caller may not read answers TOPIC_AUTHORIZATION_FAILED, a topic or partition that does not exist
UNKNOWN_TOPIC_OR_PARTITION, a start offset below 0 INVALID_REQUEST and, for a partition this broker leads, one past
its high watermark OFFSET_OUT_OF_RANGE; those change nothing, and the others are
written together at their share coordinators (a new state epoch; the share-partition leader reads the state
again). Delete forgets every partition's state of each topic named, wherever its share coordinator is. Alter of
a group that does not exist
creates it (empty), so offsets can be set before its first consumer starts; Delete of one answers
GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

import logging
import uuid

from rill.api._authorized import AclOperation, ResourceType, authorize
from rill.api._topics import ZERO_UUID
from rill.api.context import RequestContext
from rill.api.groups import writing_coordinator_of
from rill.api.registry import Body, handler
from rill.api.share_groups import ShareServices, coordinated_services
from rill.common import TopicPartition
from rill.coordinator.share.share_group_coordinator import ShareGroup
from rill.coordinator.share.share_partition_manager import now_ms
from rill.errors import ErrorCode
from rill.protocol import ApiKey

log = logging.getLogger(__name__)


async def _group_refusal(
    ctx: RequestContext, share: ShareServices, group_id: str, must_exist: bool
) -> tuple[ErrorCode, str | None]:
    """Why the whole request is refused, if it is: not this group's coordinator, not a share group, unknown
    (``must_exist``), not empty."""
    coordinator = await writing_coordinator_of(ctx)
    if coordinator is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
    not_serving = coordinator.not_serving(group_id)
    if not_serving is not None:
        return not_serving, None
    if coordinator.consumer.is_consumer_group(group_id) or group_id in coordinator.groups:
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
    group = share.coordinator.groups.get(group_id)
    if group is not None:
        share.coordinator.expire_members(group, now_ms())
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP, f"Share group {group_id} is not empty: it has {len(group.members)} " \
                "members. Stop its consumers first."  # fmt: skip
    elif must_exist and not share.partitions.has_state(group_id):
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found."
    return ErrorCode.NO_ERROR, None


async def _persist(share: ShareServices, group_id: str) -> None:
    """The group's records follow (a failure is logged: they are written again at the group's next change)."""
    if share.store is not None and (code := await share.store.persist(group_id)) != ErrorCode.NO_ERROR:
        log.warning("Share group %s: its records in __consumer_offsets were not written: %s", group_id, code.name)


def _leads(ctx: RequestContext, name: str, partition: int) -> tuple[ErrorCode, int]:
    """NO_ERROR and the high watermark when this broker leads the partition, else its error."""
    read = ctx.services.replica_manager.read(TopicPartition(name, partition), 0, 0, min_one_batch=False)
    if read.error not in (ErrorCode.NO_ERROR, ErrorCode.OFFSET_OUT_OF_RANGE) or read.high_watermark < 0:
        return read.error or ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
    return ErrorCode.NO_ERROR, read.high_watermark


# -- AlterShareGroupOffsets --------------------------------------------------------------------------------


def _alter_refused(request: Body, code: ErrorCode, message: str | None) -> Body:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": [
        {"topic_name": t["topic_name"], "topic_id": ZERO_UUID, "partitions": [
            {"partition_index": p["partition_index"], "error_code": code, "error_message": message}
            for p in t["partitions"]]}
        for t in request["topics"]]}  # fmt: skip


@handler(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0)
async def handle_alter_share_group_offsets(ctx: RequestContext, request: Body) -> Body:
    group_id = request["group_id"]
    if not group_id:
        return _alter_refused(request, ErrorCode.INVALID_GROUP_ID, "The group id is empty.")
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return _alter_refused(request, ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    share = coordinated_services(ctx)
    code, message = await _group_refusal(ctx, share, group_id, must_exist=False)
    if code:
        return _alter_refused(request, code, message)
    metadata = ctx.services.metadata
    wanted: dict[tuple[uuid.UUID, int], int] = {}
    responses = []
    for t in request["topics"]:
        name = t["topic_name"]
        topic = metadata.topic(name)
        readable = authorize(ctx, AclOperation.READ, ResourceType.TOPIC, name)
        rows = []
        for p in t["partitions"]:
            index, offset = p["partition_index"], p["start_offset"]
            code, message = ErrorCode.NO_ERROR, None
            if not readable:
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or topic.internal or not 0 <= index < len(topic.partitions):
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{name}-{index} does not exist."
            elif offset < 0:
                code, message = ErrorCode.INVALID_REQUEST, f"The start offset {offset} of {name}-{index} is negative."
            else:  # checked against the high watermark where this broker leads the partition; elsewhere, as
                # Kafka's group coordinator, not (the leader clips a start below its log start when it reads it)
                leads, high_watermark = _leads(ctx, name, index)
                if leads == ErrorCode.NO_ERROR and offset > high_watermark:
                    code = ErrorCode.OFFSET_OUT_OF_RANGE
                    message = f"The start offset {offset} of {name}-{index} is past its log end {high_watermark}."
            if code == ErrorCode.NO_ERROR:
                assert topic is not None
                wanted[(topic.topic_id, index)] = offset
            rows.append({"partition_index": index, "error_code": code, "error_message": message})
        topic_id = topic.topic_id if topic is not None and readable else ZERO_UUID
        responses.append({"topic_name": name, "topic_id": topic_id, "partitions": rows})
    if wanted:
        group = share.coordinator.groups.setdefault(group_id, ShareGroup(group_id))
        for t in request["topics"]:  # the group's records name the topics it has state of
            topic = metadata.topic(t["topic_name"])
            if topic is not None and any(k[0] == topic.topic_id for k in wanted):
                group.state_topics[topic.name] = len(topic.partitions)
        group.group_epoch += 1
        failed = await share.partitions.alter_start_offsets(group_id, wanted)
        await _persist(share, group_id)
        log.info("Share group %s: start offsets of %d partitions altered by %s", group_id, len(wanted) - len(failed),
                 ctx.client)  # fmt: skip
        for t, r in zip(request["topics"], responses, strict=True):
            topic = metadata.topic(t["topic_name"])
            for row in r["partitions"]:
                lost = failed.get((topic.topic_id, row["partition_index"])) if topic is not None else None
                if lost:
                    row["error_code"], row["error_message"] = lost, "The share state could not be written now."
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None, "responses": responses}


# -- DeleteShareGroupOffsets -------------------------------------------------------------------------------


def _delete_refused(code: ErrorCode, message: str | None) -> Body:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": []}


@handler(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0)
async def handle_delete_share_group_offsets(ctx: RequestContext, request: Body) -> Body:
    group_id = request["group_id"]
    if not group_id:
        return _delete_refused(ErrorCode.INVALID_GROUP_ID, "The group id is empty.")
    if not authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, group_id):
        return _delete_refused(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    share = coordinated_services(ctx)
    code, message = await _group_refusal(ctx, share, group_id, must_exist=True)
    if code:
        return _delete_refused(code, message)
    metadata = ctx.services.metadata
    forget: list[tuple[uuid.UUID, int]] = []
    responses = []
    for t in request["topics"]:
        name = t["topic_name"]
        topic = metadata.topic(name)
        code, message = ErrorCode.NO_ERROR, None
        if not authorize(ctx, AclOperation.READ, ResourceType.TOPIC, name):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif topic is None or topic.internal:
            code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist."
        else:  # every partition's state, wherever its share coordinator is (none kept: nothing to delete)
            forget.extend((topic.topic_id, p) for p in range(len(topic.partitions)))
        topic_id = topic.topic_id if topic is not None and code != ErrorCode.TOPIC_AUTHORIZATION_FAILED else ZERO_UUID
        responses.append({"topic_name": name, "topic_id": topic_id, "error_code": code, "error_message": message})
    if forget:
        failed = await share.partitions.delete_state(group_id, forget)
        group = share.coordinator.groups.get(group_id)
        if group is not None:
            gone = {tid for tid, _ in forget} - {tid for tid, _ in failed}
            for r in responses:
                topic = metadata.topic(r["topic_name"])
                if topic is not None and topic.topic_id in gone:
                    group.state_topics.pop(topic.name, None)
            group.group_epoch += 1
            await _persist(share, group_id)
        log.info("Share group %s: state of %d partitions deleted by %s", group_id, len(forget) - len(failed),
                 ctx.client)  # fmt: skip
        for r in responses:
            topic = metadata.topic(r["topic_name"])
            codes = [c for (tid, _), c in failed.items() if topic is not None and tid == topic.topic_id]
            if codes and not r["error_code"]:
                r["error_code"], r["error_message"] = codes[0], "The share state could not be deleted now."
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None, "responses": responses}
