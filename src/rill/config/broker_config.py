"""BrokerConfig: a validated broker configuration, its listeners, and topic defaults derived from it."""

from __future__ import annotations

import difflib
import ipaddress
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rill.config.config_def import LONG_MAX, ConfigError, ConfigKey, ConfigSource, ConfigType
from rill.config.definitions import BROKER_CONFIGS, TOPIC_CONFIGS, TOPIC_SYNONYMS, split_per_ip_overrides
from rill.config.security_definitions import SECURITY_PROTOCOLS

_LISTENER_PREFIX = re.compile(r"^listener\.name\.([a-z0-9_.-]+?)\.((?:[a-z0-9-]+\.)?sasl\.jaas\.config|.+)$")


def _listener_prefixed(name: str, values: dict[str, Any], raw: str) -> bool:
    """``listener.name.<listener>.<config>`` (and ``...<mechanism>.sasl.jaas.config``): a known config set for
    one listener, validated as that config; False for any other name. ConfigError when the value is bad."""
    m = _LISTENER_PREFIX.match(name)
    if m is None:
        return False
    suffix = m.group(2)
    base = "sasl.jaas.config" if suffix.endswith("sasl.jaas.config") else suffix
    key = BROKER_CONFIGS.keys.get(base)
    if key is None:
        return False
    try:
        values[name] = key.parse(raw)
    except ValueError as e:
        raise ConfigError(f"Invalid value for configuration {name}: {e}") from None
    return True


def _check_inter_broker(
    values: Mapping[str, Any], originals: Mapping[str, str], advertised: tuple[EndPoint, ...]
) -> None:
    """Kafka's rules: at most one of inter.broker.listener.name and security.inter.broker.protocol is set, and
    the inter-broker listener is one of the advertised listeners."""
    named = values["inter.broker.listener.name"]
    if named and "security.inter.broker.protocol" in originals:
        raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.")
    if named and all(ep.listener_name != str(named).upper() for ep in advertised):
        raise ConfigError(
            f"inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid "
            f"options based on currently configured listeners are {','.join(ep.listener_name for ep in advertised)}"
        )


@dataclass(frozen=True, slots=True)
class EndPoint:
    """One entry of ``listeners``: ``NAME://host:port``."""

    listener_name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"


_ENDPOINT = re.compile(r"^([A-Za-z0-9_.-]+)://(\[[0-9a-fA-F:.%a-z]+\]|[^:\[\]]*):(-?\d+)$")


def parse_listeners(value: str, protocol_map: Mapping[str, str] | None = None) -> list[EndPoint]:
    """Parse ``listeners`` / ``advertised.listeners``; ValueError names the bad entry."""
    endpoints: list[EndPoint] = []
    for item in (s.strip() for s in value.split(",")):
        if not item:
            continue
        m = _ENDPOINT.match(item)
        if m is None:
            raise ValueError(f"{item!r} is not NAME://host:port")
        name, host, port = m.group(1).upper(), m.group(2).strip("[]"), int(m.group(3))
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} of {item!r} is out of range")
        if any(e.listener_name == name for e in endpoints):
            raise ValueError(f"listener name {name} appears twice")
        protocol = (protocol_map or {}).get(name, name)
        endpoints.append(EndPoint(name, host, port, protocol))
    if not endpoints:
        raise ValueError("no listener given")
    return endpoints


