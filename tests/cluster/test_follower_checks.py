"""The leader's high watermark on a real cluster, through the real wire: it trusts a follower's fetch only once
it has served it, moves when the controller shrinks the ISR, and, on a new leader, is not given out to consumers
until it reaches the start of the leader's epoch (KIP-207).

The brokers' inter-broker requests go through a proxy in the test (``interceptors=True``), which holds a chosen
follower's fetches (or rewrites their answers) so that what the leader knows of that follower, and what the
follower knows of the high watermark, stay where the test wants them; the test sends fetches of its own as a
follower (``replica_id`` set) and reads the high watermark with ListOffsets.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from tests.cluster._raw import connect, create_assigned, fetch, list_latest, produce, state, wait_isr

from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.testing.cluster import TestCluster, cluster
from rill.testing.interceptor import Intercepted

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def c() -> Iterator[TestCluster]:
    # A follower leaves the ISR only when the controller sees its broker die (the leader's own lag check, 30 s,
    # never runs within a test), so each test decides who is in the ISR.
    with cluster(3, interceptors=True, replica_lag_time_max_ms=30000) as running:
        yield running


def _fetch_offset(request: Intercepted, topic: str) -> int:
    for t in request.body["topics"]:
        if t["topic"] == topic:
            return int(t["partitions"][0]["fetch_offset"])
    return -1


def test_a_fenced_stale_or_out_of_range_follower_fetch_moves_nothing(c: TestCluster) -> None:
    """Kafka updates a follower's fetch state after a successful read: a fetch with a fenced or unknown leader
    epoch, or from an offset past the leader's log end, is refused and leaves the high watermark where the
    follower's real position holds it."""
    create_assigned(c, "ff", [1, 0])
    wait_isr(c, "ff", {0, 1})
    c.stop(1)  # leadership moves to broker 0 at epoch 1, so epoch 0 is a fenced one
    c.wait_for(lambda: state(c, "ff")["leader"] == 0, 30, "broker 0 leading")
    c.start(1)
    wait_isr(c, "ff", {0, 1})
    epoch = int(state(c, "ff")["leader_epoch"])
    assert epoch >= 1
    with connect(c, 0) as conn:
        assert produce(conn, "ff", 2, acks=-1) == (0, 0)
        # broker 1's next fetch, whatever it names (an incremental fetch names only the partitions that moved)
        held = c.interceptor(0).hold(ApiKey.FETCH, source=1)
        try:
            held.wait()  # broker 1's position on the leader stays at 2, the records it has
            assert produce(conn, "ff", 3, acks=1) == (0, 2)  # the leader's log ends at 5
            assert list_latest(conn, "ff") == (0, 2)
            for offset, fetch_epoch, code in [
                (5, epoch - 1, ErrorCode.FENCED_LEADER_EPOCH),
                (5, epoch + 1, ErrorCode.UNKNOWN_LEADER_EPOCH),
                (9, epoch, ErrorCode.OFFSET_OUT_OF_RANGE),
                (9, -1, ErrorCode.OFFSET_OUT_OF_RANGE),
            ]:
                p = fetch(conn, "ff", offset=offset, epoch=fetch_epoch, replica_id=1)
                assert p["error_code"] == code, (offset, fetch_epoch, p["error_code"])
                assert list_latest(conn, "ff") == (0, 2), f"a fetch answered {code.name} moved the high watermark"
            # A fetch the leader serves records the position as before, and answers with the high watermark it moved.
            p = fetch(conn, "ff", offset=5, epoch=epoch, replica_id=1)
            assert p["error_code"] == 0 and p["high_watermark"] == 5
            assert list_latest(conn, "ff") == (0, 5)
        finally:
            held.release()


