"""What each listener's security is, from the broker's config: protocol, TLS context, SASL mechanisms and
PLAIN users; and what this broker presents when it connects to another broker's inter-broker listener.

A config applies to a listener as ``listener.name.<listener>.<config>`` when that is set, else as ``<config>``.
A JAAS config is looked up as ``listener.name.<listener>.<mechanism>.sasl.jaas.config``, then
``listener.name.<listener>.sasl.jaas.config``, then ``sasl.jaas.config``.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rill.config import BrokerConfig, ConfigError, EndPoint
from rill.security import ssl_factory
from rill.security.channel import SASL_PROTOCOLS, TLS_PROTOCOLS
from rill.security.jaas import LoginModule, parse_jaas_config
from rill.security.sasl_server import PLAIN, CredentialLookup, PlainSaslServer, SaslServer, ScramSaslServer
from rill.security.scram import SCRAM_MECHANISMS
from rill.security.ssl_principal_mapper import SslPrincipalMapper

SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)


def jaas_modules(config: BrokerConfig, listener_name: str, mechanism: str) -> list[LoginModule]:
    """The login modules configured for ``mechanism`` on ``listener_name`` (empty when none)."""
    prefix = f"listener.name.{listener_name.lower()}."
    for name in (f"{prefix}{mechanism.lower()}.sasl.jaas.config", f"{prefix}sasl.jaas.config"):
        if config.values.get(name):
            return parse_jaas_config(str(config.values[name]))
    text = config.get("sasl.jaas.config")
    return parse_jaas_config(str(text)) if text else []


@dataclass(slots=True)
class ListenerSecurity:
    """One listener: its protocol, TLS context (SSL, SASL_SSL) and SASL mechanisms (SASL_*)."""

    name: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()
    plain_users: Mapping[str, str] = field(default_factory=dict)
    max_receive: int = 524288
    reauth_ms: int = 0
    failed_delay_ms: int = 100

    def new_sasl_server(self, mechanism: str, scram_lookup: CredentialLookup) -> SaslServer:
        if mechanism == PLAIN:
            return PlainSaslServer(self.plain_users)
        return ScramSaslServer(mechanism, scram_lookup)


def _listener(config: BrokerConfig, ep: EndPoint) -> ListenerSecurity:
    def get(name: str) -> Any:
        return config.listener_get(ep.listener_name, name)

    sec = ListenerSecurity(ep.listener_name, ep.security_protocol)
    sec.reauth_ms = int(get("connections.max.reauth.ms"))
    sec.failed_delay_ms = int(get("connection.failed.authentication.delay.ms"))
    sec.max_receive = int(get("sasl.server.max.receive.size"))
    if ep.security_protocol in TLS_PROTOCOLS:
        try:
            sec.ssl_context = ssl_factory.server_context(get)
        except ConfigError as e:
            raise ConfigError(f"listener {ep.listener_name}: {e}") from None
    if ep.security_protocol in SASL_PROTOCOLS:
        wanted = [str(m).upper() for m in get("sasl.enabled.mechanisms") or ()]
        mechanisms = tuple(m for m in wanted if m in SUPPORTED_MECHANISMS)
        if not mechanisms:
            raise ConfigError(
                f"listener {ep.listener_name}: sasl.enabled.mechanisms {wanted} names none Rill serves "
                f"({', '.join(SUPPORTED_MECHANISMS)})"
            )
        sec.mechanisms = mechanisms
        if PLAIN in mechanisms:
            users: dict[str, str] = {}
            for module in jaas_modules(config, ep.listener_name, PLAIN):
                users.update(module.users)
            sec.plain_users = users
    return sec


class BrokerSecurity:
    """Every listener's security, built once at start; ConfigError when a listener cannot be set up."""

    def __init__(self, config: BrokerConfig, scram_lookup: CredentialLookup | None = None) -> None:
        self.config = config
        self.listeners = {ep.listener_name: _listener(config, ep) for ep in config.listeners}
        self.scram_lookup: CredentialLookup = scram_lookup or (lambda user, mechanism: None)
        # listener -> [successful, failed] authentications (Kafka's successful-/failed-authentication-total)
        self.authentications: dict[str, list[int]] = {name: [0, 0] for name in self.listeners}

    def count(self, listener: str, ok: bool) -> None:
        self.authentications.setdefault(listener, [0, 0])[0 if ok else 1] += 1

    def listener(self, name: str) -> ListenerSecurity:
        return self.listeners.get(name) or ListenerSecurity(name, "PLAINTEXT")

    def principal_names(self) -> dict[str, Callable[[str], str]]:
        """Listener -> the principal name of a client certificate's subject DN, where
        ``ssl.principal.mapping.rules`` is not DEFAULT."""
        out: dict[str, Callable[[str], str]] = {}
        for name in self.listeners:
            rules = str(self.config.listener_get(name, "ssl.principal.mapping.rules"))
            if rules.strip() != "DEFAULT":
                out[name] = SslPrincipalMapper(rules).name
        return out

    def ssl_contexts(self) -> dict[str, ssl.SSLContext]:
        return {n: s.ssl_context for n, s in self.listeners.items() if s.ssl_context is not None}


@dataclass(frozen=True, slots=True)
class InterBrokerSecurity:
    """How this broker connects to the others: the inter-broker listener's protocol, a TLS client context,
    and the SASL mechanism with this broker's username and password (from that listener's JAAS config)."""

    listener_name: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""


def inter_broker_security(config: BrokerConfig) -> InterBrokerSecurity:
    ep = config.inter_broker_listener

    def get(name: str) -> Any:
        return config.listener_get(ep.listener_name, name)

    context = ssl_factory.client_context(get) if ep.security_protocol in TLS_PROTOCOLS else None
    if ep.security_protocol not in SASL_PROTOCOLS:
        return InterBrokerSecurity(ep.listener_name, ep.security_protocol, context)
    mechanism = str(config.get("sasl.mechanism.inter.broker.protocol")).upper()
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ConfigError(f"sasl.mechanism.inter.broker.protocol {mechanism} is not one Rill speaks "
                          f"({', '.join(SUPPORTED_MECHANISMS)})")  # fmt: skip
    modules = jaas_modules(config, ep.listener_name, mechanism)
    options = next((m.options for m in modules if "username" in m.options), None)
    if options is None:
        raise ConfigError(f"the inter-broker listener {ep.listener_name} uses SASL {mechanism}: its JAAS config needs "
                          "username and password")  # fmt: skip
    return InterBrokerSecurity(
        ep.listener_name, ep.security_protocol, context, mechanism, options["username"], options.get("password", "")
    )


def advertised_endpoints(
    config: BrokerConfig, bound: Mapping[str, tuple[str, int]]
) -> tuple[tuple[str, str, int, str], ...]:
    """(listener, host, port, security protocol) clients and brokers are told: ``advertised.listeners`` (else
    ``listeners``), a wildcard or empty host and port 0 filled in from where that listener is bound."""
    out = []
    for ep in config.advertised_listeners:
        bound_host, bound_port = bound.get(ep.listener_name, (ep.host, ep.port))
        host = bound_host if ep.host in ("", "0.0.0.0", "::") else ep.host
        out.append((ep.listener_name, host, ep.port or bound_port, ep.security_protocol))
    return tuple(out)
