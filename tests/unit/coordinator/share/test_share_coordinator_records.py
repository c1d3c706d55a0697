"""The share coordinator's records in ``__share_group_state`` (ShareSnapshot, ShareUpdate) and its replay: the
layouts round-trip; laying state batches over others matches an offset-by-offset model; a shard rebuilt from the
records it wrote holds the state it held; epochs fence stale writers; a load skips what it cannot read."""

from __future__ import annotations

import asyncio
import itertools
import tempfile
import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rill.common import TopicPartition
from rill.coordinator.share.share_coordinator import replay_log
from rill.coordinator.share.share_coordinator_shard import (
    SNAPSHOT_KEY_VERSION,
    UPDATE_KEY_VERSION,
    CorruptShareRecord,
    PersistedBatch,
    ShareCoordinatorShard,
    ShareGroupOffset,
    SharePartitionKey,
    ShareRecord,
    WriteRequest,
    combine_batches,
    decode_record,
    encode_key,
    encode_snapshot,
    encode_update,
)
from rill.errors import ErrorCode
from rill.log.log import Log
from rill.log.log_config import LogConfig
from rill.records.builder import build_batch
from rill.records.record import Record

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TID = uuid.UUID("0123456789abcdef0123456789abcdef")

keys = st.builds(SharePartitionKey, st.text(max_size=10), st.uuids(), st.integers(0, 2**31 - 1))
batch = st.builds(
    lambda first, length, state, count: PersistedBatch(first, first + length, state, count),
    st.integers(0, 60), st.integers(0, 8), st.sampled_from([0, 2, 4]), st.integers(0, 6),
)
states = st.builds(ShareGroupOffset, st.integers(0, 100), st.integers(0, 100), st.integers(-1, 100),
                   st.integers(-1, 2**40), st.lists(batch, max_size=6).map(tuple))  # fmt: skip


@SETTINGS
@given(keys, states, st.sampled_from([SNAPSHOT_KEY_VERSION, UPDATE_KEY_VERSION]))
def test_records_round_trip(key: SharePartitionKey, state: ShareGroupOffset, version: int) -> None:
    value = encode_snapshot(state, 5) if version == SNAPSHOT_KEY_VERSION else encode_update(state)
    decoded = decode_record(encode_key(version, key), value)
    assert decoded is not None and decoded.key == key and decoded.key_version == version
    want = state if version == SNAPSHOT_KEY_VERSION else ShareGroupOffset(state.snapshot_epoch, 0, state.leader_epoch,
                                                                          state.start_offset, state.batches)
    assert decoded.value == want
    tombstone = decode_record(encode_key(version, key), None)
    assert tombstone is not None and tombstone.value is None


def test_the_key_layout_is_kafkas() -> None:
    """int16 key version (0 snapshot, 1 update), then the group id as an int16-length string, the topic id's
    16 bytes and the int32 partition."""
    key = SharePartitionKey("g", TID, 3)
    assert encode_key(SNAPSHOT_KEY_VERSION, key) == b"\x00\x00" + b"\x00\x01g" + TID.bytes + b"\x00\x00\x00\x03"
    assert encode_key(UPDATE_KEY_VERSION, key)[:2] == b"\x00\x01"
    assert key.coordinator_key() == "g:ASNFZ4mrze8BI0VniavN7w:3"


def _model(layers: list[list[PersistedBatch]], start: int) -> dict[int, tuple[int, int]]:
    offsets: dict[int, tuple[int, int]] = {}
    for layer in layers:
        for b in layer:
            for o in range(b.first_offset, b.last_offset + 1):
                offsets[o] = (b.delivery_state, b.delivery_count)
    return {o: v for o, v in offsets.items() if o >= start}


def _expand(batches: tuple[PersistedBatch, ...]) -> dict[int, tuple[int, int]]:
    return {o: (b.delivery_state, b.delivery_count) for b in batches for o in range(b.first_offset, b.last_offset + 1)}


@SETTINGS
@given(st.lists(batch, max_size=6), st.lists(batch, max_size=6), st.integers(0, 40))
def test_combining_lays_later_batches_over_earlier_ones(old: list[PersistedBatch], new: list[PersistedBatch],
                                                        start: int) -> None:  # fmt: skip
    out = combine_batches(old, new, start)
    assert _expand(out) == _model([old, new], start)
    for a, b in itertools.pairwise(out):  # sorted, apart, and neighbours of one kind joined
        assert a.last_offset < b.first_offset
        assert not (a.last_offset + 1 == b.first_offset and (a.delivery_state, a.delivery_count)
                    == (b.delivery_state, b.delivery_count))  # fmt: skip


