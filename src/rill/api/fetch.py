"""Fetch (1): long-poll reads that answer with file regions sent by ``os.sendfile``.

A fetch waits (up to ``max_wait_ms``) until its partitions together hold ``min_bytes`` of data past the
fetch offsets; appends wake it. Sizes follow Kafka: each partition gets at most ``partition_max_bytes``,
the response at most ``max_bytes`` (for a consumer, no more than the broker's ``fetch.max.bytes``), but
the first partition with data always returns at least one whole batch so a consumer can make progress past
a batch larger than its limits. Incremental fetch sessions are not offered: a request to open one is
answered with session id 0, which clients accept as "no session".

A consumer's ``isolation_level`` 1 (read_committed) reads up to each partition's last stable offset and gets the
aborted transactions (producer id, first offset) overlapping the data returned, which it drops; read_uncommitted
reads up to the high watermark without that list. Replicas always read everything up to the log end.

A consumer with a ``consumer_byte_rate`` quota asks for no more than its quota allows in one go (the quota times
``quota.window.num - 1`` windows), and its response's size is measured against the quota: a response that would
take it over is not sent; the fetch is answered empty, with the throttle time (Kafka's throttled response), and
its bytes are not counted. Followers are never held to client quotas.

Fetch from the closest replica (KIP-392): a consumer's fetch of v11+ carries client metadata (its ``rack_id``,
the consumer's ``client.rack``). A follower in the ISR serves it up to its high watermark; the leader, with
``replica.selector.class`` set, answers a partition that a replica in the consumer's rack should serve with no
records and that replica as ``preferred_read_replica``, at once (rill.replica.read_replica). A follower's fetch
waiting for data is answered as soon as the high watermark moves past the one it was last sent, so followers
serve what is committed promptly.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rill.api._authorized import AclOperation, ResourceType, authorize, authorize_cluster
from rill.api._quotas import QUOTA_BYTES, quota_client_id, quota_user
from rill.api._topics import ZERO_UUID, LeaderHints, resolve_topic_name
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey

if TYPE_CHECKING:
    from rill.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Wanted:
    tp: TopicPartition | None  # None when the topic id is unknown
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int
    log_start_offset: int
    denied: bool = False  # the caller may not read the topic (or, a follower, act for the cluster)


def _report_follower_positions(ctx: RequestContext, replica_id: int, wanted: list[list[_Wanted]],
                               parts: list[list[Body]]) -> None:  # fmt: skip
    """A follower's fetch offsets are its log end offsets: the leader records them (which moves the high
    watermark) only for the partitions its read served, as Kafka updates a follower's fetch state after the read
    (the leader epoch current, the offset within the log). A part whose high watermark moved is answered with
    the new one, so the follower learns it at once."""
    rm = ctx.services.replica_manager
    for ws, ps in zip(wanted, parts, strict=True):
        for w, p in zip(ws, ps, strict=True):
            if w.tp is None or p["error_code"]:
                continue
            with contextlib.suppress(KafkaError):
                if rm.update_follower_fetch_state(w.tp, replica_id, w.fetch_offset, w.log_start_offset):
                    partition = rm.get_partition(w.tp)
                    p["high_watermark"] = partition.high_watermark
                    p["last_stable_offset"] = partition.last_stable_offset


def _read_all(
    ctx: RequestContext,
    wanted: list[list[_Wanted]],
    max_bytes: int,
    committed_only: bool,
    isolation_level: int,
    client_rack: str | None,
) -> tuple[list[list[Body]], int]:
    rm = ctx.services.replica_manager
    used = 0
    out: list[list[Body]] = []
    for topic in wanted:
        parts: list[Body] = []
        for w in topic:
            if w.denied:
                parts.append(_partition_error(w.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if w.tp is None:
                parts.append(_partition_error(w.partition, ErrorCode.UNKNOWN_TOPIC_ID))
                continue
            remaining = max_bytes - used
            limit = min(w.max_bytes, max(remaining, 0))
            read = rm.read(
                w.tp,
                w.fetch_offset,
                limit,
                current_leader_epoch=w.current_leader_epoch,
                min_one_batch=used == 0,
                committed_only=committed_only,
                isolation_level=isolation_level,
                client_rack=client_rack,
            )
            used += read.size
            aborted = None
            if read.aborted_transactions is not None:
                aborted = [{"producer_id": pid, "first_offset": first} for pid, first in read.aborted_transactions]
            parts.append(
                {
                    "partition_index": w.partition,
                    "error_code": read.error,
                    "high_watermark": read.high_watermark,
                    "last_stable_offset": read.last_stable_offset,
                    "log_start_offset": read.log_start_offset,
                    "aborted_transactions": aborted,
                    "preferred_read_replica": read.preferred_read_replica,
                    "records": read.regions if read.regions else b"",
                    "_size": read.size,
                }
            )
        out.append(parts)
    return out, used


def _answered(wanted: list[list[_Wanted]], parts: list[list[Body]]) -> Iterator[tuple[TopicPartition, int]]:
    """The partitions read without an error, each with the high watermark of its response."""
    for ws, ps in zip(wanted, parts, strict=True):
        for w, p in zip(ws, ps, strict=True):
            if w.tp is not None and not p["error_code"]:
                yield w.tp, p["high_watermark"]


def _high_watermark_moved(rm: ReplicaManager, replica_id: int, wanted: list[list[_Wanted]],
                          parts: list[list[Body]]) -> bool:  # fmt: skip
    """Whether a follower's fetch should be answered now, without data: a partition's high watermark is above
    the one last sent to that follower (Kafka answers such a fetch at once, so a follower serving consumers knows
    what is committed)."""
    return any(rm.follower_needs_high_watermark(tp, replica_id, hw) for tp, hw in _answered(wanted, parts))


def _partition_error(partition: int, code: ErrorCode) -> Body:
    return {
        "partition_index": partition,
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
        "_size": 0,
    }


def _response_size(names: list[tuple[str, object]], parts: list[list[Body]]) -> int:
    """About the encoded size of a fetch response (its records, and each topic's and partition's fields)."""
    size = 16
    for (name, _), ps in zip(names, parts, strict=True):
        size += 22 + len(name) + sum(50 + p["_size"] for p in ps)
    return size


@handler(ApiKey.FETCH, 4, 17)
async def handle_fetch(ctx: RequestContext, request: Body) -> Body:
    session_id = request.get("session_id", 0)
    session_epoch = request.get("session_epoch", -1)
    if session_id != 0:
        # We never hand out sessions, so any id a client names is unknown to us.
        return {"error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0, "responses": []}
    if session_epoch not in (-1, 0):
        return {"error_code": ErrorCode.INVALID_FETCH_SESSION_EPOCH, "session_id": 0, "responses": []}

    topics = request["topics"]
    replica_id = request.get("replica_id", -1)
    if replica_id < 0 and ctx.api_version >= 15:
        replica_id = (request.get("replica_state") or {}).get("replica_id", -1)
    # a follower needs CLUSTER_ACTION on the cluster; a consumer READ on each topic
    follower_allowed = replica_id < 0 or authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)
    wanted: list[list[_Wanted]] = []
    names: list[tuple[str, object]] = []
    for t in topics:
        name = resolve_topic_name(ctx, t, "topic")
        names.append((name or "", t.get("topic_id", ZERO_UUID)))
        if replica_id >= 0:
            denied = not follower_allowed
        else:
            denied = name is not None and not authorize(ctx, AclOperation.READ, ResourceType.TOPIC, name)
        wanted.append(
            [
                _Wanted(
                    TopicPartition(name, p["partition"]) if name is not None else None,
                    p["partition"],
                    p["fetch_offset"],
                    p["partition_max_bytes"],
                    p.get("current_leader_epoch", -1),
                    p.get("log_start_offset", -1),
                    denied,
                )
                for p in t["partitions"]
            ]
        )
    max_bytes = request.get("max_bytes", 0x7FFFFFFF)
    min_bytes = request["min_bytes"]
    committed_only = replica_id < 0
    isolation_level = request.get("isolation_level", 0) if committed_only else 0
    # KIP-392: client metadata (v11+) lets a follower serve a consumer, and the leader consult its replica selector
    client_rack = (request.get("rack_id") or "") if committed_only and ctx.api_version >= 11 else None
    quotas = ctx.services.quotas
    fetch_quota = quotas.fetch if quotas is not None and committed_only and quotas.fetch.enabled else None
    if committed_only:  # a consumer: the broker's fetch.max.bytes caps what it asks for
        max_bytes = min(max_bytes, int(ctx.services.config.get("fetch.max.bytes")))
    if fetch_quota is not None:
        user, client_id = quota_user(ctx), quota_client_id(ctx)
        max_bytes = int(min(max_bytes, fetch_quota.max_value_in_quota_window(user, client_id)))
        min_bytes = min(min_bytes, max_bytes)
    deadline = time.monotonic() + max(request["max_wait_ms"], 0) / 1000.0
    watch = [w.tp for ws in wanted for w in ws if w.tp is not None and not w.denied]
    rm = ctx.services.replica_manager
    first = True
    while True:
        parts, used = _read_all(ctx, wanted, max_bytes, committed_only, isolation_level, client_rack)
        if first and not committed_only:
            _report_follower_positions(ctx, replica_id, wanted, parts)
        first = False
        # an error, or a partition sent to another replica, answers at once
        has_error = any(p["error_code"] or p["preferred_read_replica"] >= 0 for ps in parts for p in ps)
        remaining = deadline - time.monotonic()
        if used >= min_bytes or has_error or remaining <= 0 or not watch:
            break
        if not committed_only and _high_watermark_moved(rm, replica_id, wanted, parts):
            break
        await rm.wait_for_appends(watch, remaining)
    if not committed_only:
        for tp, hw in _answered(wanted, parts):
            rm.high_watermark_sent(tp, replica_id, hw)
    if fetch_quota is not None:
        size = _response_size(names, parts)
        throttle = fetch_quota.record_and_get_throttle_ms(user, client_id, size)
        if throttle > 0:  # answered empty; the bytes it would have sent are not counted
            fetch_quota.unrecord(user, client_id, size)
            return {"throttle_time_ms": throttle, "error_code": 0, "session_id": 0, "responses": []}
        quota_bytes = size
    metrics = ctx.services.metrics
    responses: list[Body] = []
    hints = LeaderHints(ctx)
    for (name, topic_id), ps in zip(names, parts, strict=True):
        for p in ps:
            hints.add(p, name or None, p["partition_index"])
            size = p.pop("_size")
            if metrics is not None:
                if size:
                    metrics.on_fetch(name, size, replication=not committed_only)
                if p["error_code"]:
                    metrics.on_error("FETCH", p["error_code"])
        responses.append({"topic": name, "topic_id": topic_id, "partitions": ps})
    response: Body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses,
                      "node_endpoints": hints.node_endpoints()}  # fmt: skip
    if fetch_quota is not None:
        response[QUOTA_BYTES] = quota_bytes  # taken back if the request quota throttles this fetch after all
    return response
