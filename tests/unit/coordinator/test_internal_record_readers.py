"""Every reader of records the broker or Rill's tools wrote takes records they did not write: random bytes, the
writers' layouts with any field values, cut short at any byte. Nothing raises; what cannot be read is skipped,
and the records around it are read as before. (Starting a broker, a registry and a mirror on such records:
tests/integration/test_internal_records_start.py.)"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.internal_records import KeyValue, offsets_records, schemas_records, sync_records, txn_records

from rill.common import TopicPartition
from rill.config import BrokerConfig
from rill.coordinator.group.group_metadata import GroupMetadata, OffsetAndMetadata
from rill.coordinator.group.group_metadata_manager import (
    GroupMetadataManager,
    group_metadata_key,
    offset_commit_key,
    offset_commit_value,
)
from rill.coordinator.transaction.transaction_log import encode_key, encode_value
from rill.coordinator.transaction.transaction_metadata import TransactionState, TxnTransitMetadata
from rill.coordinator.transaction.transaction_state_manager import TxnPartition, replay_log
from rill.log.log import Log
from rill.log.log_config import LogConfig
from rill.mirror.offset_sync import decode_sync, encode_sync
from rill.records.builder import build_batch
from rill.records.record import Record
from rill.registry.schemas import SchemaText
from rill.registry.store import RegistryState, Version, schema_record

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TS = 1_700_000_000_000


def _log_of(directory: Path, name: str, records: list[KeyValue], per_batch: int) -> Log:
    """A real log on disk holding ``records`` (the default configs: keyless records go in too)."""
    plog = Log(directory / name, LogConfig())
    for i in range(0, len(records), per_batch):
        chunk = records[i : i + per_batch]
        plog.append(bytearray(build_batch([Record(j, TS, k, v) for j, (k, v) in enumerate(chunk)])), leader_epoch=0)
    return plog


def _groups(records: list[KeyValue], per_batch: int) -> dict[str, GroupMetadata]:
    config = BrokerConfig.from_properties({"log.dirs": "/nonexistent"})
    manager = GroupMetadataManager(config, None, None)  # type: ignore[arg-type]  # only the log is read
    with tempfile.TemporaryDirectory() as d:
        plog = _log_of(Path(d), "__consumer_offsets-0", records, per_batch)
        try:
            groups: dict[str, GroupMetadata] = {}
            manager._load_partition(plog, groups)
            return groups
        finally:
            plog.close()


COMMIT = (offset_commit_key("g", TopicPartition("t", 0)), offset_commit_value(OffsetAndMetadata(42, -1, "", TS)))


@SETTINGS
@given(st.lists(offsets_records, max_size=25), st.integers(1, 5))
def test_group_loading_skips_what_it_cannot_read(records: list[KeyValue], per_batch: int) -> None:
    groups = _groups([*records, COMMIT, *records], per_batch)
    # the commit is loaded whatever comes before or after it (unless a later record of its own key or group
    # replaces it: any record can, as the coordinator's own can)
    after_keys = {k for k, _ in records}
    if COMMIT[0] not in after_keys and group_metadata_key("g") not in after_keys:
        assert groups["g"].offsets[TopicPartition("t", 0)].offset == 42


def test_the_record_of_the_issue_is_skipped() -> None:
    """Key ``b"\\x00"`` (one byte, where the key version takes two) stopped every start."""
    groups = _groups([(b"\x00", b"v"), COMMIT, (b"\x00", None), (b"", b""), (None, b"x")], 1)
    assert groups["g"].offsets[TopicPartition("t", 0)].offset == 42


def _transactions(records: list[KeyValue], per_batch: int) -> TxnPartition:
    loaded = TxnPartition(0)
    with tempfile.TemporaryDirectory() as d:
        plog = _log_of(Path(d), "__transaction_state-0", records, per_batch)
        try:
            asyncio.run(replay_log(TopicPartition("__transaction_state", 0), plog, loaded))
        finally:
            plog.close()
    return loaded


GOOD_TXN = (
    encode_key("tx-good"),
    encode_value(TxnTransitMetadata(7, -1, 3, -1, 60000, TransactionState.EMPTY, frozenset(), -1, TS)),
)


@SETTINGS
@given(st.lists(txn_records, max_size=25), st.integers(1, 5))
def test_transaction_loading_skips_what_it_cannot_read(records: list[KeyValue], per_batch: int) -> None:
    loaded = _transactions([*records, GOOD_TXN, *records], per_batch)
    if GOOD_TXN[0] not in {k for k, _ in records}:
        md = loaded.ids["tx-good"]
        assert (md.producer_id, md.producer_epoch) == (7, 3)
    for md in loaded.ids.values():  # what is loaded is what a coordinator could have written
        assert md.producer_id >= 0 and md.txn_timeout_ms > 0
        assert all(tp.topic and tp.partition >= 0 for tp in md.partitions)


def _schema(n: int) -> SchemaText:
    return SchemaText("AVRO", f'{{"type":"fixed","name":"F{n}","size":1}}')


@SETTINGS
@given(st.lists(schemas_records, max_size=25))
def test_the_registry_state_skips_what_it_cannot_read(records: list[KeyValue]) -> None:
    state = RegistryState()
    good = schema_record(Version("good", 1, 9, _schema(9), False))
    for offset, (key, value) in enumerate([*records, good]):
        state.apply(offset, key, value)
    assert state.next_offset == len(records) + 1
    assert [v.schema_id for v in state.versions("good")] == [9]
    # what the state holds is what the registry could have written
    for subject, versions in state.subjects.items():
        assert isinstance(subject, str) and versions
        for number, v in versions.items():
            assert isinstance(number, int) and number >= 1 and isinstance(v.schema_id, int)
            assert isinstance(v.schema.text, str) and isinstance(v.deleted, bool)
    assert all(isinstance(level, str) for level in state.configs.values())
    state.compatibility("good"), state.mode("good"), state.subject_names(), state.referenced_by("good", 1)


def test_a_bad_value_changes_nothing() -> None:
    """A record refused half-way left the version's old value removed; now it is checked before anything."""
    state = RegistryState()
    state.apply(0, *schema_record(Version("s", 1, 5, _schema(5), False)))
    key = schema_record(Version("s", 1, 5, _schema(5), False))[0]
    bad = [b"[1]", b'{"id": "x"}', b'{"id": 1e999, "schema": "x"}', b'{"schema": 3, "id": 1}']
    for offset, value in enumerate(bad, 1):
        state.apply(offset, key, value)
    assert [v.schema_id for v in state.versions("s")] == [5] and state.schemas[5] == _schema(5)


@SETTINGS
@given(st.lists(sync_records, max_size=40))
def test_offset_syncs_are_whole_and_never_negative(records: list[KeyValue]) -> None:
    for key, value in records:
        sync = decode_sync(key, value)
        if sync is not None:
            topic, partition, source, target = sync
            assert topic and 0 <= partition < 2**31 and 0 <= source < 2**63 and 0 <= target < 2**63
    assert decode_sync(*encode_sync("a:b", 3, 10, 12)) == ("a:b", 3, 10, 12)
    for bad in (b"-1 5", b"5 -2", b"1  2", b"1 2 3", b"\xff 1"):
        assert decode_sync(b"t:0", bad) is None
    assert decode_sync(b":0", b"1 2") is None and decode_sync(b"t:-1", b"1 2") is None
