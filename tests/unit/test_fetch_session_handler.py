"""The follower's side of a fetch session: what each request names and forgets, and how the session fields
move with the leader's answers."""

from __future__ import annotations

from rill.common import TopicPartition
from rill.errors import ErrorCode
from rill.replica.fetch_session_handler import FetchSessionHandler

A, B, C = (TopicPartition("t", i) for i in range(3))


def test_full_then_incremental_naming_only_what_changed() -> None:
    h = FetchSessionHandler()
    assert h.build({A: (0, 0), B: (5, 0)}) == ([A, B], []) and (h.session_id, h.epoch) == (0, 0)
    assert h.handle_response(ErrorCode.NO_ERROR, 77) and (h.session_id, h.epoch) == (77, 1)
    assert h.build({A: (0, 0), B: (5, 0)}) == ([], [])  # nothing moved
    assert h.handle_response(ErrorCode.NO_ERROR, 77) and h.epoch == 2
    assert h.build({A: (3, 0), C: (0, 0)}) == ([A, C], [B])  # A moved, C added, B no longer fetched
    assert h.handle_response(ErrorCode.NO_ERROR, 77) and h.epoch == 3


def test_a_full_answer_without_a_session_keeps_fetching_in_full() -> None:
    h = FetchSessionHandler()
    h.build({A: (0, 0)})
    assert h.handle_response(ErrorCode.NO_ERROR, 0) and h.is_full
    assert h.build({A: (0, 0)}) == ([A], [])


def test_session_errors_and_lost_answers_start_again_with_a_full_fetch() -> None:
    h = FetchSessionHandler()
    h.build({A: (0, 0)})
    h.handle_response(ErrorCode.NO_ERROR, 9)
    h.build({A: (1, 0)})
    assert not h.handle_response(ErrorCode.INVALID_FETCH_SESSION_EPOCH, 9)
    assert (h.session_id, h.epoch) == (9, 0)  # the full fetch names the session, so the leader drops it
    assert h.build({A: (1, 0)}) == ([A], [])
    h.handle_response(ErrorCode.NO_ERROR, 10)
    h.build({A: (2, 0)})
    assert not h.handle_response(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
    assert (h.session_id, h.epoch) == (0, 0)
    h.build({A: (2, 0)})
    h.handle_response(ErrorCode.NO_ERROR, 11)
    h.build({A: (2, 0)})
    h.handle_error()  # the request failed: what the leader holds is unknown
    assert h.is_full and h.session_id == 11


def test_the_epoch_wraps_to_one() -> None:
    h = FetchSessionHandler()
    h.build({A: (0, 0)})
    h.handle_response(ErrorCode.NO_ERROR, 5)
    h.epoch = 0x7FFFFFFF
    h.build({A: (0, 0)})
    h.handle_response(ErrorCode.NO_ERROR, 5)
    assert h.epoch == 1
