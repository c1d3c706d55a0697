"""The rill data source through a SASL_SSL listener: Spark's Kafka security options (``kafka.security.protocol``,
``kafka.sasl.*``, ``kafka.ssl.*``) reach the client of the driver and of every task; ``rill pipeline`` with
``--command-config`` loads, audits and feeds through the same listener."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.security._clients import add_scram_user
from tests.integration.security._pki import Pki, make_pki

import rill.testing
from rill.client import ClientSecurity, IdempotentProducer, KafkaClient
from rill.common import TopicPartition
from rill.records.record import decode_records_in
from rill.spark.audit import AuditCounter
from rill.spark.loader import read_published
from rill.spark.session import worker_env

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


@pytest.mark.timeout(400)
def test_pipeline_load_audit_and_feed_over_sasl_ssl(
    secure_broker: rill.testing.TestBroker, pki: Pki, tmp_path: Path
) -> None:
    """``rill pipeline load``, ``audit`` and ``feed`` with ``--command-config`` reach the cluster only through its
    SASL_SSL listener: the Spark source and sink, the loader's client (with the ``--group`` commit) and the
    audit's."""
    address = secure_broker.listener_address("SASL_SSL")
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.jaas.config={JAAS}\nssl.truststore.type=PEM\nssl.truststore.location={pki.ca}\n"
    )
    security = ClientSecurity.from_properties({k.removeprefix("kafka."): v for k, v in _options(pki).items()})
    counter = AuditCounter(window_ms=60_000, host="web-1")
    tps = [TopicPartition("pipeline-in", p) for p in (0, 1)]
    with KafkaClient(address, security=security, timeout_s=20) as client:
        client.create_topic("pipeline-in", 2)
        client.create_topic("pipeline-per-minute", 1)
        with IdempotentProducer(client) as producer:
            for i in range(50):
                ts, headers = counter.stamp("pipeline-in", now_ms=1_700_000_000_000 + i * 7_000)
                producer.send("pipeline-in", f"v{i}".encode(), partition=i % 2, timestamp_ms=ts, headers=headers)
            counter.publish(producer, "_audit-secure")

    secured = ["--bootstrap-server", address, "--command-config", str(props)]
    out = tmp_path / "warehouse"
    load = _rill_pipeline("load", *secured, "--master", "local[1]", "--topics", "pipeline-in", "--output", str(out),
                          "--group", "secure-loader")  # fmt: skip
    assert load.returncode == 0, load.stderr[-3000:]
    assert "published batch=000001 (50 records)" in load.stdout, load.stdout
    table = read_published(out, columns=["value", "partition", "offset"])
    assert sorted(bytes(v).decode() for v in table.column("value").to_pylist()) == sorted(f"v{i}" for i in range(50))
    assert sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True)) == [
        (p, o) for p in (0, 1) for o in range(25)
    ]
    with KafkaClient(address, security=security, timeout_s=20) as client:
        assert client.fetch_committed("secure-loader", tps) == {tp: 25 for tp in tps}

    audit = ["audit", "--bootstrap-server", address, "--audit-topic", "_audit-secure", "--output", str(out)]
    ok = _rill_pipeline(*audit, "--command-config", str(props))
    assert (ok.returncode, ok.stdout.strip().splitlines()[-1:]) == (0, ["audit: all windows match"]), ok.stderr
    # without the file the audit's client cannot talk to the SASL_SSL listener
    plain = _rill_pipeline(*audit)
    assert plain.returncode == 1 and "connection closed by broker" in plain.stderr, plain.stderr

    # the feed's stream source and sink: records every 7 s over 343 s, a 1-minute watermark: the five minutes
    # the watermark passed (the first 40 records) are counted into the target topic
    feed = _rill_pipeline("feed", *secured, "--master", "local[1]", "--source", "pipeline-in", "--target",
                          "pipeline-per-minute", "--checkpoint", str(tmp_path / "ckpt"), "--available-now")  # fmt: skip
    assert feed.returncode == 0, feed.stderr[-3000:]
    with KafkaClient(address, security=security, timeout_s=20) as client:
        windows = [json.loads(v) for v in _values(client, TopicPartition("pipeline-per-minute", 0))]
    assert len(windows) == 5 and sum(w["count"] for w in windows) == 40, windows


def _values(client: KafkaClient, tp: TopicPartition) -> list[bytes]:
    end = client.latest_offsets([tp])[tp]
    pos, out = client.earliest_offsets([tp])[tp], []
    while pos < end:
        records = [r for r in decode_records_in(client.fetch({tp: pos})[tp].records) if r.offset >= pos]
        out += [r.value for r in records if r.value is not None and r.offset < end]
        pos = records[-1].offset + 1 if records else end
    return out


def _rill_pipeline(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rill", "pipeline", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **worker_env()},
    )
