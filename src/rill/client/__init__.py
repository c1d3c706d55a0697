"""A small blocking Kafka client on Rill's protocol codec (blocking sockets, TLS and SASL, no asyncio)."""

from rill.client.client import ClusterMetadata, FetchedPartition, KafkaClient, OffsetAndTimestamp
from rill.client.connection import BrokerConnection, NetworkError, parse_bootstrap
from rill.client.producer import IdempotentProducer, default_partition, murmur2
from rill.client.security import AuthenticationError, ClientSecurity, SecurityConfigError

__all__ = [
    "AuthenticationError",
    "BrokerConnection",
    "ClientSecurity",
    "ClusterMetadata",
    "FetchedPartition",
    "IdempotentProducer",
    "KafkaClient",
    "NetworkError",
    "OffsetAndTimestamp",
    "SecurityConfigError",
    "default_partition",
    "murmur2",
    "parse_bootstrap",
]
