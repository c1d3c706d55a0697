"""Creating a coordinator's internal topic (``__consumer_offsets``, ``__transaction_state``) the first time it is
needed, as Kafka does: not while fewer brokers than its replication factor are alive (COORDINATOR_NOT_AVAILABLE,
which clients retry), so a cluster starting up or with brokers down never gets an internal topic with fewer
replicas than configured, one it could never repair; a topic another broker created meanwhile is taken as is."""

from __future__ import annotations

import logging

from rill.errors import ErrorCode, KafkaError
from rill.metadata.store import MetadataStore

log = logging.getLogger(__name__)


async def maybe_create_internal_topic(
    metadata: MetadataStore, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
    replication_config: str,
) -> None:  # fmt: skip
    """Create ``name`` unless it exists; ``replication_config`` names the config of its replication factor."""
    if metadata.topic(name) is not None:
        return
    alive = len(metadata.brokers())
    if alive < replication_factor:
        raise KafkaError(
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            f"Number of alive brokers '{alive}' does not meet the required replication factor "
            f"'{replication_factor}' for {name} (configured via '{replication_config}')",
        )
    try:
        await metadata.create_topic(name, partitions, replication_factor, configs)
    except KafkaError as e:
        if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
        return
    log.info("Created %s with %d partitions, replication factor %d", name, partitions, replication_factor)
