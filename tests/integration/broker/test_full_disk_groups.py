"""A consumer group on a broker whose disk is full: the coordinator cannot store the group's assignment, and
must not let its members rejoin and fail in a tight loop (it ran about 1,300 generations a second, with log
lines for each); once space is back, the group forms and consumes."""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.broker._wire import Wire

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey

pytestmark = pytest.mark.timeout(120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sync_groups(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "kafka_network_requestmetrics_requests_total" and sample.labels["request"] == "SyncGroup":
                return float(sample.value)
    return 0.0


def _commit(wire: Wire, metadata: str) -> int:
    partition = {"partition_index": 0, "committed_offset": 1, "committed_metadata": metadata}
    topics = [{"name": "t", "partitions": [partition]}]
    resp = wire.call(ApiKey.OFFSET_COMMIT, 2, {"group_id": "filler", "member_id": "", "topics": topics})
    return int(resp["topics"][0]["partitions"][0]["error_code"])


def _fill(tmpfs: Path, bootstrap: str) -> None:
    """Fill the file system, then the last page of the offsets partition's segment: commits of shrinking
    size until none fits (each failure is cut back off the segment). FindCoordinator, before, makes
    ``__consumer_offsets``."""
    wire = Wire(bootstrap)
    try:
        assert wire.call(ApiKey.FIND_COORDINATOR, 3, {"key": "filler", "key_type": 0})["error_code"] == 0
        with open(tmpfs / "filler", "wb", buffering=0) as f, pytest.raises(OSError):
            while True:
                f.write(bytes(64 * 1024))
        for size in (3000, 1000, 300, 100, 30, 10, 0):
            for _ in range(100):
                if _commit(wire, "m" * size) != ErrorCode.NONE:
                    break
        assert _commit(wire, "") == ErrorCode.NOT_COORDINATOR  # KAFKA_STORAGE_ERROR, as Kafka maps it
        found = wire.call(ApiKey.FIND_COORDINATOR, 3, {"key": "filler", "key_type": 0})
        assert found["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE  # until the back-off has passed
        assert "__consumer_offsets cannot be written" in found["error_message"]
    finally:
        wire.close()


def test_a_full_disk_does_not_spin_the_group_and_space_back_lets_it_form(tmpfs: Path) -> None:
    metrics_port = _free_port()
    configs = {"offsets.topic.num.partitions": "1", "metrics.port": str(metrics_port)}
    with rill.testing.broker(configs, data_dir=tmpfs / "data", num_partitions=1) as b:
        bootstrap = b.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("t", 1)])["t"].result(10)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce("t", b"kept")
        assert producer.flush(10) == 0
        _fill(tmpfs, bootstrap)

        before = _sync_groups(metrics_port)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe(["t"])
            deadline = time.monotonic() + 6
            while time.monotonic() < deadline:
                assert consumer.poll(0.2) is None  # nothing is handed out while the assignment cannot be stored
            attempts = _sync_groups(metrics_port) - before
            assert 1 <= attempts <= 10, attempts  # one try per back-off, not thousands

            (tmpfs / "filler").unlink()
            deadline = time.monotonic() + 30
            msg = None
            while msg is None and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
            assert msg is not None and msg.error() is None and msg.value() == b"kept"
        finally:
            consumer.close()
