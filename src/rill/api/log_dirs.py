"""The log dirs of this broker: DescribeLogDirs (35) and AlterReplicaLogDirs (34).

Both need an operation on the cluster (DESCRIBE, ALTER), checked by the dispatcher (``CLUSTER_CHECKS``).
Log dirs are named by their absolute paths, as Kafka names them. A replica being moved between log dirs
(rill.replica.replica_alter_log_dirs) shows twice: its current log and, in the destination, its future log
(``IsFutureKey`` true, ``OffsetLag`` the offsets it still lacks).
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.common import TopicPartition
from rill.errors import ErrorCode
from rill.log.log import Log
from rill.protocol import ApiKey


@handler(ApiKey.DESCRIBE_LOG_DIRS, 0, 4)
async def handle_describe_log_dirs(ctx: RequestContext, request: Body) -> Body:
    rm = ctx.services.replica_manager
    lm = rm.log_manager
    wanted = request.get("topics")
    filter_: dict[str, set[int]] | None = None
    if wanted is not None:
        filter_ = defaultdict(set)
        for t in wanted:
            filter_[t["topic"]].update(t["partitions"])
    entries: list[tuple[TopicPartition, Log, Path, bool]] = [
        (tp, p.log, d, False) for tp, p in rm.partitions().items() if (d := lm.log_dir_of(tp)) is not None
    ]
    entries += [(tp, plog, d, True) for tp, (plog, d) in lm.future_logs().items()]
    by_dir: dict[Path, dict[str, list[Body]]] = {d: defaultdict(list) for d in lm.log_dirs}
    for tp, plog, d, future in sorted(entries, key=lambda e: (e[0].topic, e[0].partition, e[3])):
        if filter_ is not None and tp.partition not in filter_.get(tp.topic, ()):
            continue
        current = lm.get_log(tp)
        if current is None:
            lag = -1
        elif future:
            lag = max(current.log_end_offset - plog.log_end_offset, 0)
        else:
            lag = max(plog.high_watermark - plog.log_end_offset, 0)
        by_dir.setdefault(d, defaultdict(list))[tp.topic].append(
            {"partition_index": tp.partition, "partition_size": plog.size_bytes, "offset_lag": lag,
             "is_future_key": future}
        )  # fmt: skip
    results: list[Body] = []
    for d, topics in by_dir.items():
        name = str(d.absolute())
        if d in lm.offline_dirs:
            results.append({"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": name, "topics": []})
            continue
        try:
            st = os.statvfs(d)
            total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        except OSError:
            total = usable = -1
        results.append(
            {
                "error_code": 0,
                "log_dir": name,
                "topics": [{"name": n, "partitions": ps} for n, ps in sorted(topics.items())],
                "total_bytes": total,
                "usable_bytes": usable,
            }
        )
    return {"throttle_time_ms": 0, "error_code": 0, "results": results}


@handler(ApiKey.ALTER_REPLICA_LOG_DIRS, 0, 2)
async def handle_alter_replica_log_dirs(ctx: RequestContext, request: Body) -> Body:
    """Move (or place, when they come) this broker's replicas of the partitions named into the log dirs named.
    A partition named under several dirs goes to the last one (Kafka keeps the request as a map)."""
    assignment: dict[TopicPartition, str] = {}
    for entry in request.get("dirs") or []:
        for topic in entry["topics"]:
            for p in topic["partitions"]:
                assignment[TopicPartition(topic["name"], p)] = entry["path"]
    answered = ctx.services.replica_manager.log_dir_mover.alter_replica_log_dirs(assignment)
    by_topic: dict[str, list[Body]] = defaultdict(list)
    for tp, code in answered.items():
        by_topic[tp.topic].append({"partition_index": tp.partition, "error_code": code})
    return {
        "throttle_time_ms": 0,
        "results": [{"topic_name": name, "partitions": parts} for name, parts in by_topic.items()],
    }