def test_a_controller_shrink_of_the_isr_completes_the_produces_waiting_on_the_removed_follower(c: TestCluster) -> None:
    """The controller takes a dead follower out of the ISR; the leader recomputes its high watermark when that
    change reaches it, so an acks=all produce the removed follower held up is answered then, not at its timeout
    (the other follower has the records but sends no further fetch that would move it)."""
    create_assigned(c, "shrink", [0, 1, 2])
    wait_isr(c, "shrink", {0, 1, 2})
    proxy = c.interceptor(0)
    with connect(c, 0) as conn:
        assert produce(conn, "shrink", 1, acks=-1) == (0, 0)
        held_1 = proxy.hold(ApiKey.FETCH, source=1)  # broker 1's next fetch, whatever it names
        seen: list[int] = []

        def second_fetch_past_the_records(request: Intercepted) -> bool:
            """The fetch after the one that reported offset 3 (which names the partition: its offset moved)."""
            if seen:
                return True
            if _fetch_offset(request, "shrink") >= 3:
                seen.append(1)
            return False

        held_2 = proxy.hold(ApiKey.FETCH, source=2, predicate=second_fetch_past_the_records)
        result: list[Any] = []
        try:
            held_1.wait()
            producer = threading.Thread(target=lambda: result.append(produce(conn, "shrink", 2, acks=-1)))
            producer.start()
            held_2.wait()  # broker 2 reported offset 3; its next fetch waits
            assert not result, "committed while broker 1 lacks the records"
            c.kill(1)
            wait_isr(c, "shrink", {0, 2})
            producer.join(10)
            assert result == [(0, 1)], "the produce was not answered when the ISR shrank"
        finally:
            held_1.release()
            held_2.release()
            c.start(1)
            wait_isr(c, "shrink", {0, 1, 2})


def test_a_new_leader_answers_offset_not_available_until_its_high_watermark_reaches_its_epoch(
    c: TestCluster,
) -> None:
    """KIP-207: a new leader learns the high watermark from its followers' fetches; until it reaches the start of
    its epoch it does not know what its predecessor had committed, so ListOffsets LATEST answers
    OFFSET_NOT_AVAILABLE (and a consumer's fetch past the high watermark too) rather than an offset below one the
    old leader already gave out."""
    create_assigned(c, "k207", [0, 1, 2])
    wait_isr(c, "k207", {0, 1, 2})

    def pin_high_watermark(body: dict[str, Any]) -> dict[str, Any]:
        for t in body["responses"]:
            if t["topic"] == "k207":
                for p in t["partitions"]:
                    p["high_watermark"] = min(p["high_watermark"], 2)
        return body

    with connect(c, 0) as conn:
        assert produce(conn, "k207", 2, acks=-1) == (0, 0)
        # Broker 1, the next leader, hears of no high watermark above 2: the responses that would have told it
        # were lost with its leader.
        c.interceptor(0).rewrite_response(ApiKey.FETCH, pin_high_watermark, source=1)
        assert produce(conn, "k207", 3, acks=-1) == (0, 2)
        assert list_latest(conn, "k207") == (0, 5)
    held = c.interceptor(1).hold(ApiKey.OFFSET_FOR_LEADER_EPOCH, source=2)  # broker 2 reaches the new leader later
    try:
        c.kill(0)
        c.wait_for(lambda: state(c, "k207")["leader"] == 1, 30, "broker 1 leading")
        held.wait()
        with connect(c, 1) as conn:
            c.wait_for(lambda: list_latest(conn, "k207")[0] != ErrorCode.NOT_LEADER_OR_FOLLOWER, 10, "the leadership")
            assert list_latest(conn, "k207") == (ErrorCode.OFFSET_NOT_AVAILABLE, -1)
            epoch = int(state(c, "k207")["leader_epoch"])
            assert fetch(conn, "k207", offset=3, epoch=epoch)["error_code"] == ErrorCode.OFFSET_NOT_AVAILABLE
            below = fetch(conn, "k207", offset=0, epoch=epoch)  # what is known committed is served
            assert below["error_code"] == 0 and below["high_watermark"] == 2 and below["records"]
            # A replica's ListOffsets is answered with the log end, as Kafka's (no isolation level).
            assert list_latest(conn, "k207", replica_id=2) == (0, 5)
            held.release()
            c.wait_for(lambda: list_latest(conn, "k207") == (0, 5), 20, "the high watermark at the epoch's start")
    finally:
        held.release()
        c.interceptor(0).clear()
        c.start(0)
        wait_isr(c, "k207", {0, 1, 2})
