from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from rill.errors import ErrorCode, KafkaError
from rill.metadata.embedded import EmbeddedMetadataStore
from rill.metadata.journal import JOURNAL_FILE, SNAPSHOT_FILE
from rill.metadata.store import BrokerInfo, MetadataDelta, dynamic_broker_configs, topic_name_problem


def _store(path: Path, node_id: int = 1) -> EmbeddedMetadataStore:
    return EmbeddedMetadataStore(path, node_id, BrokerInfo(node_id, "127.0.0.1", 9092))


def run(coro: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await coro

    return asyncio.run(main())


def test_topics_configs_and_producer_ids_survive_reopen(tmp_path: Path) -> None:
    async def scenario() -> None:
        s = _store(tmp_path)
        t = await s.create_topic("orders", 3, 1, {"retention.ms": "1000"})
        await s.create_partitions("orders", 5)
        await s.set_broker_configs({"log.retention.ms": "5000"})
        await s.set_default_broker_configs({"log.retention.ms": "7000", "num.io.threads": "4"})
        first = await s.allocate_producer_ids(1000)
        await s.close()
        s2 = _store(tmp_path)
        assert s2.cluster_id == s.cluster_id
        assert s2.offset == s.offset == 5
        reopened = s2.topic("orders")
        assert reopened is not None
        assert reopened.topic_id == t.topic_id
        assert len(reopened.partitions) == 5
        assert reopened.configs == {"retention.ms": "1000"}
        assert s2.topic_by_id(t.topic_id) == reopened
        assert s2.broker_configs() == {"log.retention.ms": "5000"}
        assert s2.default_broker_configs() == {"log.retention.ms": "7000", "num.io.threads": "4"}
        assert dynamic_broker_configs(s2) == {"log.retention.ms": "5000", "num.io.threads": "4"}
        assert await s2.allocate_producer_ids(10) == first + 1000

    run(scenario())


def test_errors_carry_kafka_codes_and_change_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        s = _store(tmp_path)
        await s.create_topic("a", 1, 1, {})
        cases: list[tuple[Callable[[], Awaitable[Any]], ErrorCode]] = [
            (lambda: s.create_topic("a", 1, 1, {}), ErrorCode.TOPIC_ALREADY_EXISTS),
            (lambda: s.create_topic("bad/name", 1, 1, {}), ErrorCode.INVALID_TOPIC_EXCEPTION),
            (lambda: s.create_topic("b", 0, 1, {}), ErrorCode.INVALID_PARTITIONS),
            (lambda: s.create_topic("b", 1, 2, {}), ErrorCode.INVALID_REPLICATION_FACTOR),
            (lambda: s.create_topic("b", 1, 1, {"retention.ms": "x"}), ErrorCode.INVALID_CONFIG),
            (lambda: s.create_partitions("a", 1), ErrorCode.INVALID_PARTITIONS),
            (lambda: s.delete_topic("missing"), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            (lambda: s.create_topic("c", -1, -1, {}, {0: [7]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
            (lambda: s.set_topic_configs("a", {"segment.bytes": "1"}), ErrorCode.INVALID_CONFIG),
        ]
        journal = (tmp_path / JOURNAL_FILE).read_bytes()
        for call, code in cases:
            with pytest.raises(KafkaError) as ei:
                await call()
            assert ei.value.code == code
        assert set(s.topics()) == {"a"} and s.offset == 1
        assert (tmp_path / JOURNAL_FILE).read_bytes() == journal

    run(scenario())


def test_node_id_mismatch_is_refused(tmp_path: Path) -> None:
    _store(tmp_path, node_id=1)
    with pytest.raises(KafkaError):
        _store(tmp_path, node_id=2)


def test_listeners_hear_each_change_as_a_delta(tmp_path: Path) -> None:
    async def scenario() -> list[MetadataDelta]:
        s = _store(tmp_path)
        deltas: list[MetadataDelta] = []

        async def listener(delta: MetadataDelta) -> None:
            deltas.append(delta)

        s.add_listener(listener)
        await s.create_topic("x", 1, 1, {})
        await s.set_topic_configs("x", {"segment.bytes": "1048576"})
        await s.set_broker_configs({"log.retention.ms": "5000"})
        await s.delete_topic("x")
        return deltas

    deltas = run(scenario())
    assert [d.offset for d in deltas] == [1, 2, 3, 4]
    assert [t.name for t in deltas[0].changed] == ["x"] and not deltas[0].deleted
    assert deltas[1].changed[0].configs == {"segment.bytes": "1048576"}
    assert deltas[2].broker_configs and not deltas[2].changed
    assert [t.name for t in deltas[3].deleted] == ["x"]


def test_a_change_a_listener_cannot_follow_is_taken_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        s = _store(tmp_path)

        async def listener(delta: MetadataDelta) -> None:
            if any(t.name == "doomed" for t in delta.changed):
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "no space")

        s.add_listener(listener)
        with pytest.raises(KafkaError):
            await s.create_topic("doomed", 1, 1, {})
        assert s.topic("doomed") is None
        await s.close()
        assert _store(tmp_path).topic("doomed") is None

    run(scenario())


@pytest.mark.parametrize(
    ("name", "ok"),
    [("a", True), ("a.b-c_d", True), ("", False), (".", False), ("..", False), ("x" * 249, True),
     ("x" * 250, False), ("with space", False), ("ümlaut", False)],
)  # fmt: skip
def test_topic_names(name: str, ok: bool) -> None:
    assert (topic_name_problem(name) is None) == ok


def test_a_change_that_cannot_be_written_is_undone(tmpfs: Path) -> None:
    """On a full disk the journal cannot take the change: it is refused with KAFKA_STORAGE_ERROR and nothing of
    it stays, so that what the broker answers and what it finds after a restart agree."""

    async def scenario() -> None:
        s = _store(tmpfs)
        await s.create_topic("kept", 1, 1, {})
        filler = tmpfs / "filler"
        with open(filler, "wb", buffering=0) as f, pytest.raises(OSError):
            while True:
                f.write(bytes(64 * 1024))
        journal = (tmpfs / JOURNAL_FILE).read_bytes()
        with pytest.raises(KafkaError) as e:  # a journal line larger than any space left
            await s.create_topic("lost", 20_000, 1, {})
        assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
        assert (tmpfs / JOURNAL_FILE).read_bytes() == journal  # cut back: nothing of the change remains
        assert set(s.topics()) == {"kept"} and s.topic_by_id(s.topics()["kept"].topic_id) is not None
        filler.unlink()
        first = await s.allocate_producer_ids(10)
        await s.create_topic("later", 1, 1, {})
        await s.close()
        reopened = _store(tmpfs)
        assert set(reopened.topics()) == {"kept", "later"}
        assert await reopened.allocate_producer_ids(1) == first + 10

    run(scenario())


def test_a_torn_last_change_is_dropped_and_a_bad_line_skipped(tmp_path: Path) -> None:
    async def scenario() -> None:
        s = _store(tmp_path)
        await s.create_topic("a", 1, 1, {})
        await s.create_topic("b", 1, 1, {})
        await s.close()

    run(scenario())
    journal = tmp_path / JOURNAL_FILE
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"garbage\n" + lines[0] + lines[1] + lines[1][:20])
    s = _store(tmp_path)
    assert set(s.topics()) == {"a", "b"}
    assert journal.read_bytes().endswith(lines[1])  # the torn tail is cut off, so the next change starts whole


def test_a_stored_config_that_no_longer_validates_is_set_aside(tmp_path: Path) -> None:
    """Nothing the broker wrote itself may stop it from starting: a stored value this version refuses is
    logged and set aside."""

    async def scenario() -> None:
        s = _store(tmp_path)
        await s.create_topic("t", 1, 1, {"retention.ms": "1000"})
        await s.close()

    run(scenario())
    journal = tmp_path / JOURNAL_FILE
    record = json.loads(journal.read_bytes())
    record["topic"]["configs"] = {"retention.ms": "1000", "segment.bytes": "1", "no.such.config": "x"}
    journal.write_text(json.dumps(record) + "\n")
    topic = _store(tmp_path).topic("t")
    assert topic is not None and topic.configs == {"retention.ms": "1000"}


def test_changes_cost_in_proportion_to_the_change(tmp_path: Path) -> None:
    """A change appends one journal line, whatever the size of the state; the snapshot is rewritten only once
    the journal outgrows it, and replaying snapshot plus journal gives the same state."""

    async def scenario() -> float:
        s = _store(tmp_path)
        for i in range(300):
            await s.create_topic(f"t{i}", 1, 1, {})
        start = time.perf_counter()
        await s.create_topic("last", 1, 1, {})
        elapsed = time.perf_counter() - start
        await s.close()
        return elapsed

    elapsed = run(scenario())
    assert elapsed < 0.1
    assert len((tmp_path / JOURNAL_FILE).read_bytes().splitlines()) == 301
    assert not (tmp_path / SNAPSHOT_FILE).exists()
    assert len(_store(tmp_path).topics()) == 301


def test_the_snapshot_takes_over_a_long_journal(tmp_path: Path) -> None:
    async def scenario() -> None:
        s = _store(tmp_path)
        s._journal._compact_after = 50
        for i in range(120):
            await s.create_topic(f"t{i}", 1, 1, {})
        await s.close()

    run(scenario())
    snapshot = json.loads((tmp_path / SNAPSHOT_FILE).read_bytes())
    assert snapshot["offset"] >= 50
    remaining = (tmp_path / JOURNAL_FILE).read_bytes().splitlines()
    assert len(remaining) == 120 - snapshot["offset"]
    reopened = _store(tmp_path)
    assert len(reopened.topics()) == 120 and reopened.offset == 120


def test_an_old_snapshot_without_a_journal_loads(tmp_path: Path) -> None:
    """A data directory written before the journal existed (a whole snapshot, no offset) still loads."""
    (tmp_path / SNAPSHOT_FILE).write_text(json.dumps({
        "topics": {"old": {"id": "6f1c0a51-8cf5-4d8e-9d7a-4a1fb3c3a7a2", "partitions": [[1, 0, [1], [1]]],
                           "configs": {}}},
        "broker_configs": {}, "next_producer_id": 3000,
    }))  # fmt: skip
    s = _store(tmp_path)
    assert set(s.topics()) == {"old"} and s.offset == 0
    assert run(s.allocate_producer_ids(1)) == 3000
