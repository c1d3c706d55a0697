"""Rill's declarations of the Kafka messages it speaks, grouped by API family.

Each family module lists its ``APIS`` as (request, response) pairs; ``group_data`` lists payloads that are
not APIs (``DATA``).
"""

from __future__ import annotations

from rill.protocol.messages import (
    acls,
    api_versions,
    cluster,
    configs,
    consumer_group,
    fetch,
    group,
    group_data,
    list_offsets,
    metadata,
    offsets,
    produce,
    quotas,
    security,
    share,
    share_state,
    telemetry,
    topics,
    transactions,
    txn_markers,
)
from rill.protocol.schema import Message

API_MESSAGES: list[tuple[Message, Message]] = [
    *api_versions.APIS,
    *metadata.APIS,
    *produce.APIS,
    *fetch.APIS,
    *list_offsets.APIS,
    *topics.APIS,
    *configs.APIS,
    *group.APIS,
    *consumer_group.APIS,
    *offsets.APIS,
    *cluster.APIS,
    *security.APIS,
    *acls.APIS,
    *transactions.APIS,
    *txn_markers.APIS,
    *quotas.APIS,
    *share.APIS,
    *share_state.APIS,
    *telemetry.APIS,
]

DATA_MESSAGES: list[Message] = [*group_data.DATA, *consumer_group.DATA, *share.DATA, *share_state.DATA]
