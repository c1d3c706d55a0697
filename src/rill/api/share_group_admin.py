"""The share-group APIs a group's coordinator answers besides ShareGroupHeartbeat: ShareGroupDescribe (77),
DescribeShareGroupOffsets (90), and the share groups' part of ListGroups and DeleteGroups.

Only the group's coordinator answers for a group (NOT_COORDINATOR elsewhere; ListGroups lists the groups a broker
coordinates, DeleteGroups leaves the others to theirs). The coordinator knows a group by its members and by its
records in ``__consumer_offsets`` (``rill.coordinator.share.share_group_store``), and, for a group written before
those records existed, by the state its share coordinator keeps here. ShareGroupDescribe needs DESCRIBE on each
group, DescribeShareGroupOffsets DESCRIBE on the group and on each topic."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from rill.api._authorized import AclOperation, ResourceType, authorize, authorized_operations
from rill.api._topics import ZERO_UUID
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.api.share_groups import ShareServices, coordinated_services, not_serving
from rill.coordinator.share.share_group_coordinator import ShareGroup
from rill.coordinator.share.share_partition_manager import now_ms
from rill.errors import ErrorCode
from rill.protocol import ApiKey


def _none_here(ctx: RequestContext) -> bool:
    """No share group used since the start, none loaded, none with a state here: nothing to make them for."""
    if ctx.services.share is not None:
        return False
    coordinator, groups = ctx.services.share_coordinator, ctx.services.group_coordinator
    return not (coordinator is not None and coordinator.groups()) and not (
        groups is not None and groups.manager.share_groups_seen)


def is_share_group(ctx: RequestContext, group_id: str) -> bool:
    """Whether ``group_id`` is a share group this broker coordinates: a classic or consumer group cannot take its
    id (OffsetCommit, JoinGroup and ConsumerGroupHeartbeat answer GROUP_ID_NOT_FOUND, as Kafka's do)."""
    if _none_here(ctx) or not_serving(ctx, group_id) is not None:
        return False
    return group_id in coordinated_services(ctx).coordinator.groups


def list_share_groups(ctx: RequestContext, states: set[str] | None) -> list[tuple[str, str]]:
    """(group id, state) of the share groups this broker coordinates, for ListGroups."""
    if _none_here(ctx):
        return []
    share = coordinated_services(ctx)
    coordinator = share.coordinator
    coordinator.expire_all(now_ms())
    listed = [(g.group_id, g.state) for g in coordinator.groups.values()]
    # a group with a persisted state and no record (written before groups had records) is an empty group
    listed += [(g, "Empty") for g in share.partitions.groups_with_state() if g not in coordinator.groups]
    return [(gid, state) for gid, state in sorted(listed)
            if (states is None or state in states) and not_serving(ctx, gid) is None]  # fmt: skip


async def delete_share_groups(ctx: RequestContext, names: list[str]) -> dict[str, ErrorCode]:
    """DeleteGroups of the share groups among ``names`` this broker coordinates (the others are left out of the
    answer): an empty one is deleted with its state and its records, one with members answers NON_EMPTY_GROUP."""
    if _none_here(ctx):
        return {}
    share = coordinated_services(ctx)
    share.coordinator.expire_all(now_ms())
    store = share.store
    results: dict[str, ErrorCode] = {}
    for name in names:
        if not_serving(ctx, name) is not None:
            continue  # (answered as any group this broker does not coordinate)
        if store is None:
            code = await _delete(ctx, share, name)
        else:
            async with store.lock(name):  # a join meanwhile waits for its write until the tombstones are written
                store.follow_leadership()
                code = await _delete(ctx, share, name)
        if code is not None:
            results[name] = code
    return results


async def _delete(ctx: RequestContext, share: ShareServices, name: str) -> ErrorCode | None:
    """Delete one share group (None: no such share group here)."""
    if not_serving(ctx, name) is not None:
        return ErrorCode.NOT_COORDINATOR
    group = share.coordinator.groups.get(name)
    if group is None and not share.partitions.has_state(name):
        return None
    if group is not None and group.members:
        return ErrorCode.NON_EMPTY_GROUP
    share.coordinator.groups.pop(name, None)  # (a member joining meanwhile makes a new group)
    keys = partitions_of(ctx, _state_topics(group))
    if ctx.services.share_coordinator is not None:  # and those whose state this broker's coordinator keeps
        keys += ctx.services.share_coordinator.keys_of(name)
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE  # the state stays, and so do the group's records
    if not await share.partitions.delete_group(name, keys):
        code = await share.store.delete_locked(name) if share.store is not None else ErrorCode.NO_ERROR
    if code != ErrorCode.NO_ERROR and group is not None:
        share.coordinator.groups.setdefault(name, group)
    return code


def _state_topics(group: ShareGroup | None) -> list[str]:
    return [] if group is None else sorted({*group.state_topics, *group.topics_seen})


def partitions_of(ctx: RequestContext, topics: Iterable[str]) -> list[tuple[uuid.UUID, int]]:
    """Every partition of the named topics that exist, as (topic id, partition)."""
    out = []
    for name in topics:
        topic = ctx.services.metadata.topic(name)
        if topic is not None:
            out += [(topic.topic_id, p) for p in range(len(topic.partitions))]
    return out


# -- ShareGroupDescribe ------------------------------------------------------------------------------------


@handler(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1)
async def handle_share_group_describe(ctx: RequestContext, request: Body) -> Body:
    include = bool(request.get("include_authorized_operations"))
    groups = []
    for group_id in request["group_ids"]:
        body: Body = {"group_id": group_id, "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
                      "assignor_name": "", "members": []}  # fmt: skip
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append({**body, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED})
            continue
        if (code := not_serving(ctx, group_id)) is not None:
            groups.append({**body, "error_code": code})
            continue
        share = coordinated_services(ctx)
        group = share.coordinator.groups.get(group_id)
        if group is None and share.partitions.has_state(group_id):
            group = ShareGroup(group_id)  # kept by its state alone (written before groups had records): Empty
        if group is None:
            groups.append({**body, "error_code": ErrorCode.GROUP_ID_NOT_FOUND,
                           "error_message": f"Group {group_id} not found."})  # fmt: skip
            continue
        share.coordinator.expire_members(group, now_ms())
        members = []
        for m in group.members.values():
            topics = []
            for topic_id, parts in sorted(m.assignment.items()):
                topic = ctx.services.metadata.topic_by_id(topic_id)
                topics.append({"topic_id": topic_id, "topic_name": topic.name if topic else "", "partitions": parts})
            members.append({"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                            "client_id": m.client_id, "client_host": m.client_host,
                            "subscribed_topic_names": list(m.subscribed),
                            "assignment": {"topic_partitions": topics}})  # fmt: skip
        groups.append({**body, "error_code": ErrorCode.NO_ERROR, "group_state": group.state,
                       "group_epoch": group.group_epoch, "assignment_epoch": group.group_epoch,
                       "assignor_name": "simple", "members": members,
                       "authorized_operations": authorized_operations("group", include, ctx, group_id)})  # fmt: skip
    return {"groups": groups}


# -- DescribeShareGroupOffsets -----------------------------------------------------------------------------


@handler(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 0)
async def handle_describe_share_group_offsets(ctx: RequestContext, request: Body) -> Body:
    """Each group's share-partition start offsets: of the partitions asked for, or (topics null) of every
    partition the group has a state for. A partition the group never fetched answers start offset -1."""
    metadata = ctx.services.metadata
    groups = []
    for g in request["groups"]:
        group_id = g["group_id"]
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append({"group_id": group_id, "topics": [], "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED})
            continue
        if (code := not_serving(ctx, group_id)) is not None:
            groups.append({"group_id": group_id, "topics": [], "error_code": code})
            continue
        share = coordinated_services(ctx)
        known = share.coordinator.groups.get(group_id)
        asked = [] if g["topics"] is None else [t["topic_name"] for t in g["topics"]]
        keys = partitions_of(ctx, [*asked, *_state_topics(known)])
        if g["topics"] is None and ctx.services.share_coordinator is not None:  # and those its state is kept of here
            keys += ctx.services.share_coordinator.keys_of(group_id)
        starts = await share.partitions.read_start_offsets(group_id, keys)
        if not starts and known is None:
            groups.append({"group_id": group_id, "topics": [], "error_code": ErrorCode.GROUP_ID_NOT_FOUND,
                           "error_message": f"Group {group_id} not found."})  # fmt: skip
            continue
        wanted: dict[str, list[int]] = {}
        if g["topics"] is None:
            for topic_id, p in sorted(starts):
                topic = metadata.topic_by_id(topic_id)
                if topic is not None:
                    wanted.setdefault(topic.name, []).append(p)
        else:
            for t in g["topics"]:
                wanted.setdefault(t["topic_name"], []).extend(t["partitions"])
        topics = []
        for name, parts in wanted.items():
            topic = metadata.topic(name)
            topic_id = topic.topic_id if topic is not None else ZERO_UUID
            denied = not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)
            rows = []
            for p in parts:
                if denied:
                    code, start, epoch = ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, -1
                elif topic is None or p >= len(topic.partitions):
                    code, start, epoch = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
                else:
                    code, start = ErrorCode.NO_ERROR, starts.get((topic_id, p), -1)
                    epoch = topic.partitions[p].leader_epoch
                rows.append({"partition_index": p, "start_offset": start, "leader_epoch": epoch, "error_code": code})
            topics.append({"topic_name": name, "topic_id": topic_id, "partitions": rows})
        groups.append({"group_id": group_id, "topics": topics, "error_code": ErrorCode.NO_ERROR})
    return {"groups": groups}

