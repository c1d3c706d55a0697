"""The ``__consumer_offsets`` record formats and the group -> partition mapping."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rill.common import TopicPartition
from rill.coordinator.group.group_metadata import GroupMetadata, GroupState, MemberMetadata, OffsetAndMetadata
from rill.coordinator.group.group_metadata_manager import (
    GroupKey,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    group_metadata_key,
    group_metadata_value,
    java_string_hash,
    offset_commit_key,
    offset_commit_value,
    partition_for,
)

names = st.text(min_size=1, max_size=40)


def test_java_string_hash_matches_java() -> None:
    # Values of String.hashCode() in Java.
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("\U0001f600") == 1772899  # a surrogate pair hashes as two UTF-16 units


def test_partition_for_is_kafkas() -> None:
    assert partition_for("polygenelubricants", 50) == 0  # abs(Integer.MIN_VALUE) is 0 in Kafka's Utils.abs
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("my-group", 50) == abs(java_string_hash("my-group")) % 50


def test_offset_key_bytes_are_kafkas() -> None:
    key = offset_commit_key("g", TopicPartition("t", 3))
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    assert group_metadata_key("g") == b"\x00\x02\x00\x01g"


@given(names, names, st.integers(0, 2**31 - 1), st.integers(0, 2**62), st.integers(-1, 2**31 - 1), st.text(max_size=50))
def test_offset_records_round_trip(group: str, topic: str, partition: int, offset: int, epoch: int, meta: str) -> None:
    tp = TopicPartition(topic, partition)
    assert decode_key(offset_commit_key(group, tp)) == OffsetKey(group, tp)
    om = OffsetAndMetadata(offset, epoch, meta, 1_700_000_000_000)
    assert decode_offset_value(offset_commit_value(om)) == om


@given(
    names,
    st.lists(
        st.tuples(names, st.none() | names, st.binary(max_size=30), st.binary(max_size=30)),
        max_size=5,
        unique_by=lambda m: m[0],
    ),
    st.integers(0, 1000),
)
def test_group_records_round_trip(group_id: str, members: list[tuple[str, str | None, bytes, bytes]], gen: int) -> None:
    assert decode_key(group_metadata_key(group_id)) == GroupKey(group_id)
    group = GroupMetadata(group_id, generation_id=gen, current_state_timestamp=123)
    instance_ids = set()
    for member_id, instance, sub, assignment in members:
        if instance in instance_ids:
            instance = None
        instance_ids.add(instance)
        group.add(
            MemberMetadata(
                member_id, instance, "client", "/127.0.0.1", 5000, 3000, "consumer", [("range", sub)], assignment
            )
        )
    group.protocol_name = "range" if members else None
    assignment_map = {m.member_id: m.assignment for m in group.all_members()}
    loaded = decode_group_value(group_id, group_metadata_value(group, assignment_map))
    assert loaded.generation_id == gen
    assert loaded.state is (GroupState.STABLE if members else GroupState.EMPTY)
    assert loaded.leader_id == group.leader_id
    assert loaded.static_members == group.static_members
    assert [
        (m.member_id, m.group_instance_id, m.supported_protocols, m.assignment, m.session_timeout_ms)
        for m in loaded.all_members()
    ] == [
        (m.member_id, m.group_instance_id, m.supported_protocols, m.assignment, m.session_timeout_ms)
        for m in group.all_members()
    ]
