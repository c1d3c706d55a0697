"""The settings of this broker's connections to the other brokers: the inter-broker listener's TLS context
and SASL authenticator (``inter.broker.listener.name`` / ``security.inter.broker.protocol``,
``sasl.mechanism.inter.broker.protocol``, the username and password of that listener's JAAS config)."""

from __future__ import annotations

from typing import Any

from rill.cluster.channel import NetworkClientConfig
from rill.config import BrokerConfig
from rill.security.listener_configs import inter_broker_security
from rill.security.sasl_client import SaslClientAuthenticator


def client_config(client_id: str, config: Any) -> NetworkClientConfig:
    """A ``NetworkClientConfig`` for connections to other brokers' inter-broker listeners."""
    if not isinstance(config, BrokerConfig):
        return NetworkClientConfig(client_id=client_id)
    security = inter_broker_security(config)
    authenticator = None
    if security.mechanism is not None:
        authenticator = SaslClientAuthenticator(security.mechanism, security.username, security.password)
    return NetworkClientConfig(client_id=client_id, ssl_context=security.ssl_context, authenticator=authenticator)
