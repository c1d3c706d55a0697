"""Fetch (1): long-poll reads that answer with file regions sent by ``os.sendfile``.

A fetch waits (up to ``max_wait_ms``) until its partitions together hold ``min_bytes`` of data past the
fetch offsets; appends wake it. Sizes follow Kafka: each partition gets at most ``partition_max_bytes``,
the response at most ``max_bytes`` (for a consumer, no more than the broker's ``fetch.max.bytes``), but
the first partition with data always returns at least one whole batch so a consumer can make progress past
a batch larger than its limits.

Incremental fetch sessions (KIP-227, rill.api.fetch_session): a full fetch with session epoch 0 opens a
session (its id in the response) if the broker's cache has room; the next fetches of that session name only the
partitions that changed, were added or are forgotten, and are answered with only the partitions that have
something new. A consumer's session is read in full at each fetch (that is how the broker knows what is new); a
follower's skips its quiet partitions: those it fetches from the log end, already caught up, in the ISR and told
the high watermark (which is the log end), the last stable offset and the log start as they are now. Each costs a
few comparisons and records the follower caught up, as its read would. Epoch -1 fetches without a session.

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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rill.api._authorized import AclOperation, ResourceType, authorize, authorize_cluster
from rill.api._quotas import QUOTA_BYTES, quota_client_id, quota_user
from rill.api._topics import ZERO_UUID, LeaderHints
from rill.api.context import RequestContext
from rill.api.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSession,
    FetchSessionCache,
    PartitionKey,
    next_epoch,
)
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
    key: PartitionKey = ("", -1)  # the partition's key in a fetch session


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


def _session_cache(ctx: RequestContext) -> FetchSessionCache:
    cache = ctx.services.fetch_sessions
    if cache is None:
        slots = int(ctx.services.config.get("max.incremental.fetch.session.cache.slots"))
        cache = ctx.services.fetch_sessions = FetchSessionCache(slots)
    assert isinstance(cache, FetchSessionCache)
    return cache


def _named(request: Body, uses_ids: bool) -> dict[PartitionKey, CachedPartition]:
    """The partitions a request names, by their session keys (topic names, or ids from v13 on)."""
    named: dict[PartitionKey, CachedPartition] = {}
    for t in request["topics"]:
        topic_id = t.get("topic_id", ZERO_UUID)
        name = t.get("topic") or None
        for p in t["partitions"]:
            key = (topic_id if uses_ids else name, p["partition"])
            named[key] = CachedPartition(name, topic_id, p["partition"], p["fetch_offset"], p["partition_max_bytes"],
                                         p.get("current_leader_epoch", -1), p.get("log_start_offset", -1))  # fmt: skip
    return named


def _forgotten(request: Body, uses_ids: bool) -> list[PartitionKey]:
    return [((t.get("topic_id", ZERO_UUID) if uses_ids else t.get("topic")), p)
            for t in request.get("forgotten_topics_data") or () for p in t["partitions"]]  # fmt: skip


def _session_error(code: ErrorCode, session_id: int = INVALID_SESSION_ID) -> Body:
    if code != ErrorCode.NO_ERROR:
        log.debug("Fetch session %d: %s", session_id, code.name)
    return {"throttle_time_ms": 0, "error_code": code, "session_id": session_id, "responses": []}


def _session_size_after(session: FetchSession, named: Mapping[PartitionKey, CachedPartition],
                        forgotten: list[PartitionKey]) -> int:  # fmt: skip
    held = session.partitions
    gone = set(forgotten)
    added = {k for k in named if k not in held}
    return len(held) + len(added - gone) - sum(1 for k in gone if k in held)


def _max_session_partitions(ctx: RequestContext) -> int:
    return max(1000, len(ctx.services.replica_manager.partitions()))


def _wanted_of(ctx: RequestContext, partitions: Iterable[tuple[PartitionKey, CachedPartition]], uses_ids: bool,
               replica_id: int) -> tuple[list[list[_Wanted]], list[tuple[str, object]]]:  # fmt: skip
    """The reads of a fetch, grouped by topic (runs of one topic in the session's order), each partition's
    topic resolved (by id from v13 on) and the caller's right to read it checked."""
    follower_allowed = replica_id < 0 or authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)
    metadata = ctx.services.metadata
    denied_topics: dict[str, bool] = {}
    wanted: list[list[_Wanted]] = []
    names: list[tuple[str, object]] = []
    last: object = None
    by_id: dict[object, str | None] = {}
    for key, c in partitions:
        if uses_ids:
            if c.topic_id in by_id:
                name = by_id[c.topic_id]
            else:
                topic = metadata.topic_by_id(c.topic_id) if c.topic_id != ZERO_UUID else None
                name = by_id[c.topic_id] = topic.name if topic is not None else None
        else:
            name = c.topic
        if replica_id >= 0:
            denied = not follower_allowed
        elif name is None:
            denied = False
        else:
            denied = denied_topics.get(name)  # type: ignore[assignment]
            if denied is None:
                denied = denied_topics[name] = not authorize(ctx, AclOperation.READ, ResourceType.TOPIC, name)
        if not wanted or key[0] != last:
            wanted.append([])
            names.append((name or "", c.topic_id))
            last = key[0]
        wanted[-1].append(_Wanted(TopicPartition(name, c.partition) if name is not None else None, c.partition,
                                  c.fetch_offset, c.max_bytes, c.current_leader_epoch, c.log_start_offset, denied,
                                  key))  # fmt: skip
    return wanted, names


