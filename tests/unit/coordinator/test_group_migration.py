"""The pieces of online migration that need no broker: the consumer protocol's bytes as the coordinator reads and
writes them, a classic member's metadata in the consumer group's records, and the group's checks of who may join
or when it goes back to the classic protocol."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rill.coordinator.group import consumer_group_records as records
from rill.coordinator.group.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from rill.coordinator.group.consumer_group_migration import decode_assignment, decode_subscription, encode_assignment
from rill.errors import KafkaError
from rill.protocol import encode_versioned

names = st.text(min_size=1, max_size=20)
assignments = st.dictionaries(names, st.sets(st.integers(0, 1000), min_size=1, max_size=8), max_size=5)


@given(assignments)
def test_an_assignment_reads_back(partitions: dict[str, set[int]]) -> None:
    decoded = decode_assignment(encode_assignment(partitions), "range")
    assert {t: set(ps) for t, ps in decoded.items()} == partitions


def test_user_data_refuses_all_but_the_sticky_assignors() -> None:
    data = encode_versioned("ConsumerProtocolAssignment", 0, {
        "assigned_partitions": [{"topic": "t", "partitions": [1]}], "user_data": b"memory"})  # fmt: skip
    assert decode_assignment(data, "cooperative-sticky") == {"t": [1]}
    assert decode_assignment(data, "sticky") == {"t": [1]}
    with pytest.raises(KafkaError, match="custom assignor"):
        decode_assignment(data, "my-assignor")


@given(st.binary(max_size=64))
def test_bytes_a_client_sent_fail_cleanly(data: bytes) -> None:
    for decode in (lambda: decode_subscription(data), lambda: decode_assignment(data, "range")):
        try:
            decode()
        except Exception as e:  # the coordinator turns any of them into a refusal
            assert not isinstance(e, (SystemExit, KeyboardInterrupt))


@given(st.lists(st.tuples(names, st.binary(max_size=30)), min_size=1, max_size=3), st.integers(1, 2**31 - 1))
def test_a_classic_members_metadata_is_replayed(protocols: list[tuple[str, bytes]], session_timeout: int) -> None:
    member = ConsumerGroupMember("m", client_id="c", subscribed_topic_names=("t",),
                                 classic=ClassicMemberMetadata(session_timeout, tuple(protocols)))  # fmt: skip
    replay = records.ConsumerGroupReplay()
    replay.replay(*records.group_epoch_record("g", 3))
    replay.replay(*records.member_metadata_record("g", member))
    replay.replay(*records.current_assignment_record("g", member))
    assert replay.finish()["g"].members["m"] == member


def _group(*classic: bool) -> ConsumerGroup:
    group = ConsumerGroup("g")
    for i, uses_classic in enumerate(classic):
        meta = ClassicMemberMetadata(10_000, (("range", b""), ("cooperative-sticky", b""))) if uses_classic else None
        group.put_member(ConsumerGroupMember(f"m{i}", classic=meta))
    return group


def test_a_classic_member_joins_with_a_protocol_the_classic_members_share() -> None:
    group = _group(True, False)
    assert group.supports_classic_protocols("consumer", ["roundrobin", "range"])
    assert not group.supports_classic_protocols("consumer", ["roundrobin"])
    assert not group.supports_classic_protocols("connect", ["range"])
    assert _group(False).supports_classic_protocols("consumer", ["anything"])  # no classic member yet


def test_waiting_on_a_partition_another_member_holds() -> None:
    topic = uuid.uuid4()
    group = _group(True, True)
    group.put_member(group.members["m0"].replace(member_epoch=2, assigned={topic: frozenset({0})}))
    waiting = group.members["m1"].replace(state=MemberState.UNRELEASED_PARTITIONS, member_epoch=3)
    group.put_member(waiting)
    group.target["m1"] = {topic: frozenset({0, 1})}
    assert group.waiting_on_unreleased_partition(waiting)
    group.put_member(group.members["m0"].replace(assigned={}))  # m0 released it
    assert not group.waiting_on_unreleased_partition(waiting)
