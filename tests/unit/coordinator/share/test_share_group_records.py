"""A share group's records in ``__consumer_offsets``: whatever sequence of changes and deletions the coordinator
writes, and whichever of its writes failed (before or after landing), replaying the records gives the group as
its last successful write left it; bytes it did not write are skipped."""

from __future__ import annotations

import asyncio
import struct
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from rill.coordinator.share import share_group_store
from rill.coordinator.share.share_group_records import (
    Change,
    ShareGroupReplay,
    StoredImage,
    changes,
    is_share_group_key,
)
from rill.coordinator.share.share_group_store import ShareGroupStore
from rill.errors import ErrorCode

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


class _Store(ShareGroupStore):
    """The store's writing, over a log in a list: a write lands, fails before landing, or lands and fails."""

    def __init__(self, outcomes: list[str]) -> None:
        super().__init__(None, None, dict)  # type: ignore[arg-type]
        self.log: list[tuple[bytes, bytes | None]] = []
        self.outcomes = outcomes

    async def _write(self, group_id: str, changes: list[Change]) -> ErrorCode:
        outcome = self.outcomes.pop(0) if self.outcomes else "ok"
        if outcome != "lost":
            self.log += [(c.key, c.value) for c in changes]
        return ErrorCode.NO_ERROR if outcome == "ok" else ErrorCode.COORDINATOR_NOT_AVAILABLE


outcomes = st.lists(st.sampled_from(["ok", "ok", "lost", "landed"]), max_size=20)


@settings(max_examples=200, deadline=None)
@given(steps, outcomes, st.integers(1, 3), images)
def test_replay_gives_the_last_written_image(sequence: list[StoredImage | None], failures: list[str],
                                             per_batch: int, final: StoredImage) -> None:  # fmt: skip
    """Whatever writes failed on the way (landed or not, in batches of any size), the first write that succeeds
    after them leaves the log replaying to exactly what it wrote."""
    store = _Store(failures)

    async def run() -> None:
        for image in [*sequence, final]:
            if image is None:
                await store.delete_locked("g")
            else:
                await store._write_changes("g", image)
        store.outcomes = []  # and then the writes succeed
        await store._write_changes("g", final)

    original = share_group_store.WRITE_BYTES
    share_group_store.WRITE_BYTES = per_batch  # (every batch takes one record at least)
    try:
        asyncio.run(run())
    finally:
        share_group_store.WRITE_BYTES = original
    assert all(is_share_group_key(k) for k, _ in store.log)
    replay = ShareGroupReplay()
    for offset, (key, value) in enumerate(store.log):
        replay.replay(key, value, offset)
    group, image = replay.finish(now_ms=1000, session_timeout_ms=45000)["g"]
    assert image == final
    assert group.group_epoch == final.epoch
    assert {m.member_id: (m.rack_id, m.client_id, m.client_host, m.subscribed) for m in group.members.values()} \
        == final.members  # fmt: skip
    assert all(m.deadline_ms == 46000 and m.member_epoch == final.epoch for m in group.members.values())
    assert group.state_topics == {name: n for name, (_, n) in final.topics.items()}


def test_nothing_is_written_when_nothing_changed() -> None:
    image = StoredImage(3, {"m1": (None, "app", "/h", ("a",))}, {"a": (TOPICS["a"], 2)})
    assert changes("g", image, image) == []


def test_a_record_it_did_not_write_is_skipped() -> None:
    good = changes("g", StoredImage(), StoredImage(1, {"m1": (None, "app", "/h", ("a",))}, {}))
    replay = ShareGroupReplay()
    replay.replay(struct.pack(">h", 10) + b"\xff\xff\xff", b"\x00\x00garbage", 0)  # a member key that does not decode
    replay.replay(good[0].key, b"\x00\x00\x01", 1)  # a value cut short
    for offset, c in enumerate(good, start=2):
        replay.replay(c.key, c.value, offset)
    group, _ = replay.finish(0, 1)["g"]
    assert list(group.members) == ["m1"] and group.group_epoch == 1