def _quiet_split(ctx: RequestContext, session: FetchSession, replica_id: int,
                 record: bool) -> tuple[list[tuple[PartitionKey, CachedPartition]], list[TopicPartition]]:  # fmt: skip
    """A follower's incremental fetch: the session's partitions to read, and those with nothing to read or tell
    (``Partition.quiet_follower_fetch``, and the follower told their last stable offset and log start already),
    which are neither read nor answered, only watched while the fetch waits. With ``record`` (the fetch's first
    pass), the follower's fetch of each quiet one is recorded as its read would record it."""
    hosted = ctx.services.replica_manager.partitions()
    now_ms = int(time.time() * 1000) if record else None
    active: list[tuple[PartitionKey, CachedPartition]] = []
    quiet: list[TopicPartition] = []
    for item in session.partitions.items():
        c = item[1]
        tp = c.tp
        if tp is None and c.topic is not None:
            tp = c.tp = TopicPartition(c.topic, c.partition)
        partition = hosted.get(tp) if tp is not None else None
        if (partition is not None and c.high_watermark == c.fetch_offset
                and c.leader_log_start_offset == partition.log_start_offset
                and c.last_stable_offset == partition.last_stable_offset
                and partition.quiet_follower_fetch(replica_id, c.fetch_offset, c.current_leader_epoch,
                                                   c.log_start_offset, now_ms)):  # fmt: skip
            quiet.append(partition.tp)
        else:
            active.append(item)
    return active, quiet


