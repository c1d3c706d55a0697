"""The files a broker reads at start, broken: a checkpoint, a partition's metadata, leader epochs, a producer
snapshot or an index that cannot be read falls back (recovery from the segments, as Kafka does) and the broker
starts with every record; a change of the metadata journal that cannot be applied is logged and skipped; a
metadata snapshot that cannot be read (it is the whole state) stops the start with one message naming it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import rill.testing
from rill.testing import BrokerStartError

pytestmark = pytest.mark.timeout(180)

RECORDS = 20


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stopped broker's data dir: topic ``t`` (compacted: the cleaner's checkpoint too) with idempotent records
    (a producer snapshot), and a group's committed offset."""
    data = tmp_path_factory.mktemp("template")
    with rill.testing.broker(data_dir=data) as b:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.create_topics([NewTopic("t", 1, config={"cleanup.policy": "compact"})])["t"].result(15)
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "enable.idempotence": True})
        for i in range(RECORDS):
            p.produce("t", b"v%d" % i, b"k%d" % i)
        assert p.flush(15) == 0
    return data


def _values(bootstrap: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("t", 0, 0)])
        got: list[bytes] = []
        for _ in range(100):
            for msg in c.consume(100, 0.2):
                if not msg.error():
                    got.append(msg.value())
            if len(got) >= RECORDS:
                break
        return got
    finally:
        c.close()


def _journal_line(logs: Path, change: dict[str, object]) -> bytes:
    lines = (logs / "rill-metadata.log").read_bytes().splitlines()
    last = json.loads(lines[-1])["offset"]
    return json.dumps({**change, "offset": change.get("offset", last + 1)}).encode() + b"\n"


def _overwrite(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda logs: (logs / name).write_bytes(data)


def _append_journal(change: dict[str, object]) -> Callable[[Path], None]:
    def apply(logs: Path) -> None:
        with open(logs / "rill-metadata.log", "ab") as f:
            f.write(_journal_line(logs, change))

    return apply


RECOVERED: dict[str, Callable[[Path], None]] = {
    "recovery-point-offset-checkpoint": _overwrite("recovery-point-offset-checkpoint", b"0\n1\nt 0 x\n"),
    "replication-offset-checkpoint": _overwrite("replication-offset-checkpoint", b"\xff\xfe garbage"),
    "log-start-offset-checkpoint": _overwrite("log-start-offset-checkpoint", b"0\n5\n"),
    "cleaner-offset-checkpoint": _overwrite("cleaner-offset-checkpoint", b"7\n"),
    "partition.metadata": _overwrite("t-0/partition.metadata", b"version: 0\ntopic_id: !!\n"),
    "leader-epoch-checkpoint": _overwrite("t-0/leader-epoch-checkpoint", b"0\n3\n5 10\n2 3\n-1 0\n"),
    "producer snapshot": lambda logs: next((logs / "t-0").glob("*.snapshot")).write_bytes(b"\x00\x01garbage"),
    "offset index": _overwrite("t-0/00000000000000000000.index", b"\x00" * 7),
    "time index": _overwrite("t-0/00000000000000000000.timeindex", b"\xff" * 25),
    "transaction index": _overwrite("t-0/00000000000000000000.txnindex", b"\x01" * 30),
    "journal: a change of the wrong shape": _append_journal({"type": "topic", "name": "x"}),
    "journal: an offset that is not a number": _append_journal({"type": "topic", "offset": "next"}),
    "journal: a change of an unknown type": _append_journal({"type": "something-newer"}),
}


def _copy(template: Path, tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(template, data)
    return data


@pytest.mark.parametrize("broken", list(RECOVERED))
def test_the_broker_starts_with_every_record(template: Path, tmp_path: Path, broken: str) -> None:
    data = _copy(template, tmp_path)
    RECOVERED[broken](data / "logs")
    with rill.testing.broker(data_dir=data) as b:
        assert _values(b.bootstrap_servers) == [b"v%d" % i for i in range(RECORDS)]
        p = Producer({"bootstrap.servers": b.bootstrap_servers})
        p.produce("t", b"more", b"k-more")
        assert p.flush(15) == 0


@pytest.mark.parametrize("content", [b"", b"\xff\x00 not text", b"{not json", b"[1, 2]", b'{"topics": 7}'])
def test_an_unreadable_metadata_snapshot_stops_the_start_naming_it(
    template: Path, tmp_path: Path, content: bytes
) -> None:
    data = _copy(template, tmp_path)
    (data / "logs" / "rill-metadata.json").write_bytes(content)
    with pytest.raises(BrokerStartError) as e, rill.testing.broker(data_dir=data):
        pass
    assert f"{data / 'logs' / 'rill-metadata.json'} is corrupt" in str(e.value), str(e.value)
