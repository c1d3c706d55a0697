"""Kafka's broker and topic configurations: names, types, defaults, validation, synonyms, and describe.

Values arrive as strings (``server.properties``, ``--override``, CreateTopics, AlterConfigs) and are
parsed by their ``ConfigDef``; ``BrokerConfig`` holds a validated broker configuration.
"""

from rill.config.broker_config import (
    BrokerConfig,
    EndPoint,
    closest_broker_config,
    default_broker_config,
    effective_broker_value,
    parse_listeners,
    topic_config_defaults,
)
from rill.config.config_def import (
    INT_MAX,
    LONG_MAX,
    ConfigDef,
    ConfigError,
    ConfigKey,
    ConfigSource,
    ConfigType,
    Importance,
)
from rill.config.definitions import (
    BROKER_CONFIGS,
    BROKER_SYNONYMS,
    COMPRESSION_TYPES,
    TIMESTAMP_TYPES,
    TOPIC_CONFIGS,
    TOPIC_SYNONYMS,
)
from rill.config.describe import (
    ConfigEntry,
    ConfigSynonym,
    describe_broker_configs,
    describe_topic_configs,
    validate_broker_dynamic_configs,
    validate_topic_configs,
)
from rill.config.properties import ensure_cluster_id, load_properties, parse_properties

__all__ = [
    "BROKER_CONFIGS",
    "BROKER_SYNONYMS",
    "COMPRESSION_TYPES",
    "INT_MAX",
    "LONG_MAX",
    "TIMESTAMP_TYPES",
    "TOPIC_CONFIGS",
    "TOPIC_SYNONYMS",
    "BrokerConfig",
    "ConfigDef",
    "ConfigEntry",
    "ConfigError",
    "ConfigKey",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "EndPoint",
    "Importance",
    "closest_broker_config",
    "default_broker_config",
    "describe_broker_configs",
    "describe_topic_configs",
    "effective_broker_value",
    "ensure_cluster_id",
    "load_properties",
    "parse_listeners",
    "parse_properties",
    "topic_config_defaults",
    "validate_broker_dynamic_configs",
    "validate_topic_configs",
]
