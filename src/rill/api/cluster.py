"""DescribeCluster (60) and DescribeLogDirs (35)."""

from __future__ import annotations

import os
from collections import defaultdict

from rill.api._authorized import authorized_operations
from rill.api._endpoints import broker_endpoints
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.errors import ErrorCode
from rill.protocol import ApiKey


@handler(ApiKey.DESCRIBE_CLUSTER, 0, 2)
async def handle_describe_cluster(ctx: RequestContext, request: Body) -> Body:
    store = ctx.services.metadata
    endpoint_type = request.get("endpoint_type", 1)
    if endpoint_type != 1:  # only brokers are described; controllers are not separate nodes here
        return {
            "error_code": ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            "error_message": "only broker endpoints",
            "cluster_id": store.cluster_id,
        }
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": endpoint_type,
        "cluster_id": store.cluster_id,
        "controller_id": store.controller_id,
        "brokers": broker_endpoints(ctx, "broker_id"),
        "cluster_authorized_operations": authorized_operations(
            "cluster", request.get("include_cluster_authorized_operations", False)
        ),
    }


@handler(ApiKey.DESCRIBE_LOG_DIRS, 0, 4)
async def handle_describe_log_dirs(ctx: RequestContext, request: Body) -> Body:
    rm = ctx.services.replica_manager
    wanted = request.get("topics")
    filter_: dict[str, set[int]] | None = None
    if wanted is not None:
        filter_ = {t["topic"]: set(t["partitions"]) for t in wanted}
    by_dir: dict[str, dict[str, list[Body]]] = defaultdict(lambda: defaultdict(list))
    for d in rm.log_manager.log_dirs:
        by_dir[str(d)]
    for tp, partition in sorted(rm.partitions().items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        if filter_ is not None and tp.partition not in filter_.get(tp.topic, ()):
            continue
        plog = partition.log
        by_dir[str(plog.dir.parent)][tp.topic].append(
            {
                "partition_index": tp.partition,
                "partition_size": plog.size_bytes,
                "offset_lag": 0,
                "is_future_key": False,
            }
        )
    results: list[Body] = []
    for dir_name, topics in by_dir.items():
        try:
            st = os.statvfs(dir_name)
            total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        except OSError:
            total = usable = -1
        results.append(
            {
                "error_code": 0,
                "log_dir": dir_name,
                "topics": [{"name": n, "partitions": ps} for n, ps in sorted(topics.items())],
                "total_bytes": total,
                "usable_bytes": usable,
            }
        )
    return {"throttle_time_ms": 0, "error_code": 0, "results": results}
