"""DescribeConfigs synonyms as Kafka lists them, through confluent-kafka and kafka-python: a topic config's broker
synonyms start at the config's own broker name (``log.retention.ms`` for ``retention.ms``); those before it are
dropped, so a broker that sets only ``log.retention.hours`` (or nothing) lists none for ``retention.ms``."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

pytestmark = pytest.mark.timeout(60)

STATIC, DEFAULT, TOPIC = (
    ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG, ConfigSource.DYNAMIC_TOPIC_CONFIG)


def _retention(bootstrap: str, topic: str, overrides: dict[str, str] | None = None) -> tuple[str, int, list[tuple]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=overrides or {})])[topic].result(15)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entry = admin.describe_configs([resource])[resource].result(15)["retention.ms"]
    synonyms = [(s.name, s.value, s.source) for s in entry.synonyms.values()]
    return entry.value, entry.source, synonyms


def _kafka_python_synonyms(bootstrap: str, topic: str) -> list[tuple[str, str]]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described = admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, topic, ["retention.ms"])],
                                           include_synonyms=True, config_filter="all")  # fmt: skip
        entry = described["topic"][topic]["retention.ms"]
        return [(s["name"], s["value"]) for s in entry["synonyms"]]
    finally:
        admin.close()


def test_by_default_retention_ms_lists_no_broker_synonym(rill_broker) -> None:
    value, source, synonyms = _retention(rill_broker.bootstrap_servers, "syn-default")
    assert (value, source, synonyms) == ("604800000", DEFAULT.value, [])
    assert _kafka_python_synonyms(rill_broker.bootstrap_servers, "syn-default") == []


@pytest.mark.rill_broker_config(**{"log.retention.hours": "24"})
def test_a_broker_setting_only_hours_lists_none_and_keeps_the_value(rill_broker) -> None:
    assert _retention(rill_broker.bootstrap_servers, "syn-hours") == ("86400000", DEFAULT.value, [])


@pytest.mark.rill_broker_config(**{"log.retention.ms": "3600000"})
def test_from_the_own_broker_name_on(rill_broker) -> None:
    value, source, synonyms = _retention(rill_broker.bootstrap_servers, "syn-ms")
    assert (value, source) == ("3600000", STATIC.value)
    assert synonyms == [("log.retention.ms", "3600000", STATIC.value), ("log.retention.hours", "168", DEFAULT.value)]
    value, source, synonyms = _retention(rill_broker.bootstrap_servers, "syn-topic", {"retention.ms": "5000"})
    assert (value, source) == ("5000", TOPIC.value)
    assert synonyms == [("retention.ms", "5000", TOPIC.value), ("log.retention.ms", "3600000", STATIC.value),
                        ("log.retention.hours", "168", DEFAULT.value)]  # fmt: skip
    assert _kafka_python_synonyms(rill_broker.bootstrap_servers, "syn-topic") == [
        ("retention.ms", "5000"), ("log.retention.ms", "3600000"), ("log.retention.hours", "168")]  # fmt: skip
