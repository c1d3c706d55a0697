"""Share groups (KIP-932): ShareGroupHeartbeat (76), ShareGroupDescribe (77), ShareFetch (78),
ShareAcknowledge (79), DescribeShareGroupOffsets (90); Alter/DeleteShareGroupOffsets are in
``share_group_offsets``.

Membership is kept by :mod:`rill.coordinator.share.share_group_coordinator`; fetching and acknowledging by the
partition leader's :mod:`rill.coordinator.share.share_partition_manager`. ShareGroupDescribe needs DESCRIBE on
each group; the other APIs READ on the group, and ShareFetch and ShareAcknowledge READ on each topic (a partition
of a topic the caller may not read answers TOPIC_AUTHORIZATION_FAILED)."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rill.api._authorized import AclOperation, ResourceType, authorize, authorized_operations
from rill.api._endpoints import broker_endpoints
from rill.api._quotas import quota_client_id, quota_user
from rill.api._topics import ZERO_UUID
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.cluster.network_client import NetworkClient
from rill.coordinator.share.share_group_coordinator import ShareGroup, ShareGroupCoordinator
from rill.coordinator.share.share_partition_manager import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    PartitionFetch,
    SharePartitionManager,
    ShareTopicPartition,
    now_ms,
)
from rill.coordinator.share.share_persister import DefaultStatePersister
from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.security.inter_broker import client_config

log = logging.getLogger(__name__)

LEGACY_STATE_DIR = "__share_group_state"  # where earlier versions kept each group's state, one JSON file each


@dataclass(slots=True)
class ShareServices:
    coordinator: ShareGroupCoordinator
    partitions: SharePartitionManager
    clients: list[NetworkClient] = field(default_factory=list)  # the persister's channel to other brokers

    async def close(self) -> None:
        clients, self.clients[:] = list(self.clients), []
        for client in clients:
            await client.close()


def _persister(services: Any, clients: list[NetworkClient]) -> DefaultStatePersister | None:
    if services.share_coordinator is None:
        return None
    node_id, metadata = services.node_id, services.metadata

    def client() -> NetworkClient:
        if not clients:
            clients.append(NetworkClient(client_config(f"broker-{node_id}-share-persister", services.config)))
        for b in metadata.brokers():
            if b.node_id != node_id:
                clients[0].set_node(b.node_id, b.host, b.port)
        return clients[0]

    return DefaultStatePersister(node_id, services.share_coordinator, client)


def _note_legacy_state(log_dir: Path) -> None:
    legacy = log_dir / LEGACY_STATE_DIR
    if legacy.is_dir() and any(legacy.glob("*.json")):
        log.warning("%s holds share-group state files of an earlier version: they are not read (the state is kept "
                    "in the internal topic %s now; the groups' share partitions start afresh)", legacy,
                    LEGACY_STATE_DIR)  # fmt: skip


def share_services(ctx: RequestContext) -> ShareServices:
    """The broker's share-group parts, made on first use."""
    services = ctx.services
    if services.share is None:
        config = services.config
        metadata = services.metadata

        def topics() -> dict[str, tuple[uuid.UUID, int]]:
            return {name: (t.topic_id, len(t.partitions)) for name, t in metadata.topics().items() if not t.internal}

        _note_legacy_state(Path(config.log_dirs[0]))
        clients: list[NetworkClient] = []
        manager = SharePartitionManager(
            services.replica_manager,
            _persister(services, clients),
            lock_duration_ms=int(config.get("group.share.record.lock.duration.ms")),
            delivery_count_limit=int(config.get("group.share.delivery.count.limit")),
            max_in_flight=int(config.get("group.share.partition.max.record.locks")),
            group_configs=metadata.group_configs,
            stored_groups=services.share_coordinator.groups if services.share_coordinator is not None else tuple,
        )
        coordinator = ShareGroupCoordinator(
            topics,
            session_timeout_ms=int(config.get("group.share.session.timeout.ms")),
            heartbeat_interval_ms=int(config.get("group.share.heartbeat.interval.ms")),
            max_size=int(config.get("group.share.max.size")),
            on_member_gone=manager.release_member,
        )
        services.share = ShareServices(coordinator, manager, clients)
    share: ShareServices = services.share
    return share


