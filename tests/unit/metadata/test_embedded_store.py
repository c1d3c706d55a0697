from __future__ import annotations

from pathlib import Path

import pytest

from rill.errors import ErrorCode, KafkaError
from rill.metadata.embedded import EmbeddedMetadataStore
from rill.metadata.store import BrokerInfo, dynamic_broker_configs, topic_name_problem


def _store(path: Path, node_id: int = 1) -> EmbeddedMetadataStore:
    return EmbeddedMetadataStore(path, node_id, BrokerInfo(node_id, "127.0.0.1", 9092))


def test_topics_configs_and_producer_ids_survive_reopen(tmp_path: Path) -> None:
    s = _store(tmp_path)
    t = s.create_topic("orders", 3, 1, {"retention.ms": "1000"})
    s.create_partitions("orders", 5)
    s.set_broker_configs({"log.retention.ms": "5000"})
    s.set_default_broker_configs({"log.retention.ms": "7000", "num.io.threads": "4"})
    first = s.allocate_producer_ids(1000)
    s2 = _store(tmp_path)
    assert s2.cluster_id == s.cluster_id
    reopened = s2.topic("orders")
    assert reopened is not None
    assert reopened.topic_id == t.topic_id
    assert len(reopened.partitions) == 5
    assert reopened.configs == {"retention.ms": "1000"}
    assert s2.topic_by_id(t.topic_id) == reopened
    assert s2.broker_configs() == {"log.retention.ms": "5000"}
    assert s2.default_broker_configs() == {"log.retention.ms": "7000", "num.io.threads": "4"}
    assert dynamic_broker_configs(s2) == {"log.retention.ms": "5000", "num.io.threads": "4"}
    assert s2.allocate_producer_ids(10) == first + 1000


def test_errors_carry_kafka_codes(tmp_path: Path) -> None:
    s = _store(tmp_path)
    s.create_topic("a", 1, 1, {})
    cases = [
        (lambda: s.create_topic("a", 1, 1, {}), ErrorCode.TOPIC_ALREADY_EXISTS),
        (lambda: s.create_topic("bad/name", 1, 1, {}), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (lambda: s.create_topic("b", 0, 1, {}), ErrorCode.INVALID_PARTITIONS),
        (lambda: s.create_topic("b", 1, 2, {}), ErrorCode.INVALID_REPLICATION_FACTOR),
        (lambda: s.create_partitions("a", 1), ErrorCode.INVALID_PARTITIONS),
        (lambda: s.delete_topic("missing"), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (lambda: s.create_topic("c", -1, -1, {}, {0: [7]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ]
    for call, code in cases:
        with pytest.raises(KafkaError) as ei:
            call()
        assert ei.value.code == code


def test_node_id_mismatch_is_refused(tmp_path: Path) -> None:
    _store(tmp_path, node_id=1)
    with pytest.raises(KafkaError):
        _store(tmp_path, node_id=2)


def test_listeners_hear_changes(tmp_path: Path) -> None:
    s = _store(tmp_path)
    calls: list[int] = []
    s.add_listener(lambda: calls.append(1))
    s.create_topic("x", 1, 1, {})
    s.set_topic_configs("x", {"segment.bytes": "1048576"})
    s.delete_topic("x")
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("name", "ok"),
    [("a", True), ("a.b-c_d", True), ("", False), (".", False), ("..", False), ("x" * 249, True),
     ("x" * 250, False), ("with space", False), ("ümlaut", False)],
)
def test_topic_names(name: str, ok: bool) -> None:
    assert (topic_name_problem(name) is None) == ok


def test_a_change_that_cannot_be_written_is_undone(tmpfs: Path) -> None:
    """On a full disk the metadata snapshot cannot be written: the change is refused with KAFKA_STORAGE_ERROR
    and undone, so that what the broker answers and what it finds after a restart agree."""
    s = _store(tmpfs)
    s.create_topic("kept", 1, 1, {})
    filler = tmpfs / "filler"
    with open(filler, "wb", buffering=0) as f, pytest.raises(OSError):
        while True:
            f.write(bytes(64 * 1024))
    for change in (
        lambda: s.create_topic("lost", 1, 1, {"retention.ms": "1" * 200_000}),
        lambda: s.delete_topic("kept"),
        lambda: s.allocate_producer_ids(1000),
    ):
        with pytest.raises(KafkaError) as e:
            change()
        assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert set(s.topics()) == {"kept"} and s.topic_by_id(s.topics()["kept"].topic_id) is not None
    filler.unlink()
    first = s.allocate_producer_ids(10)
    s.create_topic("later", 1, 1, {})
    reopened = _store(tmpfs)
    assert set(reopened.topics()) == {"kept", "later"}
    assert reopened.allocate_producer_ids(1) == first + 10
