"""Helpers shared by handlers: resolving a request's topic by name or by id."""

from __future__ import annotations

import uuid
from typing import Any

from rill.api._endpoints import broker_endpoints
from rill.api.context import RequestContext
from rill.common import TopicPartition
from rill.errors import ErrorCode

ZERO_UUID = uuid.UUID(int=0)


def resolve_topic_name(ctx: RequestContext, entry: dict[str, Any], name_key: str = "name") -> str | None:
    """The topic named by a request entry: by name, or by ``topic_id`` in versions that carry ids."""
    name = entry.get(name_key)
    if name:
        return str(name)
    topic_id = entry.get("topic_id")
    if isinstance(topic_id, uuid.UUID) and topic_id != ZERO_UUID:
        topic = ctx.services.metadata.topic_by_id(topic_id)
        return topic.name if topic is not None else None
    return None


def topic_id_of(ctx: RequestContext, name: str | None) -> uuid.UUID:
    if name is None:
        return ZERO_UUID
    topic = ctx.services.metadata.topic(name)
    return topic.topic_id if topic is not None else ZERO_UUID


class LeaderHints:
    """KIP-951: partitions answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH carry their current leader
    and epoch, and the response the leaders' endpoints, so a client moves at once instead of after a metadata
    refresh."""

    MOVED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})

    def __init__(self, ctx: RequestContext) -> None:
        self._ctx = ctx
        self._leaders: set[int] = set()

    def add(self, result: dict[str, Any], topic: str | None, partition: int) -> None:
        """Set ``current_leader`` on a partition result whose error says its leader moved."""
        if topic is None or result.get("error_code") not in self.MOVED:
            return
        state = self._ctx.services.metadata.topic(topic)
        if state is None or partition >= len(state.partitions):
            return
        p = state.partitions[partition]
        if p.leader == self._ctx.services.node_id:  # this broker's image is behind: it knows no better leader
            return
        result["current_leader"] = {"leader_id": p.leader, "leader_epoch": p.leader_epoch}
        if p.leader >= 0:
            self._leaders.add(p.leader)

    def node_endpoints(self) -> list[dict[str, Any]]:
        if not self._leaders:  # the usual case: no partition moved, nothing to look up
            return []
        return [b for b in broker_endpoints(self._ctx) if b["node_id"] in self._leaders]


def partition_errors(topics: list[dict[str, Any]], errors: dict[TopicPartition, ErrorCode]) -> list[dict[str, Any]]:
    """The response topics of a request naming partitions as ``{"name", "partitions": [{"partition_index"}]}``
    (OffsetCommit, TxnOffsetCommit, OffsetDelete): each partition with its error from ``errors``."""
    return [
        {
            "name": topic["name"],
            "partitions": [
                {
                    "partition_index": p["partition_index"],
                    "error_code": errors[TopicPartition(topic["name"], p["partition_index"])],
                }
                for p in topic["partitions"]
            ],
        }
        for topic in topics
    ]
