"""What a handler gets besides its request body: the request header, the client, and the broker's services."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rill.network.handler import ClientSoftware
from rill.security.channel import ChannelSecurity
from rill.security.principal import KafkaPrincipal

if TYPE_CHECKING:
    from rill.config import BrokerConfig
    from rill.metadata.store import MetadataStore
    from rill.replica.replica_manager import ReplicaManager


@dataclass(slots=True)
class BrokerServices:
    """The broker's parts that handlers call. Built once by :mod:`rill.broker`."""

    node_id: int
    config: BrokerConfig
    metadata: MetadataStore
    replica_manager: ReplicaManager
    producer_ids: Any  # rill.api.init_producer_id.ProducerIdManager
    group_coordinator: Any = None  # rill.coordinator.group.GroupCoordinator once it exists
    txn_coordinator: Any = None  # rill.coordinator.transaction.TransactionCoordinator once it exists
    share_coordinator: Any = None  # rill.coordinator.share.share_coordinator.ShareCoordinator once it exists
    metrics: Any = None  # rill.metrics.BrokerMetrics when metrics are on
    security: Any = None  # rill.security.listener_configs.BrokerSecurity: each listener's TLS and SASL
    authorizer: Any = None  # rill.security.authorizer.AclAuthorizer when authorizer.class.name is set
    quotas: Any = None  # rill.quota.QuotaManagers: client quotas (produce, fetch, request)
    share: Any = None  # rill.api.share_groups.ShareServices once a share-group API is first used
    client_metrics: Any = None  # rill.telemetry.client_metrics_manager.ClientMetricsManager (KIP-714)
    fetch_sessions: Any = None  # rill.api.fetch_session.FetchSessionCache once a Fetch is first handled


@dataclass(frozen=True, slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    client_port: int
    services: BrokerServices
    listener_name: str = "PLAINTEXT"
    security: ChannelSecurity = field(default_factory=ChannelSecurity)
    """The connection's security: its principal (``User:ANONYMOUS`` on PLAINTEXT) and SASL state."""
    client_software: ClientSoftware = field(default_factory=ClientSoftware)
    """The connection's client software name and version, from its ApiVersions request."""
    connection_id: str = ""
    may_defer: bool = False
    """The handler may answer with a ``DeferredBody`` (no client quotas apply to the request)."""

    @property
    def principal(self) -> KafkaPrincipal:
        return self.security.principal

    @property
    def client(self) -> str:
        return f"{self.client_id or '-'}@{self.client_host}:{self.client_port}"
