"""ElectLeaders (43): preferred (0) or unclean (1) leader elections, carried out by the controller.

Each partition is checked first, as Kafka answers it: ELECTION_NOT_NEEDED when it already has the leader asked
for, PREFERRED_LEADER_NOT_AVAILABLE when its preferred replica (the first of the assignment) is not a live
member of its ISR, ELIGIBLE_LEADERS_NOT_AVAILABLE when an unclean election has no live replica to take. The
others are handed to the controller (in a cluster: through ZooKeeper) and answered once they have their
leader, or REQUEST_TIMED_OUT after the request's timeout. A null partition list means every partition.
"""

from __future__ import annotations

from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.errors import ErrorCode
from rill.protocol import ApiKey

PREFERRED, UNCLEAN = 0, 1


@handler(ApiKey.ELECT_LEADERS, 0, 2)
async def handle_elect_leaders(ctx: RequestContext, request: Body) -> Body:
    store = ctx.services.metadata
    election_type = request.get("election_type", PREFERRED)
    if election_type not in (PREFERRED, UNCLEAN):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST, "replica_election_results": []}
    wanted = request.get("topic_partitions")
    if wanted is None:
        pairs = [(t.name, p.partition) for t in store.topics().values() for p in t.partitions]
    else:
        pairs = [(t["topic"], p) for t in wanted for p in t["partitions"]]
    live = {b.node_id for b in store.brokers()}
    results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
    asked: list[tuple[str, int]] = []
    for topic, p in dict.fromkeys(pairs):
        state = store.topic(topic)
        if state is None or not 0 <= p < len(state.partitions):
            results[(topic, p)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{p} does not exist")
            continue
        s = state.partitions[p]
        if election_type == PREFERRED:
            if s.leader == s.replicas[0]:
                results[(topic, p)] = (ErrorCode.ELECTION_NOT_NEEDED, None)
            elif s.replicas[0] not in live or s.replicas[0] not in s.isr:
                results[(topic, p)] = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                                       f"preferred replica {s.replicas[0]} of {topic}-{p} is not a live ISR member")
            else:
                asked.append((topic, p))
        elif s.leader >= 0 and s.leader in live:
            results[(topic, p)] = (ErrorCode.ELECTION_NOT_NEEDED, None)
        elif not any(r in live for r in s.replicas):
            results[(topic, p)] = (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, f"no replica of {topic}-{p} is live")
        else:
            asked.append((topic, p))
    elect = getattr(store, "elect_leaders", None)
    if asked:
        if elect is None:  # a single broker leads every partition it has
            failed = set(asked)
        else:
            failed = await elect(election_type, asked, max(request.get("timeout_ms", 60000), 0) / 1000.0)
        for tp in asked:
            results[tp] = (ErrorCode.REQUEST_TIMED_OUT, "the election did not finish in time") if tp in failed \
                else (ErrorCode.NO_ERROR, None)  # fmt: skip
    by_topic: dict[str, list[Body]] = {}
    for (topic, p), (code, message) in results.items():
        by_topic.setdefault(topic, []).append({"partition_id": p, "error_code": code, "error_message": message})
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "replica_election_results": [{"topic": t, "partition_result": ps} for t, ps in by_topic.items()],
    }