writes = st.builds(
    lambda start, batches, leader: WriteRequest(0, leader, start, tuple(batches)),
    st.integers(0, 30), st.lists(batch, max_size=4), st.integers(0, 3),
)


@SETTINGS
@given(st.lists(writes, min_size=1, max_size=12), st.integers(0, 3))
def test_a_shard_replayed_from_its_records_holds_the_state_it_wrote(ws: list[WriteRequest], per_snapshot: int) -> None:
    live = ShareCoordinatorShard(per_snapshot)
    key = SharePartitionKey("g", TID, 0)
    records: list[ShareRecord] = []
    layers: list[list[PersistedBatch]] = []
    start = 0
    for w in sorted(ws, key=lambda w: w.leader_epoch):  # epochs only go up: none of these is fenced
        w = WriteRequest(w.state_epoch, w.leader_epoch, max(start, w.start_offset), w.batches)  # nor does the SPSO
        assert live.write_error(key, w.leader_epoch, w.state_epoch) == ErrorCode.NO_ERROR
        version, value = live.plan_write(key, w)
        raw = (encode_key(version, key), encode_snapshot(value) if version == SNAPSHOT_KEY_VERSION
               else encode_update(value))  # fmt: skip
        decoded = decode_record(*raw)
        assert decoded is not None
        live.replay(decoded)
        records.append(decoded)
        layers.append(list(w.batches))
        start = w.start_offset
    # every (per_snapshot + 1)th record of the key is a snapshot, the first one always
    kinds = [r.key_version for r in records]
    assert kinds == [SNAPSHOT_KEY_VERSION if i % (per_snapshot + 1) == 0 else UPDATE_KEY_VERSION
                     for i in range(len(kinds))]  # fmt: skip
    state = live.states[key]
    assert state.start_offset == start
    assert _expand(state.batches) == _model(layers, start)
    rebuilt = ShareCoordinatorShard(per_snapshot)
    for r in records:
        rebuilt.replay(r)
    assert rebuilt.states == live.states and rebuilt.leader_epochs == live.leader_epochs


def test_epochs_fence_stale_writers() -> None:
    shard = ShareCoordinatorShard()
    key = SharePartitionKey("g", TID, 0)
    w = WriteRequest(0, 5, 10, (PersistedBatch(10, 12, 2, 1),))
    version, value = shard.plan_write(key, w)
    shard.replay(ShareRecord(version, key, value))
    assert shard.write_error(key, 4, 0) == ErrorCode.FENCED_LEADER_EPOCH
    assert shard.write_error(key, 5, 0) == ErrorCode.NO_ERROR
    # a new leader reads at epoch 6: the old one's next write is fenced, and so is a read at an older epoch
    assert shard.read(key, 6) == (ErrorCode.NO_ERROR, shard.states[key])
    assert shard.write_error(key, 5, 0) == ErrorCode.FENCED_LEADER_EPOCH
    assert shard.read(key, 5) == (ErrorCode.FENCED_LEADER_EPOCH, None)
    assert shard.read(key, -1)[0] == ErrorCode.NO_ERROR  # an admin's read (the summary) checks no epoch
    # initializing at a new state epoch fences writers of the older state
    shard.replay(ShareRecord(SNAPSHOT_KEY_VERSION, key, shard.plan_initialize(key, 1, 20)))
    assert shard.states[key].start_offset == 20 and shard.states[key].batches == ()
    assert shard.write_error(key, 6, 0) == ErrorCode.FENCED_STATE_EPOCH
    assert shard.write_error(key, 6, 1) == ErrorCode.NO_ERROR
    # a tombstone deletes the share partition's state and its epochs
    shard.replay(ShareRecord(SNAPSHOT_KEY_VERSION, key, None))
    assert key not in shard.states and shard.read(key, 0) == (ErrorCode.NO_ERROR, None)
    assert shard.write_error(key, 0, 0) == ErrorCode.NO_ERROR