def _protocol_map(value: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (s.strip() for s in value.split(",") if s.strip()):
        name, sep, protocol = item.partition(":")
        if not sep or not name or not protocol:
            raise ValueError(f"{item!r} is not NAME:PROTOCOL")
        out[name.strip().upper()] = protocol.strip().upper()
    return out


def per_ip_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides`` as ``{IP address: limit}``: host names are resolved
    once, here (as Kafka does when the config is set). ValueError names a bad entry or a host
    that does not resolve."""
    out: dict[str, int] = {}
    for host, limit in split_per_ip_overrides(text).items():
        try:
            address = str(ipaddress.ip_address(host))
        except ValueError:
            try:
                address = socket.gethostbyname(host)
            except OSError as e:
                raise ValueError(f"cannot resolve host {host!r}: {e}") from None
        out[address] = limit
    return out


PER_IP_ZERO_PROBLEM = (
    "max.connections.per.ip can be 0 only when max.connections.per.ip.overrides names the addresses allowed in"
)


@dataclass(frozen=True)
class BrokerConfig:
    """Validated broker configuration: what was given (``originals``) and every parsed value."""

    originals: Mapping[str, str]
    values: Mapping[str, Any]
    unknown: tuple[str, ...] = ()
    listeners: tuple[EndPoint, ...] = field(default=())
    advertised_listeners: tuple[EndPoint, ...] = field(default=())

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> BrokerConfig:
        """Validate ``props`` (strings, as in server.properties); ConfigError names the bad key."""
        originals = {str(k).strip(): "" if v is None else str(v) for k, v in props.items()}
        values: dict[str, Any] = {}
        unknown: list[str] = []
        for name, key in BROKER_CONFIGS.keys.items():
            raw = originals.get(name)
            if raw is None:
                values[name] = key.default
                continue
            try:
                values[name] = key.parse(raw)
            except ValueError as e:
                raise ConfigError(f"Invalid value {raw!r} for configuration {name}: {e}") from None
        for name in originals:
            if name not in BROKER_CONFIGS:
                unknown.append(name)
        node_id, broker_id = values["node.id"], values["broker.id"]
        if node_id is None:
            values["node.id"] = broker_id if broker_id >= 0 else 0
        elif broker_id >= 0 and broker_id != node_id:
            raise ConfigError(f"node.id ({node_id}) and broker.id ({broker_id}) must match when both are set")
        values["broker.id"] = values["node.id"]
        for name in ("log.dirs", "log.dir"):
            raw = values[name]
            if raw is not None and not [d for d in str(raw).split(",") if d.strip()]:
                raise ConfigError(f"Invalid value {raw!r} for configuration {name}: no directory given")
        try:
            pmap = _protocol_map(values["listener.security.protocol.map"])
        except ValueError as e:
            problem = f"Invalid value for configuration listener.security.protocol.map: {e}"
            raise ConfigError(problem) from None
        endpoints: dict[str, tuple[EndPoint, ...]] = {}
        for name in ("listeners", "advertised.listeners"):
            if values[name] is None:
                continue
            try:
                endpoints[name] = tuple(parse_listeners(values[name], pmap))
            except ValueError as e:
                raise ConfigError(f"Invalid value {values[name]!r} for configuration {name}: {e}") from None
            for ep in endpoints[name]:
                if ep.security_protocol not in SECURITY_PROTOCOLS:
                    raise ConfigError(
                        f"Invalid value for configuration {name}: listener {ep.listener_name} has no security "
                        f"protocol (listener.security.protocol.map names none; known: {', '.join(SECURITY_PROTOCOLS)})"
                    )
        listeners = endpoints["listeners"]
        advertised = endpoints.get("advertised.listeners", listeners)
        for name in list(unknown):
            if _listener_prefixed(name, values, originals[name]):
                unknown.remove(name)
        _check_inter_broker(values, originals, advertised)
        if values["log.dirs"] is None and not values["log.dir"]:
            raise ConfigError("Invalid value for configuration log.dir: a data directory is needed")
        if values["max.connections.per.ip"] == 0 and not values["max.connections.per.ip.overrides"]:
            raise ConfigError(PER_IP_ZERO_PROBLEM)
        if values["group.min.session.timeout.ms"] > values["group.max.session.timeout.ms"]:
            raise ConfigError("group.min.session.timeout.ms must not exceed group.max.session.timeout.ms")
        _check_consumer_group_bounds(values)
        return cls(originals, values, tuple(unknown), listeners, advertised)

    def with_overrides(self, overrides: Mapping[str, Any] | None = None, **kwargs: Any) -> BrokerConfig:
        """A new config with some originals replaced (keyword names use ``_`` for ``.``)."""
        merged = dict(self.originals)
        for k, v in (overrides or {}).items():
            merged[k] = v
        for k, v in kwargs.items():
            merged[k.replace("_", ".")] = v
        return BrokerConfig.from_properties(merged)

    def get(self, name: str) -> Any:
        """The parsed value of a broker config (None when it has no value); KeyError if unknown."""
        if name not in self.values:
            raise KeyError(f"unknown broker config {name!r}")
        return self.values[name]

    def is_static(self, name: str) -> bool:
        return name in self.originals

    def non_default(self) -> dict[str, str]:
        """The configs that were set (for the start-up log line)."""
        hidden = {k for k, key in BROKER_CONFIGS.keys.items() if key.type is ConfigType.PASSWORD}
        hidden |= {k for k in self.originals if k.startswith("listener.name.") and any(
            k.endswith("." + h) for h in hidden)}  # fmt: skip
        return {
            k: "[hidden]" if k in hidden else v for k, v in sorted(self.originals.items()) if k not in self.unknown
        }

    @property
    def node_id(self) -> int:
        return int(self.values["node.id"])

    @property
    def cluster_id(self) -> str | None:
        value = self.values["cluster.id"]
        return str(value) if value else None

    @property
    def log_dirs(self) -> list[str]:
        dirs = self.values["log.dirs"]
        if dirs is None:
            return [self.values["log.dir"]]
        return [d.strip() for d in dirs.split(",") if d.strip()]

    def listener_get(self, listener_name: str, name: str) -> Any:
        """A config as it applies on one listener: ``listener.name.<listener>.<name>`` when set, else ``name``."""
        prefixed = f"listener.name.{listener_name.lower()}.{name}"
        if prefixed in self.values:
            return self.values[prefixed]
        return self.get(name)

    @property
    def inter_broker_listener(self) -> EndPoint:
        """The advertised listener brokers reach each other on: ``inter.broker.listener.name``, else the one
        named as ``security.inter.broker.protocol``, else the first."""
        named = self.values["inter.broker.listener.name"]
        wanted = str(named).upper() if named else str(self.values["security.inter.broker.protocol"]).upper()
        for ep in self.advertised_listeners:
            if ep.listener_name == wanted:
                return ep
        return self.advertised_listeners[0]

    @property
    def listener_address(self) -> tuple[str, int]:
        """(host, port) of the first listener."""
        ep = self.listeners[0]
        return ep.host, ep.port

    @property
    def advertised_address(self) -> tuple[str, int] | None:
        """(host, port) clients are told, when ``advertised.listeners`` names a concrete host."""
        if self.values["advertised.listeners"] is None:
            return None
        ep = self.advertised_listeners[0]
        if ep.host in ("", "0.0.0.0", "::"):
            return None
        return ep.host, ep.port

    @property
    def log_retention_ms(self) -> int:
        return int(effective_broker_value(self, "log.retention.ms"))

    @property
    def log_roll_ms(self) -> int:
        return int(effective_broker_value(self, "log.roll.ms"))

    @property
    def max_request_bytes(self) -> int:
        return int(self.values["socket.request.max.bytes"])

    @property
    def connections_max_idle_ms(self) -> int:
        return int(self.values["connections.max.idle.ms"])

    @property
    def message_max_bytes(self) -> int:
        return int(self.values["message.max.bytes"])


def default_broker_config() -> BrokerConfig:
    return BrokerConfig.from_properties({})


def effective_broker_value(broker: BrokerConfig, name: str, dynamic: Mapping[str, str] | None = None) -> Any:
    """A broker setting resolved through its synonyms, in the unit of ``name`` (e.g. log.retention.ms)."""
    topic = next((t for t, syns in TOPIC_SYNONYMS.items() if syns[0][0] == name), None)
    if topic is None:
        return _lookup(broker, dynamic or {}, name)[0]
    return TOPIC_CONFIGS[topic].parse(_resolve_topic_default(broker, dynamic or {}, topic)[0])


def _lookup(broker: BrokerConfig, dynamic: Mapping[str, str], name: str) -> tuple[Any, ConfigSource]:
    if name in dynamic:
        return BROKER_CONFIGS[name].parse(dynamic[name]), ConfigSource.DYNAMIC_BROKER_CONFIG
    if name in broker.originals:
        return broker.values[name], ConfigSource.STATIC_BROKER_CONFIG
    return broker.values[name], ConfigSource.DEFAULT_CONFIG


def _resolve_topic_default(
    broker: BrokerConfig, dynamic: Mapping[str, str], topic_name: str
) -> tuple[str, ConfigSource]:
    key = TOPIC_CONFIGS[topic_name]
    synonyms = TOPIC_SYNONYMS.get(topic_name, ())
    for source in (ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.STATIC_BROKER_CONFIG):
        for name, factor in synonyms:
            given = dynamic if source is ConfigSource.DYNAMIC_BROKER_CONFIG else broker.originals
            present = name in given
            if present:
                value = _lookup(broker, dynamic, name)[0]
                return scaled(key, value, factor), source
    for name, factor in synonyms:
        value = BROKER_CONFIGS[name].default
        if value is not None:
            return scaled(key, value, factor), ConfigSource.DEFAULT_CONFIG
    return key.to_string(key.default) or "", ConfigSource.DEFAULT_CONFIG


def scaled(key: ConfigKey, value: Any, factor: int) -> str:
    if factor != 1 and isinstance(value, int) and value >= 0:
        value = min(value * factor, LONG_MAX)
    return key.to_string(value) or ""


def topic_config_defaults(broker: BrokerConfig, dynamic: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every topic config's effective default on this broker, as strings (broker settings applied)."""
    dyn = dynamic or {}
    return {name: _resolve_topic_default(broker, dyn, name)[0] for name in TOPIC_CONFIGS.keys}


def closest_broker_config(name: str) -> str | None:
    """The known broker config nearest to ``name`` (a likely typo), or None when none is close."""
    matches = difflib.get_close_matches(name, list(BROKER_CONFIGS.keys), n=1, cutoff=0.8)
    return matches[0] if matches else None


def _check_consumer_group_bounds(values: Mapping[str, Any]) -> None:
    """Kafka's checks of the consumer group protocol's session timeout and heartbeat interval against their
    bounds (and of the interval against the timeout)."""
    p = "group.consumer."
    for setting in ("session.timeout.ms", "heartbeat.interval.ms"):
        low, value, high = values[p + "min." + setting], values[p + setting], values[p + "max." + setting]
        if value < low:
            raise ConfigError(f"{p}{setting} must be greater than or equal to {p}min.{setting}")
        if value > high:
            raise ConfigError(f"{p}{setting} must be less than or equal to {p}max.{setting}")
    if values[p + "heartbeat.interval.ms"] >= values[p + "session.timeout.ms"]:
        raise ConfigError(f"{p}heartbeat.interval.ms must be less than {p}session.timeout.ms")
