"""AlterConfigs and IncrementalAlterConfigs on a broker resource through librdkafka's admin client take every broker
config name Kafka knows (librdkafka's own admin test sets ``sasl.kerberos.min.time.before.relogin``): stored and
described, as Kafka does; Kafka's update modes hold (read-only names refused as Kafka refuses them, per-broker names
only on a broker's own resource), and a name Kafka does not know is still refused as unknown."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from tests.integration.broker._wire import Wire

from rill.errors import ErrorCode
from rill.protocol import ApiKey

pytestmark = pytest.mark.timeout(60)

BROKER = ConfigResource.Type.BROKER


def _described(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(BROKER, name)
    return admin.describe_configs([resource])[resource].result(15)  # type: ignore[no-any-return]


def _error(future: object) -> str:
    with pytest.raises(KafkaException) as raised:
        future.result(15)  # type: ignore[attr-defined]
    return str(raised.value)


def test_kafka_broker_configs_rill_does_not_use_are_set_and_described(rill_broker) -> None:
    admin = AdminClient({"bootstrap.servers": rill_broker.bootstrap_servers})
    broker_id = str(rill_broker.broker.config.node_id)
    # librdkafka's admin test: the legacy AlterConfigs on the broker's own resource
    legacy = ConfigResource(BROKER, broker_id, set_config={"sasl.kerberos.min.time.before.relogin": "58000"})
    admin.alter_configs([legacy])[legacy].result(15)
    seen = _described(admin, broker_id)["sasl.kerberos.min.time.before.relogin"]
    assert (seen.value, seen.source) == ("58000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

    change = ConfigResource(BROKER, broker_id, incremental_configs=[
        ConfigEntry("sasl.kerberos.min.time.before.relogin", "61000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("ssl.keymanager.algorithm", "PKIX", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("background.threads", "4", incremental_operation=AlterConfigOpType.SET),
    ])  # fmt: skip
    admin.incremental_alter_configs([change])[change].result(15)
    entries = _described(admin, broker_id)
    wanted = {"sasl.kerberos.min.time.before.relogin": "61000", "ssl.keymanager.algorithm": "PKIX",
              "background.threads": "4"}  # fmt: skip
    assert {n: entries[n].value for n in wanted} == wanted
    assert entries["num.replica.fetchers"].value == "1"  # Kafka's default, described though never set

    # the cluster-wide default ("": librdkafka will not name it) takes a cluster-wide config, not a per-broker one,
    # as in Kafka
    wire = Wire(rill_broker.bootstrap_servers)
    try:
        for name, code in (("metric.reporters", ErrorCode.NONE), ("sasl.kerberos.service.name",
                                                                   ErrorCode.INVALID_CONFIG)):  # fmt: skip
            resp = wire.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
                {"resource_type": 4, "resource_name": "", "configs": [
                    {"name": name, "config_operation": 0, "value": "kafka"}]}]})  # fmt: skip
            (result,) = resp["responses"]
            assert result["error_code"] == code, result
        assert "broker id must be specified" in result["error_message"]
    finally:
        wire.close()


def test_read_only_and_unknown_names_are_refused_as_kafka_refuses_them(rill_broker) -> None:
    admin = AdminClient({"bootstrap.servers": rill_broker.bootstrap_servers})
    broker_id = str(rill_broker.broker.config.node_id)
    for name, refusal in (("process.roles", "Cannot update these configs dynamically"),
                          ("no.such.broker.config", "Unknown broker config name")):  # fmt: skip
        change = ConfigResource(BROKER, broker_id, incremental_configs=[
            ConfigEntry(name, "broker", incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
        assert refusal in _error(admin.incremental_alter_configs([change])[change])
    # a bad value of a known name is refused with the reason, and nothing is stored
    bad = ConfigResource(BROKER, broker_id, incremental_configs=[
        ConfigEntry("sasl.kerberos.min.time.before.relogin", "soon", incremental_operation=AlterConfigOpType.SET)])
    assert "Invalid value soon" in _error(admin.incremental_alter_configs([bad])[bad])
    assert _described(admin, broker_id)["sasl.kerberos.min.time.before.relogin"].value == "60000"
