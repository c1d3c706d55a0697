"""A broker under a low open-files limit (hard and soft, as ``prlimit`` sets them): it holds thousands of
partitions, one descriptor each, produces to all of them, and refuses up front what it cannot hold."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rill.testing import TestBroker

LIMIT = 2400
PARTITIONS = 1500

pytestmark = pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs util-linux prlimit")


def _create(admin: AdminClient, name: str, partitions: int) -> KafkaException | None:
    (future,) = admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=120).values()
    try:
        future.result(timeout=180)
    except KafkaException as e:
        return e
    return None


def _produce_to_all(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 50})
    failed: list[str] = []
    delivered: list[int] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            delivered.append(1)

    for p in range(PARTITIONS):
        producer.produce("wide", value=b"v%d" % p, partition=p, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(120) == 0
    assert failed == [] and len(delivered) == PARTITIONS


def _open_files(pid: int) -> int:
    return sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())


@pytest.mark.slow
def test_thousands_of_partitions_under_a_low_open_files_limit(tmp_path: Path) -> None:
    """1,500 partitions fit in 2,400 descriptors, and each takes a record (a segment used to keep five
    descriptors: its .log, two index files and their two maps; the request passed the open-files check,
    which counted three, and failed with KAFKA_STORAGE_ERROR part way). A request the limit cannot hold is
    refused before any log is made."""
    b = TestBroker({}, subprocess=True, data_dir=tmp_path, startup_timeout=120.0,
                   command_prefix=["prlimit", f"--nofile={LIMIT}:{LIMIT}", "--"])  # fmt: skip
    b.start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        assert _create(admin, "wide", PARTITIONS) is None
        _produce_to_all(b.bootstrap_servers)
        pid = b.pid
        assert pid is not None
        assert _open_files(pid) < PARTITIONS + 200  # one per partition, and the broker's own

        # Over what the limit can hold, counting what is open now: refused, and nothing made.
        refused = _create(admin, "more", LIMIT - PARTITIONS)
        assert refused is not None and "open-files limit" in str(refused)
        assert not any(p.name.startswith("more-") for p in (tmp_path / "logs").iterdir())
        assert _create(admin, "some", 100) is None
        # Started again after a clean stop (each written partition's time index then holds an entry, whose map
        # used to be made at the start), it holds them all again.
        b.stop(timeout=300)
        b.start()
        pid = b.pid
        assert pid is not None
        assert _open_files(pid) < PARTITIONS + 300
        _produce_to_all(b.bootstrap_servers)
        # And after SIGKILL: recovering a segment rebuilds its indexes, whose maps it used to keep.
        b.kill()
        b.start()
        _produce_to_all(b.bootstrap_servers)
        b.kill()
    finally:
        b.close()