def test_values_no_coordinator_writes_are_corrupt() -> None:
    key = encode_key(SNAPSHOT_KEY_VERSION, SharePartitionKey("g", TID, 0))
    bad_state = encode_snapshot(ShareGroupOffset(0, 0, 0, 0, (PersistedBatch(5, 3, 0, 1),)))
    for k, v in [(key, bad_state), (key, b"\x00"), (b"\x00", b"v"), (key[:-2], None),
                 (key, encode_snapshot(ShareGroupOffset(0, 0, 0, 0, (PersistedBatch(1, 2, 1, 1),))))]:  # fmt: skip
        try:
            decode_record(k, v)
        except CorruptShareRecord:
            continue
        raise AssertionError(f"{k!r} {v!r} was read")
    assert decode_record(b"\x00\x07rest", b"v") is None  # a key version of a later layout: left alone


# -- loading a partition of __share_group_state --------------------------------------------------------------

VALID = SharePartitionKey("valid-group", TID, 7)
VALID_STATE = ShareGroupOffset(0, 2, 3, 100, (PersistedBatch(100, 104, 2, 1), PersistedBatch(105, 109, 0, 2)))
VALID_RECORD = (encode_key(SNAPSHOT_KEY_VERSION, VALID), encode_snapshot(VALID_STATE, 1))


@st.composite
def junk(draw: st.DrawFn) -> tuple[bytes | None, bytes | None]:
    """A record no share coordinator would write: random bytes, or a real one cut short or with any key."""
    kind = draw(st.sampled_from(["random", "cut", "keyless"]))
    if kind == "random":
        return draw(st.binary(max_size=40)), draw(st.one_of(st.none(), st.binary(max_size=40)))
    if kind == "keyless":
        return None, draw(st.binary(max_size=20))
    k = encode_key(draw(st.sampled_from([0, 1])), draw(keys.filter(lambda k: k.group_id != VALID.group_id)))
    v = encode_snapshot(ShareGroupOffset(0, 0, 0, 0, (PersistedBatch(0, 1, 0, 1),)))
    return k[: draw(st.integers(0, len(k)))], v[: draw(st.integers(0, len(v) - 1))]


def _load(records: list[tuple[bytes | None, bytes | None]], per_batch: int) -> ShareCoordinatorShard:
    shard = ShareCoordinatorShard()
    with tempfile.TemporaryDirectory() as d:
        plog = Log(Path(d) / "__share_group_state-0", LogConfig())
        try:
            for i in range(0, len(records), per_batch):
                chunk = records[i : i + per_batch]
                plog.append(bytearray(build_batch([Record(j, 1, k, v) for j, (k, v) in enumerate(chunk)])),
                            leader_epoch=0)  # fmt: skip
            asyncio.run(replay_log(TopicPartition("__share_group_state", 0), plog, shard))
        finally:
            plog.close()
    return shard


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(junk(), max_size=12), st.lists(junk(), max_size=12), st.integers(1, 4))
def test_loading_skips_records_it_cannot_read(before: list[tuple[bytes | None, bytes | None]],
                                              after: list[tuple[bytes | None, bytes | None]],
                                              per_batch: int) -> None:  # fmt: skip
    shard = _load([*before, VALID_RECORD, *after], per_batch)
    assert shard.states[VALID] == VALID_STATE
    assert shard.leader_epochs[VALID] == 3 and shard.state_epochs[VALID] == 2


def test_junk_is_counted() -> None:
    shard = _load([(b"\x00", b"v"), VALID_RECORD, (None, b"x"), (VALID_RECORD[0], b"\x00\x00\x01")], 1)
    assert shard.states[VALID] == VALID_STATE
    assert shard.skipped == 3


def test_a_state_read_is_clipped_to_what_a_leader_can_have_in_flight() -> None:
    """A state batch beyond the log end or the in-flight limit (no leader wrote it) costs no more than a real
    one: the share partition restored from it holds at most ``max_in_flight`` offsets."""
    from rill.coordinator.share.share_partition import RecordState, SharePartition, StateBatch
    from rill.coordinator.share.share_partition_manager import _clipped

    huge = [StateBatch(0, 2**62, RecordState.ACKNOWLEDGED, 1),
            StateBatch(2**62 + 1, 2**63 - 1, RecordState.AVAILABLE, 1)]
    clipped = _clipped(huge, 10, 1_000_000, 2000)
    assert clipped == [StateBatch(10, 2009, RecordState.ACKNOWLEDGED, 1)]
    sp = SharePartition(0, max_in_flight=2000)
    sp.restore(10, clipped)
    assert sp.start_offset == 2010 and sp.end_offset == 2010  # all acknowledged: the SPSO moved past them
    assert _clipped([StateBatch(5, 30, RecordState.AVAILABLE, 2)], 10, 20, 2000) == [
        StateBatch(10, 19, RecordState.AVAILABLE, 2)]
