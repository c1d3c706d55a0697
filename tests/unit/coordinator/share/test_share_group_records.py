"""A share group's records in ``__consumer_offsets``: whatever sequence of changes and deletions the coordinator
writes, replaying the records gives the group as it last wrote it; bytes it did not write are skipped."""

from __future__ import annotations

import struct
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from rill.coordinator.share.share_group_records import (
    ShareGroupReplay,
    StoredImage,
    changes,
    is_share_group_key,
    tombstones,
)

TOPICS = {"a": uuid.UUID(int=1), "b": uuid.UUID(int=2), "c": uuid.UUID(int=3)}

members = st.dictionaries(
    st.sampled_from(["m1", "m2", "m3", "m4"]),
    st.tuples(st.none() | st.just("rack-1"), st.sampled_from(["app", "other"]), st.just("/127.0.0.1"),
              st.lists(st.sampled_from(sorted(TOPICS)), unique=True).map(tuple)),
)
topics = st.dictionaries(st.sampled_from(sorted(TOPICS)), st.integers(1, 4)).map(
    lambda d: {name: (TOPICS[name], n) for name, n in d.items()}
)
images = st.builds(StoredImage, st.integers(0, 1000), members, topics)
steps = st.lists(st.one_of(images, st.just(None)), min_size=1, max_size=8)  # None: the group is deleted


@settings(max_examples=200, deadline=None)
@given(steps)
def test_replay_gives_the_last_written_image(sequence: list[StoredImage | None]) -> None:
    log: list[tuple[bytes, bytes | None]] = []
    stored = StoredImage()
    for image in sequence:
        if image is None:
            log += tombstones("g", stored)
            stored = StoredImage()
        else:
            log += changes("g", stored, image)
            stored = image
    assert all(is_share_group_key(k) for k, _ in log)
    replay = ShareGroupReplay()
    for offset, (key, value) in enumerate(log):
        replay.replay(key, value, offset)
    loaded = replay.finish(now_ms=1000, session_timeout_ms=45000)
    last = sequence[-1]
    if last is None or (last.epoch == -1 and not log):
        assert "g" not in loaded
        return
    group, image = loaded["g"]
    assert image == last
    assert group.group_epoch == last.epoch
    assert {m.member_id: (m.rack_id, m.client_id, m.client_host, m.subscribed) for m in group.members.values()} \
        == last.members  # fmt: skip
    assert all(m.deadline_ms == 46000 and m.member_epoch == last.epoch for m in group.members.values())
    assert group.state_topics == {name: n for name, (_, n) in last.topics.items()}


def test_nothing_is_written_when_nothing_changed() -> None:
    image = StoredImage(3, {"m1": (None, "app", "/h", ("a",))}, {"a": (TOPICS["a"], 2)})
    assert changes("g", image, image) == []


def test_a_record_it_did_not_write_is_skipped() -> None:
    good = changes("g", StoredImage(), StoredImage(1, {"m1": (None, "app", "/h", ("a",))}, {}))
    replay = ShareGroupReplay()
    replay.replay(struct.pack(">h", 10) + b"\xff\xff\xff", b"\x00\x00garbage", 0)  # a member key that does not decode
    replay.replay(good[0][0], b"\x00\x00\x01", 1)  # a value cut short
    for offset, (key, value) in enumerate(good, start=2):
        replay.replay(key, value, offset)
    group, _ = replay.finish(0, 1)["g"]
    assert list(group.members) == ["m1"] and group.group_epoch == 1
