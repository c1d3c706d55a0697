"""Validation of topic and dynamic broker configs, and DescribeConfigs entries with sources and synonyms.

Synonym order follows Kafka: a topic override first, then for each source in turn (dynamic
broker, dynamic cluster default, static ``server.properties``, built-in default) the broker
synonyms in priority order (``log.retention.ms``, ``.minutes``, ``.hours``). As Kafka's ConfigHelper does,
the broker synonyms listed before the first one named as the config's own broker name are dropped
(``retention.ms`` on a broker that sets only ``log.retention.hours`` lists none, and its source is then
DEFAULT_CONFIG), while the value is still the one in effect.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rill.config.broker_config import BrokerConfig, scaled
from rill.config.config_def import ConfigSource, ConfigType
from rill.config.definitions import BROKER_CONFIGS, BROKER_SYNONYMS, TOPIC_CONFIGS, TOPIC_SYNONYMS
from rill.config.kafka_definitions import PER_BROKER_ONLY
from rill.errors import ErrorCode, KafkaError


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Check topic configs (CreateTopics, AlterConfigs); KafkaError(INVALID_CONFIG) names the problem."""
    parsed: dict[str, Any] = {}
    for name, raw in configs.items():
        key = TOPIC_CONFIGS.keys.get(name)
        if key is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if raw is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {name}")
        try:
            parsed[name] = key.parse(raw)
        except ValueError as e:
            message = f"Invalid value {raw} for configuration {name}: {e}"
            raise KafkaError(ErrorCode.INVALID_CONFIG, message) from None
    return parsed


def validate_broker_dynamic_configs(
    configs: Mapping[str, str | None], *, cluster_default: bool = False
) -> dict[str, Any]:
    """Check dynamic broker configs (AlterConfigs on a broker, or on the cluster-wide default resource when
    ``cluster_default``); KafkaError(INVALID_CONFIG) on a bad one."""
    parsed: dict[str, Any] = {}
    for name, raw in configs.items():
        key = BROKER_CONFIGS.keys.get(name)
        if key is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown broker config name: {name}")
        if not key.dynamic:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Cannot update these configs dynamically: [{name}]")
        if cluster_default and name in PER_BROKER_ONLY:
            raise KafkaError(ErrorCode.INVALID_CONFIG, "Cannot update these configs at default cluster level, "
                                                       f"broker id must be specified: [{name}]")  # fmt: skip
        if raw is None:
            continue
        try:
            parsed[name] = key.parse(raw)
        except ValueError as e:
            message = f"Invalid value {raw} for configuration {name}: {e}"
            raise KafkaError(ErrorCode.INVALID_CONFIG, message) from None
    return parsed


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One row of a DescribeConfigs answer."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    is_sensitive: bool
    config_type: ConfigType
    synonyms: tuple[ConfigSynonym, ...]
    documentation: str

    @property
    def is_default(self) -> bool:
        return self.source is ConfigSource.DEFAULT_CONFIG


def _broker_synonyms(
    broker: BrokerConfig,
    dynamic: Mapping[str, str],
    dynamic_default: Mapping[str, str],
    names: Iterable[str],
    sensitive: bool,
) -> list[ConfigSynonym]:
    names = list(names)
    out: list[ConfigSynonym] = []
    layers: list[tuple[ConfigSource, Callable[[str], str | None]]] = [
        (ConfigSource.DYNAMIC_BROKER_CONFIG, dynamic.get),
        (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, dynamic_default.get),
        (ConfigSource.STATIC_BROKER_CONFIG,
         lambda n: BROKER_CONFIGS[n].to_string(broker.values[n]) if n in broker.originals else None),
        (ConfigSource.DEFAULT_CONFIG, lambda n: BROKER_CONFIGS[n].to_string(BROKER_CONFIGS[n].default)),
    ]  # fmt: skip
    for source, get in layers:
        for name in names:
            value = get(name)
            if value is not None:
                out.append(ConfigSynonym(name, None if sensitive else value, source))
    return out


def _from_own_name(synonyms: list[ConfigSynonym], own: str) -> list[ConfigSynonym]:
    """Kafka's rule: the synonyms from the first one named ``own`` on (none when no synonym is)."""
    for i, s in enumerate(synonyms):
        if s.name == own:
            return synonyms[i:]
    return []


def describe_topic_configs(
    broker: BrokerConfig,
    overrides: Mapping[str, str],
    dynamic: Mapping[str, str] | None = None,
    dynamic_default: Mapping[str, str] | None = None,
    only: Collection[str] | None = None,
) -> list[ConfigEntry]:
    """Every topic config (or those named in ``only``) with its effective value, source and synonyms (topic
    override first)."""
    entries: list[ConfigEntry] = []
    dyn, dyn_default = dynamic or {}, dynamic_default or {}
    for name, key in sorted(TOPIC_CONFIGS.keys.items()):
        if only is not None and name not in only:
            continue
        sensitive = key.type is ConfigType.PASSWORD
        synonym_names = [n for n, _ in TOPIC_SYNONYMS.get(name, ())]
        in_effect = _broker_synonyms(broker, dyn, dyn_default, synonym_names, sensitive)
        synonyms = _from_own_name(in_effect, synonym_names[0]) if synonym_names else []
        if name in overrides:
            value: str | None = str(overrides[name])
            override = ConfigSynonym(name, None if sensitive else value, ConfigSource.DYNAMIC_TOPIC_CONFIG)
            synonyms.insert(0, override)
        elif in_effect:
            factor = dict(TOPIC_SYNONYMS[name])[in_effect[0].name]
            raw = in_effect[0].value
            value = scaled(key, key.parse(raw), factor) if raw is not None else None
        else:
            value = key.to_string(key.default)
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(name, None if sensitive else value, source, False, sensitive, key.type,
                                   tuple(synonyms), key.doc))  # fmt: skip
    return entries


def describe_broker_configs(
    broker: BrokerConfig,
    dynamic: Mapping[str, str] | None = None,
    dynamic_default: Mapping[str, str] | None = None,
) -> list[ConfigEntry]:
    """Every broker config with its value, source (dynamic, static, default) and synonyms."""
    entries: list[ConfigEntry] = []
    dyn, dyn_default = dynamic or {}, dynamic_default or {}
    given_id = "node.id" in broker.originals or "broker.id" in broker.originals
    for name, key in sorted(BROKER_CONFIGS.keys.items()):
        if name in ("node.id", "broker.id"):
            # One value under two names: Kafka copies whichever was set into the other.
            node_id = str(broker.node_id)
            id_source = ConfigSource.STATIC_BROKER_CONFIG if given_id else ConfigSource.DEFAULT_CONFIG
            entries.append(ConfigEntry(name, node_id, id_source, not key.dynamic, False, key.type,
                                       (ConfigSynonym(name, node_id, id_source),), key.doc))  # fmt: skip
            continue
        sensitive = key.type is ConfigType.PASSWORD
        group = BROKER_SYNONYMS.get(name, (name,))
        synonyms = _from_own_name(_broker_synonyms(broker, dyn, dyn_default, group, sensitive), name)
        if synonyms:
            value, source = synonyms[0].value, synonyms[0].source
        else:
            value, source = key.to_string(broker.values.get(name)), ConfigSource.DEFAULT_CONFIG
            if name == "cluster.id":
                source = ConfigSource.STATIC_BROKER_CONFIG if value is not None else source
        entries.append(ConfigEntry(name, None if sensitive else value, source, not key.dynamic, sensitive,
                                   key.type, tuple(synonyms), key.doc))  # fmt: skip
    return entries
