"""Share groups (KIP-932): ShareGroupHeartbeat (76), ShareFetch (78), ShareAcknowledge (79);
ShareGroupDescribe and DescribeShareGroupOffsets are in ``share_group_admin``, Alter/DeleteShareGroupOffsets in
``share_group_offsets``.

Membership is kept by :mod:`rill.coordinator.share.share_group_coordinator` at the group's coordinator (the
leader of its ``__consumer_offsets`` partition; other brokers answer NOT_COORDINATOR), and written there to
``__consumer_offsets`` (:mod:`rill.coordinator.share.share_group_store`); fetching and acknowledging by the
partition leader's :mod:`rill.coordinator.share.share_partition_manager`. The APIs need READ on the group, and
ShareFetch and ShareAcknowledge READ on each topic (a partition of a topic the caller may not read answers
TOPIC_AUTHORIZATION_FAILED). A group id of a classic or consumer group answers GROUP_ID_NOT_FOUND."""

from __future__ import annotations

import contextlib
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rill.api._authorized import AclOperation, ResourceType, authorize
from rill.api._endpoints import broker_endpoints
from rill.api._quotas import quota_client_id, quota_user
from rill.api._topics import ZERO_UUID
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.cluster.network_client import NetworkClient
from rill.coordinator.share.share_group_coordinator import ShareGroupCoordinator
from rill.coordinator.share.share_group_records import MAX_MEMBER_RECORD_BYTES, member_record
from rill.coordinator.share.share_group_store import ShareGroupStore
from rill.coordinator.share.share_partition_manager import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    PartitionFetch,
    SharePartitionManager,
    ShareTopicPartition,
    now_ms,
)
from rill.coordinator.share.share_persister import DefaultStatePersister
from rill.errors import ErrorCode, KafkaError
from rill.metadata.store import OFFSETS_TOPIC, topic_name_problem
from rill.protocol import ApiKey
from rill.security.inter_broker import client_config

log = logging.getLogger(__name__)

MAX_MEMBER_ID_BYTES = 255  # (members make their ids: a UUID, 22 to 36 characters)
LEGACY_STATE_DIR = "__share_group_state"  # where earlier versions kept each group's state, one JSON file each


@dataclass(slots=True)
class ShareServices:
    coordinator: ShareGroupCoordinator
    partitions: SharePartitionManager
    clients: list[NetworkClient] = field(default_factory=list)  # the persister's channel to other brokers
    store: ShareGroupStore | None = None  # the groups' records in __consumer_offsets

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
        store = None
        if services.group_coordinator is not None:
            store = ShareGroupStore(coordinator, services.group_coordinator, topics)
        services.share = ShareServices(coordinator, manager, clients, store)
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
    if code is None and ctx.services.metadata.topic(OFFSETS_TOPIC) is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE  # (every broker would lead its partition: none does yet)
    return code


def coordinated_services(ctx: RequestContext) -> ShareServices:
    """The share-group parts, the groups of the ``__consumer_offsets`` partitions this broker leads loaded (and
    those of the partitions it no longer leads dropped): for the APIs a group's coordinator answers."""
    share = share_services(ctx)
    if share.store is not None:
        share.store.follow_leadership()
    return share


def _invalid_heartbeat(ctx: RequestContext, request: Body) -> str | None:
    """Why a ShareGroupHeartbeat is refused before it changes anything (INVALID_REQUEST), or None: what a member
    sends goes into its group's records, so it must make one that can be written."""
    member_id, rack = request["member_id"], request.get("rack_id")
    if len(member_id.encode()) > MAX_MEMBER_ID_BYTES:
        return f"MemberId is longer than {MAX_MEMBER_ID_BYTES} bytes."
    if rack is not None and not rack:
        return "RackId can't be empty."
    subscribed = request.get("subscribed_topic_names") or []
    for name in subscribed:
        if (problem := topic_name_problem(name)) is not None:
            return f"SubscribedTopicNames has {name[:60]!r}: {problem}."
    image = (rack, ctx.client_id or "", f"/{ctx.client_host}", tuple(subscribed))
    if member_record(request["group_id"], member_id, image).size > MAX_MEMBER_RECORD_BYTES:
        return f"The member's record (its group id, member id, client id, rack and subscribed topics) would be " \
            f"larger than {MAX_MEMBER_RECORD_BYTES} bytes."  # fmt: skip
    return None


def _not_share_group(ctx: RequestContext, group_id: str) -> bool:
    """Whether ``group_id`` is a classic or consumer group's (a share group cannot have its id)."""
    coordinator = ctx.services.group_coordinator
    return coordinator is not None and (coordinator.consumer.is_consumer_group(group_id)
                                        or group_id in coordinator.groups)  # fmt: skip


# -- ShareGroupHeartbeat -----------------------------------------------------------------------------------


@handler(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1)
async def handle_share_group_heartbeat(ctx: RequestContext, request: Body) -> Body:
    group_id = request["group_id"]
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "member_epoch": -1, "heartbeat_interval_ms": 0}
    coordinator = ctx.services.group_coordinator
    if coordinator is not None and coordinator.active:  # (a client that asked no FindCoordinator first)
        with contextlib.suppress(KafkaError):
            await coordinator.manager.maybe_create_offsets_topic()
    if (code := not_serving(ctx, group_id)) is not None:
        return {"error_code": code, "member_epoch": -1, "heartbeat_interval_ms": 0}
    if _not_share_group(ctx, group_id):
        return {"error_code": ErrorCode.GROUP_ID_NOT_FOUND, "error_message": f"Group {group_id} is not a share group.",
                "member_epoch": -1, "heartbeat_interval_ms": 0}  # fmt: skip
    if (invalid := _invalid_heartbeat(ctx, request)) is not None:
        return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": invalid, "member_epoch": -1,
                "heartbeat_interval_ms": 0}  # fmt: skip
    share = coordinated_services(ctx)
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
    if share.store is not None:
        written = await share.store.persist(group_id)
        if written != ErrorCode.NO_ERROR and result.error == ErrorCode.NO_ERROR and request["member_epoch"] >= 0:
            # not durable: the member asks again (a join is answered once a new coordinator would know it)
            group = share.coordinator.groups.get(group_id)
            if group is not None and (member := group.members.get(result.member_id or "")) is not None:
                member.sent_epoch = -1  # (its assignment was not sent)
            return {"error_code": written, "error_message": "The group's records were not written.",
                    "member_epoch": -1, "heartbeat_interval_ms": 0}  # fmt: skip
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
    ``group.share.max.share.sessions``; when full, room is made first by closing the sessions unused for a
    member's session timeout, and those of ids that are no member of a group this broker coordinates (left,
    expired, or never one: only the coordinator knows a group's members)."""
    sessions = share.partitions.sessions
    limit = int(ctx.services.config.get("group.share.max.share.sessions"))
    if (group_id, member_id) in sessions or len(sessions) < limit:
        return True
    for g, m in share.partitions.idle_sessions(share.coordinator.session_timeout_ms / 1000):
        share.partitions.close_session(g, m)
    coordinated = {g for g, _ in sessions if not_serving(ctx, g) is None}
    if coordinated:
        share = coordinated_services(ctx)
        share.coordinator.expire_all(now_ms())
        groups = share.coordinator.groups
        for g, m in [k for k in sessions if k[0] in coordinated and (k[0] not in groups
                                                                     or k[1] not in groups[k[0]].members)]:
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
