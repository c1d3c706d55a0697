"""Incremental fetch sessions (KIP-227) over raw Fetch requests: a full fetch with epoch 0 creates a session,
incremental fetches name only what changed and are answered with only the partitions that have something new,
and the session errors are Kafka's (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH,
FETCH_SESSION_TOPIC_ID_ERROR). A hypothesis model checks which partitions an incremental response holds over
sequences of appends, fetch offset moves, forgets and re-adds."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.broker._wire import Wire

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.records.builder import build_batch
from rill.records.record import Record

pytestmark = pytest.mark.timeout(180)

TOPIC = "sessions"
PARTITIONS = 4

Part = tuple[int, int]  # (partition, fetch offset)


def _create(w: Wire, topic: str, partitions: int) -> uuid.UUID:
    body = {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                        "configs": []}], "timeout_ms": 5000, "validate_only": False}  # fmt: skip
    (created,) = w.call(ApiKey.CREATE_TOPICS, 7, body)["topics"]
    assert created["error_code"] == 0
    return uuid.UUID(str(created["topic_id"]))


def _produce(w: Wire, partition: int, topic: str = TOPIC) -> None:
    batch = build_batch([Record(0, 1_700_000_000_000, None, b"v")])
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}  # fmt: skip
    (t,) = w.call(ApiKey.PRODUCE, 9, body)["responses"]
    assert t["partition_responses"][0]["error_code"] == 0


def _fetch(w: Wire, session_id: int, epoch: int, parts: list[Part] = (), forgotten: list[int] = (), *,  # type: ignore[assignment]
           version: int = 12, topic_id: uuid.UUID | None = None, replica_id: int = -1,
           topic: str = TOPIC) -> dict[str, Any]:  # fmt: skip
    named: dict[str, Any] = {"topic_id": topic_id} if version >= 13 else {"topic": topic}
    body = {
        "replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 10_000_000, "isolation_level": 0,
        "session_id": session_id, "session_epoch": epoch,
        "topics": [{**named, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": o, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1_000_000} for p, o in parts]}] if parts else [],
        "forgotten_topics_data": [{**named, "partitions": list(forgotten)}] if forgotten else [],
        "rack_id": "",
    }  # fmt: skip
    return w.call(ApiKey.FETCH, version, body)


def _answered(resp: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["partition_index"]: p for t in resp["responses"] for p in t["partitions"]}


@pytest.fixture(scope="module")
def wire() -> Iterator[tuple[Wire, uuid.UUID, rill.testing.TestBroker]]:
    with rill.testing.broker() as b:
        w = Wire(b.bootstrap_servers)
        topic_id = _create(w, TOPIC, PARTITIONS)
        yield w, topic_id, b
        w.close()


ALL = [(p, 0) for p in range(PARTITIONS)]


def test_full_fetch_creates_a_session_and_incremental_fetches_carry_only_changes(wire: Any) -> None:
    w, _, _ = wire
    full = _fetch(w, 0, 0, ALL)
    assert full["error_code"] == 0 and full["session_id"] > 0
    assert set(_answered(full)) == set(range(PARTITIONS))  # a full response holds every partition
    sid = full["session_id"]
    hw = {p: a["high_watermark"] for p, a in _answered(full).items()}
    quiet = _fetch(w, sid, 1)
    assert quiet["error_code"] == 0 and quiet["session_id"] == sid
    assert _answered(quiet) == {}  # nothing new: nothing sent
    _produce(w, 2)
    moved = _fetch(w, sid, 2)
    assert set(_answered(moved)) == {2}
    assert _answered(moved)[2]["high_watermark"] == hw[2] + 1 and _answered(moved)[2]["records"]
    # the consumer moves past the record: partition 2 is named again, with nothing new to send
    assert _answered(_fetch(w, sid, 3, [(2, hw[2] + 1)])) == {}
    # a duplicate (an epoch already used) is refused and changes nothing; the next epoch still works
    assert _fetch(w, sid, 3)["error_code"] == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert _fetch(w, sid, 7)["error_code"] == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert _fetch(w, sid, 4)["error_code"] == 0
    # epoch -1 closes it: answered as a sessionless full fetch; the id is unknown afterwards
    closed = _fetch(w, sid, -1, ALL)
    assert closed["error_code"] == 0 and closed["session_id"] == 0 and set(_answered(closed)) == set(range(PARTITIONS))
    assert _fetch(w, sid, 5)["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_unknown_session_and_sessionless_fetches(wire: Any) -> None:
    w, _, _ = wire
    assert _fetch(w, 12345, 1)["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert _fetch(w, 0, 1)["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND  # 0 is never a session
    sessionless = _fetch(w, 0, -1, ALL)
    assert sessionless["session_id"] == 0 and set(_answered(sessionless)) == set(range(PARTITIONS))
    old = _fetch(w, 0, -1, ALL, version=6)  # before sessions
    assert set(_answered(old)) == set(range(PARTITIONS))


def test_a_full_fetch_naming_its_session_replaces_it(wire: Any) -> None:
    w, _, _ = wire
    first = _fetch(w, 0, 0, ALL)["session_id"]
    second = _fetch(w, first, 0, ALL[:2])
    assert second["session_id"] not in (0, first) and set(_answered(second)) == {0, 1}
    assert _fetch(w, first, 1)["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert _fetch(w, second["session_id"], 1)["error_code"] == 0


def test_forgetting_every_partition_ends_the_session(wire: Any) -> None:
    w, _, _ = wire
    sid = _fetch(w, 0, 0, ALL[:2])["session_id"]
    rest = _fetch(w, sid, 1, forgotten=[0])
    assert rest["session_id"] == sid
    _produce(w, 0)
    assert _answered(_fetch(w, sid, 2)) == {}  # partition 0 left the session: its record is not sent
    gone = _fetch(w, sid, 3, forgotten=[1])
    assert gone["error_code"] == 0 and gone["session_id"] == 0 and _answered(gone) == {}
    assert _fetch(w, sid, 4)["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def _ends(w: Wire) -> dict[int, int]:
    return {p: a["high_watermark"] for p, a in _answered(_fetch(w, 0, -1, ALL)).items()}


def test_errors_are_always_sent_and_an_added_partition_is_sent_once(wire: Any) -> None:
    w, _, _ = wire
    end = _ends(w)
    sid = _fetch(w, 0, 0, [(0, end[0])])["session_id"]
    added = _fetch(w, sid, 1, [(1, end[1]), (PARTITIONS + 5, 0)])  # an existing partition and one that does not exist
    got = _answered(added)
    assert set(got) == {1, PARTITIONS + 5}
    assert got[PARTITIONS + 5]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    again = _answered(_fetch(w, sid, 2))
    assert set(again) == {PARTITIONS + 5}  # the error again; partition 1 had nothing new


def test_topic_ids_bind_a_session_to_its_versions(wire: Any) -> None:
    w, topic_id, _ = wire
    at_end = sorted(_ends(w).items())
    full = _fetch(w, 0, 0, at_end, version=13, topic_id=topic_id)
    sid = full["session_id"]
    assert sid > 0 and full["responses"][0]["topic_id"] == topic_id
    assert _fetch(w, sid, 1, version=12)["error_code"] == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    _produce(w, 3)
    inc = _fetch(w, sid, 1, version=13, topic_id=topic_id)
    assert inc["error_code"] == 0 and set(_answered(inc)) == {3} and inc["responses"][0]["topic_id"] == topic_id
    named = _fetch(w, 0, 0, ALL, version=12)["session_id"]
    assert _fetch(w, named, 1, version=13, topic_id=topic_id)["error_code"] == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    unknown = _fetch(w, 0, 0, [(0, 0)], version=13, topic_id=uuid.uuid4())
    assert _answered(unknown)[0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID


def test_a_session_holds_no_more_partitions_than_the_broker_could_serve(wire: Any) -> None:
    """At most max(1000, partitions hosted) partitions in one session: a full fetch naming more gets none, an
    incremental fetch that would grow past it closes its session (FETCH_SESSION_ID_NOT_FOUND)."""
    w, _, _ = wire
    many = [(p, 0) for p in range(1001)]
    assert _fetch(w, 0, 0, many, topic="nope")["session_id"] == 0
    sid = _fetch(w, 0, 0, many[:1000], topic="nope")["session_id"]
    assert sid > 0
    assert _fetch(w, sid, 1, [(1000, 0)], topic="nope")["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert _fetch(w, sid, 2)["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_a_follower_session_evicts_a_consumer_session_when_the_cache_is_full() -> None:
    """One slot: a consumer's session is taken by a follower's (privileged); the consumer's next incremental
    fetch is told FETCH_SESSION_ID_NOT_FOUND, and its full fetch then gets no session (a follower's session
    younger than two minutes is not evicted by a consumer's) but its data."""
    with rill.testing.broker(max_incremental_fetch_session_cache_slots=1) as b:
        w = Wire(b.bootstrap_servers)
        _create(w, TOPIC, 2)
        consumer = _fetch(w, 0, 0, [(0, 0), (1, 0)])["session_id"]
        assert consumer > 0
        assert _fetch(w, 0, 0, [(0, 0)])["session_id"] == 0  # a smaller consumer session evicts nothing young
        assert _fetch(w, consumer, 1)["error_code"] == 0
        follower = _fetch(w, 0, 0, [(0, 0)], replica_id=7)["session_id"]
        assert follower > 0
        assert _fetch(w, consumer, 2)["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        again = _fetch(w, 0, 0, [(0, 0), (1, 0)])
        assert again["error_code"] == 0 and again["session_id"] == 0 and set(_answered(again)) == {0, 1}
        assert _fetch(w, follower, 1, replica_id=7)["error_code"] == 0
        w.close()
    with rill.testing.broker(max_incremental_fetch_session_cache_slots=0) as b:
        w = Wire(b.bootstrap_servers)
        _create(w, TOPIC, 1)
        assert _fetch(w, 0, 0, [(0, 0)], replica_id=7)["session_id"] == 0
        w.close()


# -- the model -----------------------------------------------------------------------------------------------

_STEP = st.one_of(
    st.tuples(st.just("append"), st.integers(0, PARTITIONS - 1)),
    st.tuples(st.just("move"), st.integers(0, PARTITIONS - 1), st.integers(0, 3)),
    st.tuples(st.just("forget"), st.integers(0, PARTITIONS - 1)),
    st.tuples(st.just("add"), st.integers(0, PARTITIONS - 1), st.integers(0, 3)),
    st.tuples(st.just("fetch")),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=st.sets(st.integers(0, PARTITIONS - 1), min_size=1), steps=st.lists(_STEP, max_size=12))
def test_incremental_responses_hold_exactly_the_changed_partitions(wire: Any, start: set[int],
                                                                   steps: list[tuple[Any, ...]]) -> None:  # fmt: skip
    """The model: the session's partitions with the fetch offset last named and the high watermark last sent.
    After every step an incremental fetch names the partitions whose offset moved or that were added, and forgets
    those dropped; its response must hold exactly the partitions with records past their fetch offset or a high
    watermark other than the one last sent (those just added: always)."""
    w, _, _ = wire
    hw = _ends(w)
    offsets = {p: hw[p] for p in start}  # fetch offset of each partition in the session
    full = _fetch(w, 0, 0, [(p, offsets[p]) for p in sorted(start)])
    sid, epoch = full["session_id"], 1
    sent = {p: a["high_watermark"] for p, a in _answered(full).items()}
    assert sid > 0 and set(sent) == start
    for step in steps:
        named: list[Part] = []
        forgotten: list[int] = []
        if step[0] == "append":
            _produce(w, step[1])
            hw[step[1]] += 1
        elif step[0] in ("move", "add") and (step[1] in offsets) == (step[0] == "move"):
            offsets[step[1]] = min(hw[step[1]], max(0, hw[step[1]] - step[2]))
            named.append((step[1], offsets[step[1]]))
            if step[0] == "add":
                sent[step[1]] = -1
        elif step[0] == "forget" and step[1] in offsets and len(offsets) > 1:
            del offsets[step[1]], sent[step[1]]
            forgotten.append(step[1])
        expected = {p for p in offsets if offsets[p] < hw[p] or sent[p] != hw[p]}
        resp = _fetch(w, sid, epoch, named, forgotten)
        assert resp["error_code"] == 0 and resp["session_id"] == sid
        got = _answered(resp)
        assert set(got) == expected, (step, offsets, hw, sent)
        for p, a in got.items():
            assert a["high_watermark"] == hw[p]
            assert bool(a["records"]) == (offsets[p] < hw[p])
            sent[p] = hw[p]
        epoch += 1
    assert _fetch(w, sid, -1)["session_id"] == 0  # closed: the module's cache stays small
