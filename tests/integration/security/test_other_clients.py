"""kafka-python, aiokafka and kcat authenticate too: SCRAM over TLS, PLAIN, SASL_SSL; a wrong password fails."""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import pytest
from tests.integration.security._clients import add_scram_user
from tests.integration.security.conftest import Pki

import rill.testing

pytestmark = pytest.mark.timeout(120)


def _kafka_python_round_trip(address: str, topic: str, **security: object) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=address, **security)
    for i in range(10):
        producer.send(topic, f"{topic}-{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=address, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000, **security)  # fmt: skip
    try:
        return [m.value for m in consumer]
    finally:
        consumer.close()


def test_kafka_python_scram_over_tls_and_plain(secure_broker: rill.testing.TestBroker, pki: Pki) -> None:
    add_scram_user(secure_broker.bootstrap_servers, "dave", "dave-secret", "SCRAM-SHA-256")
    scram = _kafka_python_round_trip(
        secure_broker.listener_address("SASL_SSL"), "kp-scram", security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="dave", sasl_plain_password="dave-secret",
        ssl_cafile=str(pki.ca),
    )  # fmt: skip
    assert len(scram) == 10
    plain = _kafka_python_round_trip(
        secure_broker.listener_address("SASL_PLAINTEXT"), "kp-plain", security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="alice-secret",
    )  # fmt: skip
    assert len(plain) == 10


def test_kafka_python_wrong_password(secure_broker: rill.testing.TestBroker) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    producer = KafkaProducer(bootstrap_servers=secure_broker.listener_address("SASL_PLAINTEXT"),
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_plain_username="alice",
                             sasl_plain_password="wrong", api_version=(2, 6), max_block_ms=3000)  # fmt: skip
    with pytest.raises(KafkaError):  # kafka-python retries the broker, then gives up on the metadata
        producer.send("never", b"x").get(timeout=5)
    producer.close(0)
    assert secure_broker.broker.services.security.authentications["SASL_PLAINTEXT"][1] >= 1


def test_aiokafka_scram_sha_512_over_sasl_ssl(secure_broker: rill.testing.TestBroker, pki: Pki) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    add_scram_user(secure_broker.bootstrap_servers, "erin", "erin-secret", "SCRAM-SHA-512")
    address = secure_broker.listener_address("SASL_SSL")
    security = dict(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="erin",
                    sasl_plain_password="erin-secret", ssl_context=create_ssl_context(cafile=str(pki.ca)))  # fmt: skip

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=address, **security)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait("aio", f"aio-{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("aio", bootstrap_servers=address, auto_offset_reset="earliest", **security)
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for msg in consumer:
                    got.append(msg.value)
                    if len(got) == 10:
                        break
        finally:
            await consumer.stop()
        return got

    assert len(asyncio.run(run())) == 10


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_with_sasl_plain(secure_broker: rill.testing.TestBroker) -> None:
    address = secure_broker.listener_address("SASL_PLAINTEXT")
    sasl = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice"]
    good = [*sasl, "-X", "sasl.password=alice-secret"]
    subprocess.run(["kcat", "-b", address, *good, "-P", "-t", "kcat"], input=b"one\ntwo\nthree\n", check=True,
                   timeout=30)  # fmt: skip
    out = subprocess.run(["kcat", "-b", address, *good, "-C", "-t", "kcat", "-o", "beginning", "-e", "-q"],
                         capture_output=True, check=True, timeout=30)  # fmt: skip
    assert out.stdout.split() == [b"one", b"two", b"three"]
    bad = subprocess.run(["kcat", "-b", address, *sasl, "-X", "sasl.password=wrong", "-L", "-m", "5"],
                         capture_output=True, timeout=30)  # fmt: skip
    assert bad.returncode != 0
    assert b"Invalid username or password" in bad.stderr