def not_serving(ctx: RequestContext, group_id: str) -> ErrorCode | None:
    """Why this broker may not answer for the share group (COORDINATOR_NOT_AVAILABLE, or NOT_COORDINATOR when
    another broker leads the group's ``__consumer_offsets`` partition), else None. A share group's members live
    at its coordinator alone, as a consumer group's do."""
    coordinator = ctx.services.group_coordinator
    if coordinator is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    code: ErrorCode | None = coordinator.not_serving(group_id)
    return code


# -- ShareGroupHeartbeat -----------------------------------------------------------------------------------


@handler(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1)
async def handle_share_group_heartbeat(ctx: RequestContext, request: Body) -> Body:
    group_id = request["group_id"]
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "member_epoch": -1, "heartbeat_interval_ms": 0}
    if (code := not_serving(ctx, group_id)) is not None:
        return {"error_code": code, "member_epoch": -1, "heartbeat_interval_ms": 0}
    share = share_services(ctx)
    interval = share.coordinator.heartbeat_interval_ms
    subscribed = request.get("subscribed_topic_names")
    if subscribed:
        denied = sorted(t for t in subscribed if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, t))
        if denied:
            return {"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    "error_message": f"Not authorized to describe topics {denied}.",
                    "member_epoch": -1, "heartbeat_interval_ms": 0}  # fmt: skip
    result = share.coordinator.heartbeat(
        group_id,
        request["member_id"],
        request["member_epoch"],
        subscribed,
        request.get("rack_id"),
        ctx.client_id or "",
        f"/{ctx.client_host}",
        now_ms(),
    )
    await share.partitions.flush(())  # what a member that left or timed out held is released
    body: Body = {
        "error_code": result.error,
        "error_message": result.message,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval_ms": interval if result.error == ErrorCode.NO_ERROR else 0,
    }
    if result.assignment is not None:
        body["assignment"] = {
            "topic_partitions": [
                {"topic_id": tid, "partitions": parts} for tid, parts in sorted(result.assignment.items())
            ]
        }
    return body


# -- ShareFetch and ShareAcknowledge -----------------------------------------------------------------------


def _topic_partition(ctx: RequestContext, topic_id: uuid.UUID, partition: int) -> ShareTopicPartition:
    topic = ctx.services.metadata.topic_by_id(topic_id) if topic_id != ZERO_UUID else None
    return ShareTopicPartition(topic_id, topic.name if topic is not None else None, partition)


def _may_read(ctx: RequestContext, tp: ShareTopicPartition, cache: dict[uuid.UUID, bool]) -> bool:
    if tp.topic is None:
        return True  # answered UNKNOWN_TOPIC_ID
    if tp.topic_id not in cache:
        cache[tp.topic_id] = authorize(ctx, AclOperation.READ, ResourceType.TOPIC, tp.topic)
    return cache[tp.topic_id]


def _ack_batches(entries: list[Body]) -> list[tuple[int, int, list[int]]]:
    return [(b["first_offset"], b["last_offset"], list(b["acknowledge_types"])) for b in entries]


def _leader(ctx: RequestContext, tp: ShareTopicPartition) -> Body:
    topic = ctx.services.metadata.topic(tp.topic) if tp.topic is not None else None
    if topic is None or tp.partition >= len(topic.partitions):
        return {"leader_id": -1, "leader_epoch": -1}
    p = topic.partitions[tp.partition]
    return {"leader_id": p.leader, "leader_epoch": p.leader_epoch}


def _top_error(api: str, code: ErrorCode, message: str | None = None) -> Body:
    return {"error_code": code, "error_message": message, "responses": [], "acquisition_lock_timeout_ms": 0}


Acks = dict[tuple[uuid.UUID, int], tuple[ShareTopicPartition, ErrorCode, int]]


def _acknowledge_all(
    ctx: RequestContext, share: ShareServices, group_id: str, member_id: str, topics: list[Body],
    readable: dict[uuid.UUID, bool], renew: bool = False,
) -> Acks:  # fmt: skip
    """Apply the acknowledgements: each partition's code, and the number of the change it made (0: none)."""
    out: Acks = {}
    for t in topics:
        for p in t["partitions"]:
            batches = _ack_batches(p["acknowledgement_batches"])
            if not batches:
                continue
            tp = _topic_partition(ctx, t["topic_id"], p["partition_index"])
            change = 0
            if not _may_read(ctx, tp, readable):
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                code = share.partitions.acknowledge(group_id, member_id, tp, batches, renew=renew)
                change = share.partitions.last_change(group_id, tp) if code == ErrorCode.NO_ERROR else 0
            out[tp.key] = (tp, code, change)
    return out