@handler(ApiKey.FETCH, 4, 17)
async def handle_fetch(ctx: RequestContext, request: Body) -> Body:
    session_id = request.get("session_id", INVALID_SESSION_ID)
    session_epoch = request.get("session_epoch", FINAL_EPOCH)
    uses_ids = ctx.api_version >= 13
    replica_id = request.get("replica_id", -1)
    if replica_id < 0 and ctx.api_version >= 15:
        replica_id = (request.get("replica_state") or {}).get("replica_id", -1)
    cache = _session_cache(ctx)
    now_ms = int(time.monotonic() * 1000)
    named = _named(request, uses_ids)
    session: FetchSession | None = None
    if session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch: any session it names ends
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)
        partitions: Mapping[PartitionKey, CachedPartition] = named
    else:
        session = cache.get(session_id)
        if session is None:
            return _session_error(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id)
        if session.epoch != session_epoch:
            return _session_error(ErrorCode.INVALID_FETCH_SESSION_EPOCH, session_id)
        if session.uses_topic_ids != uses_ids:
            return _session_error(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR, session_id)
        forgotten = _forgotten(request, uses_ids)
        if _session_size_after(session, named, forgotten) > _max_session_partitions(ctx):
            cache.remove(session_id)
            return _session_error(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id)
        session.update(named.items(), forgotten)
        if not session.partitions:  # nothing left: the session ends, the fetch is answered without one
            cache.remove(session_id)
            session = None
            partitions = {}
        else:
            cache.touch(session, now_ms)
            session.epoch = next_epoch(session.epoch)
            partitions = session.partitions
    expected_epoch = session.epoch if session is not None else FINAL_EPOCH

    # A follower's incremental fetch reads only the partitions with something to read or tell; the quiet ones cost
    # a few comparisons each (``_quiet_split``), so a leader's idle followers cost little however many partitions.
    quiet_path = session is not None and replica_id >= 0 and authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)
    quiet: list[TopicPartition] = []
    if session is not None and quiet_path:
        active, quiet = _quiet_split(ctx, session, replica_id, record=True)
        wanted, names = _wanted_of(ctx, active, uses_ids, replica_id)
    else:
        wanted, names = _wanted_of(ctx, partitions.items(), uses_ids, replica_id)
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
    watch = [w.tp for ws in wanted for w in ws if w.tp is not None and not w.denied] + quiet
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
        if session is not None and quiet_path:  # what woke the fetch may be a quiet partition's append
            active, quiet = _quiet_split(ctx, session, replica_id, record=False)
            wanted, names = _wanted_of(ctx, active, uses_ids, replica_id)
    if not committed_only:
        for tp, hw in _answered(wanted, parts):
            rm.high_watermark_sent(tp, replica_id, hw)
    if session is not None and session.epoch != expected_epoch:
        # another fetch of this session came meanwhile (Kafka's "possible duplicate request")
        return _session_error(ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.session_id)
    if fetch_quota is not None:
        size = _response_size(names, parts)
        throttle = fetch_quota.record_and_get_throttle_ms(user, client_id, size)
        if throttle > 0:  # answered empty; the bytes it would have sent are not counted
            fetch_quota.unrecord(user, client_id, size)
            response_id = session.session_id if session is not None else INVALID_SESSION_ID
            return {"throttle_time_ms": throttle, "error_code": 0, "session_id": response_id, "responses": []}
        quota_bytes = size
    if session is not None:
        parts = _changed_only(session, wanted, parts)
        response_id = session.session_id
    elif session_epoch == INITIAL_EPOCH and len(named) <= _max_session_partitions(ctx):
        response_id = _new_session(cache, now_ms, replica_id >= 0, uses_ids, named, wanted, parts)
    else:
        response_id = INVALID_SESSION_ID
    metrics = ctx.services.metrics
    responses: list[Body] = []
    hints = LeaderHints(ctx)
    for (name, topic_id), ps in zip(names, parts, strict=True):
        if not ps:
            continue
        for p in ps:
            hints.add(p, name or None, p["partition_index"])
            size = p.pop("_size")
            if metrics is not None:
                if size:
                    metrics.on_fetch(name, size, replication=not committed_only)
                if p["error_code"]:
                    metrics.on_error("FETCH", p["error_code"])
        responses.append({"topic": name, "topic_id": topic_id, "partitions": ps})
    response: Body = {"throttle_time_ms": 0, "error_code": 0, "session_id": response_id, "responses": responses,
                      "node_endpoints": hints.node_endpoints()}  # fmt: skip
    if fetch_quota is not None:
        response[QUOTA_BYTES] = quota_bytes  # taken back if the request quota throttles this fetch after all
    return response


def _changed_only(session: FetchSession, wanted: list[list[_Wanted]], parts: list[list[Body]]) -> list[list[Body]]:
    """An incremental response: only the partitions with something new (``CachedPartition.must_respond``); those
    with records go to the end of the session's order."""
    out: list[list[Body]] = []
    cached = session.partitions
    for ws, ps in zip(wanted, parts, strict=True):
        kept: list[Body] = []
        for w, p in zip(ws, ps, strict=True):
            c = cached.get(w.key)
            if c is None or c.must_respond(p):
                kept.append(p)
                if p["_size"]:
                    session.rotate(w.key)
        out.append(kept)
    return out


def _new_session(cache: FetchSessionCache, now_ms: int, privileged: bool, uses_ids: bool,
                 named: dict[PartitionKey, CachedPartition], wanted: list[list[_Wanted]],
                 parts: list[list[Body]]) -> int:  # fmt: skip
    """A full fetch with epoch 0: a session of its partitions, each knowing what this response tells, if the
    cache makes room for it."""
    for ws, ps in zip(wanted, parts, strict=True):
        for w, p in zip(ws, ps, strict=True):
            named[w.key].must_respond(p)
    return cache.maybe_create(now_ms, privileged, uses_ids, named)
