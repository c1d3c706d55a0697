"""Helpers shared by handlers: resolving a request's topic by name or by id."""

from __future__ import annotations

import uuid
from typing import Any

from rill.api.context import RequestContext

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