def _durable_acks(share: ShareServices, group_id: str, acks: Acks) -> dict[tuple[uuid.UUID, int],
                                                                          tuple[ShareTopicPartition, ErrorCode]]:
    """After the flush: an acknowledgement whose change is not durable answers why (its partition is read
    again: the records come back)."""
    return {k: (tp, share.partitions.outcome(group_id, tp, change) if code == ErrorCode.NO_ERROR else code)
            for k, (tp, code, change) in acks.items()}  # fmt: skip


def _group_by_topic(parts: list[tuple[uuid.UUID, Body]]) -> list[Body]:
    topics: dict[uuid.UUID, list[Body]] = {}
    for topic_id, part in parts:
        topics.setdefault(topic_id, []).append(part)
    return [{"topic_id": tid, "partitions": ps} for tid, ps in topics.items()]


def _check_request(ctx: RequestContext, request: Body) -> tuple[ErrorCode, str | None]:
    if not request.get("group_id"):
        return ErrorCode.INVALID_REQUEST, "GroupId must be set."
    if not request.get("member_id"):
        return ErrorCode.INVALID_REQUEST, "MemberId must be set."
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request["group_id"]):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    return ErrorCode.NO_ERROR, None


def _renew_fetch_error(request: Body) -> str | None:
    """KIP-1222: a ShareFetch that renews locks (IsRenewAck) only acknowledges: it asks for no records."""
    if request.get("is_renew_ack") and any(
        request.get(k, 0) for k in ("max_wait_ms", "min_bytes", "max_bytes", "max_records")
    ):
        return "A ShareFetch with IsRenewAck set must have MaxWaitMs, MinBytes, MaxBytes and MaxRecords 0."
    return None


def _room_for_session(ctx: RequestContext, share: ShareServices, group_id: str, member_id: str) -> bool:
    """Whether a session may be opened: any member id opens one (as in Kafka), so they are bounded by
    ``group.share.max.share.sessions``; when full, the sessions of ids that are no member of their group (left,
    expired, or never one) make room first."""
    sessions = share.partitions.sessions
    limit = int(ctx.services.config.get("group.share.max.share.sessions"))
    if (group_id, member_id) in sessions or len(sessions) < limit:
        return True
    share.coordinator.expire_all(now_ms())
    groups = share.coordinator.groups
    for g, m in [k for k in sessions if k[0] not in groups or k[1] not in groups[k[0]].members]:
        share.partitions.close_session(g, m)
    return len(sessions) < limit


