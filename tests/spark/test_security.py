"""The rill data source through a SASL_SSL listener: Spark's Kafka security options (``kafka.security.protocol``,
``kafka.sasl.*``, ``kafka.ssl.*``) reach the client of the driver and of every task."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from tests.integration.security._clients import add_scram_user
from tests.integration.security._pki import Pki, make_pki

import rill.testing
from rill.client import ClientSecurity, IdempotentProducer, KafkaClient

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="spark" password="spark-secret";'


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure_broker(pki: Pki) -> Iterator[rill.testing.TestBroker]:
    configs = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server),
        "log.retention.ms": "-1",
    }
    with rill.testing.broker(configs) as b:
        add_scram_user(b.bootstrap_servers, "spark", "spark-secret", "SCRAM-SHA-512")
        yield b


def _options(pki: Pki) -> dict[str, str]:
    return {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": JAAS,
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(pki.ca),
        "kafka.ssl.endpoint.identification.algorithm": "https",
    }


def test_batch_read_and_write_over_sasl_ssl(spark: Any, secure_broker: rill.testing.TestBroker, pki: Pki) -> None:
    address = secure_broker.listener_address("SASL_SSL")
    options = _options(pki)
    security = ClientSecurity.from_properties({k.removeprefix("kafka."): v for k, v in options.items()})
    with KafkaClient(address, security=security, timeout_s=20) as client:
        client.create_topic("secure-in", 2)
        client.create_topic("secure-out", 1)
        with IdempotentProducer(client) as producer:
            for i in range(20):
                producer.send("secure-in", f"v{i}".encode(), partition=i % 2)

    reader = spark.read.format("rill").option("kafka.bootstrap.servers", address).option("subscribe", "secure-in")
    rows = reader.options(**options).load().selectExpr("CAST(value AS STRING) AS v", "partition").collect()
    assert sorted(r.v for r in rows) == sorted(f"v{i}" for i in range(20))

    written = spark.createDataFrame([(f"w{i}",) for i in range(5)], "value string")
    written.write.format("rill").option("kafka.bootstrap.servers", address).option("topic", "secure-out").options(
        **options
    ).mode("append").save()
    back = spark.read.format("rill").option("kafka.bootstrap.servers", address).option("subscribe", "secure-out")
    assert sorted(r.value for r in back.options(**options).load().collect()) == [f"w{i}".encode() for i in range(5)]

    # a wrong password: the query fails with the broker's refusal, naming the mechanism
    wrong = {**options, "kafka.sasl.jaas.config": JAAS.replace("spark-secret", "wrong")}
    with pytest.raises(Exception, match=r"SCRAM-SHA-512 authentication of user 'spark'.*SASL_AUTHENTICATION_FAILED"):
        spark.read.format("rill").option("kafka.bootstrap.servers", address).option("subscribe", "secure-in").options(
            **wrong
        ).load().collect()
    # a store type the client cannot read is refused by its option name
    jks = {**options, "kafka.ssl.truststore.type": "JKS"}
    with pytest.raises(Exception, match=r"kafka\.ssl\.truststore\.type JKS is not supported"):
        spark.read.format("rill").option("kafka.bootstrap.servers", address).option("subscribe", "secure-in").options(
            **jks
        ).load().collect()
