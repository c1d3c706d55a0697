"""A fetcher's side of an incremental fetch session (KIP-227), after Kafka's FetchSessionHandler.

The first fetch from a leader is a full one (session epoch 0: every partition, with its parameters); if the
leader's response carries a session id, the next fetches are incremental (epochs 1, 2, ...) and name only the
partitions whose parameters (fetch offset, log start offset, leader epoch, byte limit) changed or that are new,
and forget those no longer fetched. A response then holds only the partitions with something new: one left out
had nothing new, so the fetcher leaves it as it is. Any session error, or a request whose answer never came, makes
the next fetch a full one again (naming the session, so the leader drops it: epoch 0 with its id), except
FETCH_SESSION_ID_NOT_FOUND, after which the next full fetch names no session.
"""

from __future__ import annotations

from collections.abc import Mapping

from rill.common import TopicPartition
from rill.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
MAX_EPOCH = 0x7FFFFFFF


class FetchSessionHandler:
    """The session a fetcher holds with one leader: what its next request is, and what the leader holds."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._held: dict[TopicPartition, tuple[int, ...]] = {}  # each partition's parameters as the leader holds them
        self.full_fetches = 0
        self.incremental_fetches = 0

    @property
    def is_full(self) -> bool:
        return self.epoch == INITIAL_EPOCH

    def build(
        self, wanted: Mapping[TopicPartition, tuple[int, ...]]
    ) -> tuple[list[TopicPartition], list[TopicPartition]]:
        """The partitions the next request names, and those it forgets, given each partition to fetch with its
        parameters. The request carries ``session_id`` and ``epoch`` as they are now."""
        if self.is_full:
            self._held = dict(wanted)
            self.full_fetches += 1
            return list(wanted), []
        held = self._held
        named = [k for k, params in wanted.items() if held.get(k) != params]
        forgotten = [k for k in held if k not in wanted]
        self._held = dict(wanted)
        self.incremental_fetches += 1
        return named, forgotten

    def handle_response(self, error_code: int, session_id: int) -> bool:
        """Take the response's session fields; False when its partitions are not to be used (a session error)."""
        if error_code != ErrorCode.NO_ERROR:
            if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH
            return False
        if self.is_full:
            self.session_id = session_id
            self.epoch = INITIAL_EPOCH if session_id == INVALID_SESSION_ID else 1
        elif session_id == INVALID_SESSION_ID:  # the leader closed the session
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        else:
            self.epoch = 1 if self.epoch == MAX_EPOCH else self.epoch + 1
        return True

    def handle_error(self) -> None:
        """The request failed or its answer was dropped: what the leader holds is unknown; start again."""
        self.epoch = INITIAL_EPOCH