@handler(ApiKey.SHARE_FETCH, 1, 2)
async def handle_share_fetch(ctx: RequestContext, request: Body) -> Body:
    code, message = _check_request(ctx, request)
    if code:
        return _top_error("fetch", code, message)
    renew = bool(request.get("is_renew_ack"))
    renew_error = _renew_fetch_error(request)
    if renew_error is not None:
        return _top_error("fetch", ErrorCode.INVALID_REQUEST, renew_error)
    mode = request.get("share_acquire_mode", 0)
    if mode not in (0, 1):  # 0 batch-optimized, 1 record-limit
        return _top_error("fetch", ErrorCode.INVALID_REQUEST, f"Unknown ShareAcquireMode {mode}.")
    share = share_services(ctx)
    group_id, member_id, epoch = request["group_id"], request["member_id"], request["share_session_epoch"]
    listed = [_topic_partition(ctx, t["topic_id"], p["partition_index"])
              for t in request["topics"] for p in t["partitions"]]  # fmt: skip
    forgotten = [(t["topic_id"], p) for t in request["forgotten_topics_data"] for p in t["partitions"]]
    if epoch == INITIAL_EPOCH and any(p["acknowledgement_batches"] for t in request["topics"] for p in t["partitions"]):
        return _top_error("fetch", ErrorCode.INVALID_REQUEST, "Acknowledgements cannot open a share session.")
    if epoch == FINAL_EPOCH and request.get("max_records", 0) > 0 and listed:
        return _top_error("fetch", ErrorCode.INVALID_REQUEST, "A final share fetch cannot fetch.")
    if epoch == INITIAL_EPOCH and not _room_for_session(ctx, share, group_id, member_id):
        return _top_error("fetch", ErrorCode.SHARE_SESSION_LIMIT_REACHED, "The limit of share sessions was reached.")
    code, session = share.partitions.open_or_update_session(group_id, member_id, epoch, listed, forgotten)
    if session is None:
        return _top_error("fetch", code)
    quotas = ctx.services.quotas
    fetch_quota = quotas.fetch if quotas is not None and quotas.fetch.enabled else None
    user, client_id = quota_user(ctx), quota_client_id(ctx)
    readable: dict[uuid.UUID, bool] = {}
    applied = {} if epoch == INITIAL_EPOCH else _acknowledge_all(ctx, share, group_id, member_id, request["topics"],
                                                                  readable, renew)  # fmt: skip
    fetched: list[PartitionFetch] = []
    if epoch == FINAL_EPOCH:
        share.partitions.close_session(group_id, member_id)
    elif not renew:
        wanted = [tp for tp in session.partitions.values() if _may_read(ctx, tp, readable)]
        max_bytes = min(request.get("max_bytes", 0x7FFFFFFF), int(ctx.services.config.get("fetch.max.bytes")))
        if fetch_quota is not None:  # as Fetch: no more than the quota allows at once
            max_bytes = int(min(max_bytes, fetch_quota.max_value_in_quota_window(user, client_id)))
        max_records = request.get("max_records", 0) or 500
        fetched = await share.partitions.fetch(group_id, member_id, wanted, request["max_wait_ms"], max_bytes,
                                               max_records, record_limit=mode == 1)  # fmt: skip
        denied = [tp for tp in session.partitions.values() if not _may_read(ctx, tp, readable)]
        fetched.extend(PartitionFetch(tp, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for tp in denied)
    await share.partitions.flush([(group_id, *k) for k in applied])
    acks = _durable_acks(share, group_id, applied)
    parts: list[tuple[uuid.UUID, Body]] = []
    seen: set[tuple[uuid.UUID, int]] = set()
    for f in fetched:
        ack = acks.get(f.tp.key)
        if not (f.acquired or f.error or ack):
            continue
        seen.add(f.tp.key)
        parts.append((f.tp.topic_id, _fetch_partition(ctx, f.tp, f, ack[1] if ack else ErrorCode.NO_ERROR)))
    for key, (tp, ack_code) in acks.items():
        if key not in seen:
            parts.append((tp.topic_id, _fetch_partition(ctx, tp, PartitionFetch(tp), ack_code)))
    throttle = 0
    if fetch_quota is not None:
        # the records are acquired: they are sent, and the client waits out the throttle time before its next fetch
        size = sum(len(f.records) + 64 for f in fetched) + 32
        throttle = fetch_quota.record_and_get_throttle_ms(user, client_id, size)
    return {
        "throttle_time_ms": throttle,
        "error_code": ErrorCode.NO_ERROR,
        "acquisition_lock_timeout_ms": share.partitions.lock_duration_ms,
        "responses": _group_by_topic(parts),
        "node_endpoints": _node_endpoints(ctx, parts),
    }


def _fetch_partition(ctx: RequestContext, tp: ShareTopicPartition, f: PartitionFetch, ack: ErrorCode) -> Body:
    return {
        "partition_index": tp.partition,
        "error_code": f.error,
        "acknowledge_error_code": ack,
        "current_leader": _leader(ctx, tp),
        "records": f.records,
        "acquired_records": [
            {"first_offset": r.first_offset, "last_offset": r.last_offset, "delivery_count": r.delivery_count}
            for r in f.acquired
        ],
    }


def _node_endpoints(ctx: RequestContext, parts: list[tuple[uuid.UUID, Body]]) -> list[Body]:
    moved = {p["current_leader"]["leader_id"] for _, p in parts
             if p["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER}  # fmt: skip
    if not moved:
        return []
    return [b for b in broker_endpoints(ctx) if b["node_id"] in moved]


@handler(ApiKey.SHARE_ACKNOWLEDGE, 1, 2)
async def handle_share_acknowledge(ctx: RequestContext, request: Body) -> Body:
    code, message = _check_request(ctx, request)
    if code:
        return _top_error("ack", code, message)
    share = share_services(ctx)
    group_id, member_id, epoch = request["group_id"], request["member_id"], request["share_session_epoch"]
    if epoch == INITIAL_EPOCH:
        return _top_error("ack", ErrorCode.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a session.")
    code, session = share.partitions.open_or_update_session(group_id, member_id, epoch, [], [])
    if session is None:
        return _top_error("ack", code)
    renew = bool(request.get("is_renew_ack"))
    applied = _acknowledge_all(ctx, share, group_id, member_id, request["topics"], {}, renew)
    if epoch == FINAL_EPOCH:
        share.partitions.close_session(group_id, member_id)
    await share.partitions.flush([(group_id, *k) for k in applied])
    acks = _durable_acks(share, group_id, applied)
    parts: list[tuple[uuid.UUID, Any]] = [
        (tp.topic_id, {"partition_index": tp.partition, "error_code": ack_code, "current_leader": _leader(ctx, tp)})
        for tp, ack_code in acks.values()
    ]
    return {"error_code": ErrorCode.NO_ERROR, "responses": _group_by_topic(parts),
            "acquisition_lock_timeout_ms": share.partitions.lock_duration_ms,
            "node_endpoints": _node_endpoints(ctx, parts)}  # fmt: skip


def _stored_groups(ctx: RequestContext) -> set[str]:
    coordinator = ctx.services.share_coordinator
    return coordinator.groups() if coordinator is not None else set()


def list_share_groups(ctx: RequestContext, states: set[str] | None) -> list[tuple[str, str]]:
    """(group id, state) of the share groups this broker keeps, for ListGroups."""
    if ctx.services.share is None and not _stored_groups(ctx):
        return []  # (no share group used since the start, none with a state here: nothing to make)
    share = share_services(ctx)
    coordinator = share.coordinator
    coordinator.expire_all(now_ms())
    listed = [(g.group_id, g.state) for g in coordinator.groups.values()]
    # a group with a persisted state and no member since the broker started is an empty group (Kafka keeps it)
    listed += [(g, "Empty") for g in share.partitions.groups_with_state() if g not in coordinator.groups]
    return [(gid, state) for gid, state in sorted(listed)
            if (states is None or state in states) and not_serving(ctx, gid) is None]  # fmt: skip


async def delete_share_groups(ctx: RequestContext, names: list[str]) -> dict[str, ErrorCode]:
    """DeleteGroups of the share groups among ``names`` (the others are left out of the answer): an empty one is
    deleted with its state, one with members answers NON_EMPTY_GROUP."""
    if ctx.services.share is None and not _stored_groups(ctx):
        return {}
    share = share_services(ctx)
    share.coordinator.expire_all(now_ms())
    results: dict[str, ErrorCode] = {}
    for name in names:
        if not_serving(ctx, name) is not None:
            continue  # (answered as any group this broker does not coordinate)
        group = share.coordinator.groups.get(name)
        if group is None and not share.partitions.has_state(name):
            continue
        if group is not None and group.members:
            results[name] = ErrorCode.NON_EMPTY_GROUP
            continue
        share.coordinator.groups.pop(name, None)
        keys = _partitions_of(ctx, group.topics_seen if group is not None else {})
        if ctx.services.share_coordinator is not None:  # and those whose state this broker's coordinator keeps
            keys += ctx.services.share_coordinator.keys_of(name)
        failed = await share.partitions.delete_group(name, keys)
        results[name] = ErrorCode.COORDINATOR_NOT_AVAILABLE if failed else ErrorCode.NO_ERROR
    return results


def _partitions_of(ctx: RequestContext, topics: Any) -> list[tuple[uuid.UUID, int]]:
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
        group = share_services(ctx).coordinator.groups.get(group_id)
        if group is None and share_services(ctx).partitions.has_state(group_id):
            group = ShareGroup(group_id)  # kept by its state alone (no member since the broker started): Empty
        if group is None:
            groups.append({**body, "error_code": ErrorCode.GROUP_ID_NOT_FOUND,
                           "error_message": f"Group {group_id} not found."})  # fmt: skip
            continue
        share_services(ctx).coordinator.expire_members(group, now_ms())
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
        share = share_services(ctx)
        known = share.coordinator.groups.get(group_id)
        asked = [] if g["topics"] is None else [t["topic_name"] for t in g["topics"]]
        keys = _partitions_of(ctx, [*asked, *(known.topics_seen if known is not None else ())])
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
