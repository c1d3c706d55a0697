"""The group coordinator's state machine, driven directly on a real broker's event loop (real logs on disk)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from rill.broker import Broker
from rill.common import TopicPartition
from rill.config import BrokerConfig
from rill.coordinator.group.group_coordinator import GroupCoordinator
from rill.coordinator.group.group_metadata import GroupState, OffsetAndMetadata
from rill.errors import ErrorCode

PROTOCOLS = [("range", b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff")]


def run(tmp_path: Path, body: Callable[[GroupCoordinator, Broker], Awaitable[None]], **configs: str) -> None:
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path / "logs"),
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "100",
        "offsets.topic.num.partitions": "3",
        **configs,
    }

    async def main() -> None:
        broker = Broker(BrokerConfig.from_properties(props))
        await broker.start()
        try:
            assert broker.services is not None
            if broker.services.metadata.topic("t") is None:
                await broker.services.metadata.create_topic("t", 2, 1, {})
            # What FindCoordinator does before a client's first group request.
            await broker.services.group_coordinator.manager.maybe_create_offsets_topic()
            await body(broker.services.group_coordinator, broker)
        finally:
            await broker.stop()

    asyncio.run(asyncio.wait_for(main(), 20))


async def join(
    gc: GroupCoordinator,
    member_id: str = "",
    instance: str | None = None,
    session_ms: int = 5000,
    protocols: list[tuple[str, bytes]] = PROTOCOLS,
    group: str = "g",
) -> Any:
    return await gc.join_group(
        group, member_id, instance, True, "client", "/127.0.0.1", 5000, session_ms, "consumer", protocols
    )


async def join_member(gc: GroupCoordinator, **kw: Any) -> Any:
    first = await join(gc, **kw)
    if first.error == ErrorCode.MEMBER_ID_REQUIRED:
        return await join(gc, first.member_id, **kw)
    return first


def test_member_id_required_then_join_sync_heartbeat(tmp_path: Path) -> None:
    async def body(gc: GroupCoordinator, _b: Broker) -> None:
        first = await join(gc)
        assert first.error == ErrorCode.MEMBER_ID_REQUIRED and first.member_id.startswith("client-")
        joined = await join(gc, first.member_id)
        assert joined.error == ErrorCode.NO_ERROR and joined.generation_id == 1
        assert joined.leader_id == joined.member_id and joined.protocol_name == "range"
        assert [m.member_id for m in joined.members] == [joined.member_id]
        synced = await gc.sync_group("g", 1, joined.member_id, None, "consumer", "range", {joined.member_id: b"A"})
        assert synced.error == ErrorCode.NO_ERROR and synced.assignment == b"A"
        assert gc.groups["g"].state is GroupState.STABLE
        assert gc.heartbeat("g", joined.member_id, None, 1) == ErrorCode.NO_ERROR
        assert gc.heartbeat("g", joined.member_id, None, 0) == ErrorCode.ILLEGAL_GENERATION
        assert gc.heartbeat("g", "nobody", None, 1) == ErrorCode.UNKNOWN_MEMBER_ID

    run(tmp_path, body)


def test_session_timeout_bounds_and_bad_group(tmp_path: Path) -> None:
    async def body(gc: GroupCoordinator, _b: Broker) -> None:
        assert (await join(gc, session_ms=50)).error == ErrorCode.INVALID_SESSION_TIMEOUT
        assert (await join(gc, session_ms=10_000_000)).error == ErrorCode.INVALID_SESSION_TIMEOUT
        assert (await join(gc, group="")).error == ErrorCode.INVALID_GROUP_ID
        assert (await join(gc, member_id="ghost")).error == ErrorCode.UNKNOWN_MEMBER_ID

    run(tmp_path, body)


def test_second_member_triggers_rebalance_and_protocol_vote(tmp_path: Path) -> None:
    async def body(gc: GroupCoordinator, _b: Broker) -> None:
        a = await join_member(gc, protocols=[("range", b"a"), ("roundrobin", b"a")])
        await gc.sync_group("g", 1, a.member_id, None, None, None, {a.member_id: b"x"})
        b_task = asyncio.ensure_future(join_member(gc, protocols=[("roundrobin", b"b"), ("range", b"b")]))
        await asyncio.sleep(0.05)
        assert gc.groups["g"].state is GroupState.PREPARING_REBALANCE
        assert gc.heartbeat("g", a.member_id, None, 1) == ErrorCode.REBALANCE_IN_PROGRESS
        a2 = await join(gc, a.member_id, protocols=[("range", b"a"), ("roundrobin", b"a")])
        b = await b_task
        assert a2.generation_id == b.generation_id == 2
        assert a2.protocol_name == b.protocol_name == "range"  # a tie: the leader's preference wins
        assert len(a2.members) == 2 and b.members == ()
        # The members' SyncGroup waits for the leader's assignment.
        b_sync = asyncio.ensure_future(gc.sync_group("g", 2, b.member_id, None, None, None, {}))
        await asyncio.sleep(0.02)
        assert not b_sync.done()
        await gc.sync_group("g", 2, a.member_id, None, None, None, {a.member_id: b"A", b.member_id: b"B"})
        assert (await b_sync).assignment == b"B"

    run(tmp_path, body)


def test_session_expiry_removes_member(tmp_path: Path) -> None:
    async def body(gc: GroupCoordinator, _b: Broker) -> None:
        a = await join_member(gc, session_ms=300)
        await gc.sync_group("g", 1, a.member_id, None, None, None, {a.member_id: b"A"})
        await asyncio.sleep(0.6)
        group = gc.groups["g"]
        assert group.state is GroupState.EMPTY and len(group) == 0 and group.generation_id == 2
        assert gc.heartbeat("g", a.member_id, None, 1) == ErrorCode.UNKNOWN_MEMBER_ID

    run(tmp_path, body)


def test_a_new_member_that_dies_after_its_join_expires_with_its_session(tmp_path: Path) -> None:
    """A member that joined in this generation and then died (no SyncGroup, no heartbeat) is removed once its
    session times out, as any member; the longer timeout of a new member's JoinGroup (KIP-394, 5 minutes)
    ends with the join. It used to keep the member (and a rebalance waiting on it) for those 5 minutes."""

    async def body(gc: GroupCoordinator, _b: Broker) -> None:
        a = await join_member(gc, session_ms=2000)
        await gc.sync_group("g", 1, a.member_id, None, None, None, {a.member_id: b"A"})
        b_task = asyncio.ensure_future(join_member(gc, session_ms=300))
        await asyncio.sleep(0.05)
        a2 = await join(gc, a.member_id, session_ms=2000)
        b = await b_task
        assert a2.generation_id == b.generation_id == 2
        await gc.sync_group("g", 2, a.member_id, None, None, None, {a.member_id: b"A", b.member_id: b"B"})
        # b is gone: it never heartbeats again.
        await asyncio.sleep(0.7)
        group = gc.groups["g"]
        assert not group.has(b.member_id), "the dead member is still in the group after its session timeout"
        assert group.state is GroupState.PREPARING_REBALANCE

    run(tmp_path, body)


def test_static_member_replaced_and_old_id_fenced(tmp_path: Path) -> None:
    async def body(gc: GroupCoordinator, _b: Broker) -> None:
        a = await join_member(gc, instance="i-1")
        await gc.sync_group("g", 1, a.member_id, "i-1", None, None, {a.member_id: b"A"})
        again = await join(gc, instance="i-1")  # a restart: unknown member id, known instance id
        assert again.error == ErrorCode.NO_ERROR and again.generation_id == 1 and again.member_id != a.member_id
        assert again.leader_id == a.member_id  # the old leader id: the restarted member must not reassign
        assert (await gc.sync_group("g", 1, again.member_id, "i-1", None, None, {})).assignment == b"A"
        assert gc.heartbeat("g", a.member_id, "i-1", 1) == ErrorCode.FENCED_INSTANCE_ID
        codes = await gc.commit_offsets("g", a.member_id, "i-1", 1, {TopicPartition("t", 0): OffsetAndMetadata(5)})
        assert codes == {TopicPartition("t", 0): ErrorCode.FENCED_INSTANCE_ID}
        error, results = gc.leave_group("g", [("", "i-1", "bye")])
        assert error == ErrorCode.NO_ERROR and results[0][2] == ErrorCode.NO_ERROR
        assert gc.groups["g"].state is GroupState.EMPTY

    run(tmp_path, body)


def test_commit_rules_fetch_delete_and_expiry(tmp_path: Path) -> None:
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)

    async def body(gc: GroupCoordinator, _b: Broker) -> None:
        # A consumer without group management commits with generation -1 to a group that does not exist yet.
        assert await gc.commit_offsets("simple", "", None, -1, {tp0: OffsetAndMetadata(7, metadata="m")}) == {
            tp0: ErrorCode.NO_ERROR
        }
        assert await gc.commit_offsets("nogroup", "m", None, 3, {tp0: OffsetAndMetadata(1)}) == {
            tp0: ErrorCode.ILLEGAL_GENERATION
        }
        error, offsets = gc.fetch_offsets("simple", [tp0, tp1])
        assert error == ErrorCode.NO_ERROR and offsets[tp0] is not None and offsets[tp0].offset == 7
        assert offsets[tp0].metadata == "m" and offsets[tp1] is None
        assert gc.fetch_offsets("simple", None)[1].keys() == {tp0}
        too_big = OffsetAndMetadata(1, metadata="x" * 5000)
        codes = await gc.commit_offsets("simple", "", None, -1, {tp1: too_big})
        assert codes == {tp1: ErrorCode.OFFSET_METADATA_TOO_LARGE}

        # While a group has members, only they commit, with their generation.
        a = await join_member(gc)
        await gc.sync_group("g", 1, a.member_id, None, None, None, {a.member_id: b"A"})
        codes = await gc.commit_offsets("g", "", None, -1, {tp0: OffsetAndMetadata(1)})
        assert codes == {tp0: ErrorCode.UNKNOWN_MEMBER_ID}
        codes = await gc.commit_offsets("g", a.member_id, None, 1, {tp0: OffsetAndMetadata(3)})
        assert codes == {tp0: ErrorCode.NO_ERROR}
        assert await gc.delete_groups(["g", "missing"]) == {
            "g": ErrorCode.NON_EMPTY_GROUP,
            "missing": ErrorCode.GROUP_ID_NOT_FOUND,
        }
        error, deleted = await gc.delete_offsets("simple", [tp0])
        assert error == ErrorCode.NO_ERROR and deleted == {tp0: ErrorCode.NO_ERROR}
        assert gc.fetch_offsets("simple", [tp0])[1][tp0] is None

        # Offsets of empty groups expire after offsets.retention.minutes; the emptied group goes away.
        await gc.commit_offsets("simple", "", None, -1, {tp1: OffsetAndMetadata(9)})
        gc.leave_group("g", [(a.member_id, None, None)])
        now = int(time.time() * 1000)
        assert gc.cleanup_group_metadata(now) == 0
        assert gc.cleanup_group_metadata(now + gc.offsets_retention_ms + 1000) == 2
        assert "simple" not in gc.groups and "g" not in gc.groups
        assert [g for g, _, _ in gc.list_groups()[1]] == []

    run(tmp_path, body)


def test_state_is_replayed_after_restart(tmp_path: Path) -> None:
    tp0 = TopicPartition("t", 0)

    async def first(gc: GroupCoordinator, _b: Broker) -> None:
        a = await join_member(gc, instance="static-1", session_ms=30000)
        await gc.sync_group("g", 1, a.member_id, "static-1", None, None, {a.member_id: b"ASSIGN"})
        await gc.commit_offsets("g", a.member_id, "static-1", 1, {tp0: OffsetAndMetadata(42, 3, "meta")})
        await gc.commit_offsets("g", a.member_id, "static-1", 1, {tp0: OffsetAndMetadata(43, 3, "meta")})
        await gc.commit_offsets("gone", "", None, -1, {tp0: OffsetAndMetadata(1)})
        assert await gc.delete_groups(["gone"]) == {"gone": ErrorCode.NO_ERROR}

    async def second(gc: GroupCoordinator, _b: Broker) -> None:
        group = gc.groups["g"]
        assert group.state is GroupState.STABLE and group.generation_id == 1
        assert list(group.static_members) == ["static-1"]
        assert gc.fetch_offsets("g", [tp0])[1][tp0] == group.offsets[tp0]
        assert group.offsets[tp0].offset == 43 and group.offsets[tp0].leader_epoch == 3
        assert "gone" not in gc.groups
        back = await join(gc, instance="static-1", session_ms=30000)
        assert back.error == ErrorCode.NO_ERROR and back.generation_id == 1
        assert (await gc.sync_group("g", 1, back.member_id, "static-1", None, None, {})).assignment == b"ASSIGN"

    run(tmp_path, first)
    run(tmp_path, second)


@pytest.mark.parametrize("delay_ms", ["300"])
def test_initial_rebalance_delay_collects_members(tmp_path: Path, delay_ms: str) -> None:
    async def body(gc: GroupCoordinator, _b: Broker) -> None:
        started = time.monotonic()
        joins = [asyncio.ensure_future(join_member(gc)) for _ in range(3)]
        results = await asyncio.gather(*joins)
        assert time.monotonic() - started >= 0.25
        assert {r.generation_id for r in results} == {1}  # one rebalance for all three

    run(tmp_path, body, **{"group.initial.rebalance.delay.ms": delay_ms})
