"""A small blocking Kafka client on Rill's protocol codec (plain sockets, no asyncio)."""

from rill.client.client import ClusterMetadata, FetchedPartition, KafkaClient, OffsetAndTimestamp
from rill.client.connection import BrokerConnection, NetworkError, parse_bootstrap
from rill.client.producer import IdempotentProducer, default_partition, murmur2

__all__ = [
    "BrokerConnection",
    "ClusterMetadata",
    "FetchedPartition",
    "IdempotentProducer",
    "KafkaClient",
    "NetworkError",
    "OffsetAndTimestamp",
    "default_partition",
    "murmur2",
    "parse_bootstrap",
]
