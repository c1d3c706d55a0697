"""Helpers of the security tests: client settings per listener and a produce/consume round trip."""

from __future__ import annotations

import time
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}


def librdkafka_conf(address: str, protocol: str, mechanism: str | None = None, user: str = "", password: str = "",
                    ca: str | None = None) -> dict[str, Any]:  # fmt: skip
    conf: dict[str, Any] = {"bootstrap.servers": address, "security.protocol": protocol}
    if mechanism:
        conf.update({"sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password})
    if ca:
        conf["ssl.ca.location"] = ca
    return conf


def add_scram_user(bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    info = ScramCredentialInfo(MECHANISMS[mechanism], 4096)
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, info, password.encode())])
    futures[user].result(timeout=15)


def round_trip(conf: dict[str, Any], topic: str, n: int = 20, timeout: float = 30.0) -> list[bytes]:
    """Produce ``n`` records to ``topic`` and read them back with a consumer group; the values read."""
    producer = confluent_kafka.Producer(conf)
    for i in range(n):
        producer.produce(topic, f"{topic}-{i}".encode())
    assert producer.flush(timeout) == 0
    consumer = confluent_kafka.Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def auth_error(conf: dict[str, Any], timeout: float = 10.0) -> str:
    """The error librdkafka reports when it cannot authenticate (a producer's error callback)."""
    errors: list[str] = []
    producer = confluent_kafka.Producer({**conf, "error_cb": lambda e: errors.append(str(e))})
    deadline = time.monotonic() + timeout
    producer.produce("never", b"x")
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    producer.flush(1)
    return errors[0] if errors else ""
