"""A transactional id's state at its coordinator, and Kafka's state machine over it.

A change is made in two steps, as Kafka's TransactionMetadata does: ``prepare_*`` checks the transition and
returns the state to be (a ``TxnTransitMetadata``) with ``pending_state`` set, changing nothing else; once the
record of that state is in ``__transaction_state`` (acknowledged by the ISR), ``complete_transition_to``
applies it. While a transition is pending, every other request on the id is answered CONCURRENT_TRANSACTIONS.
A refused or failed write clears ``pending_state`` (``abort_pending``) and leaves the state as it was.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from rill.common import TopicPartition

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 0x7FFF  # Short.MAX_VALUE


class TransactionState(enum.Enum):
    """The states and their ids in the log (TransactionLogValue.TransactionStatus)."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def display(self) -> str:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        for s in cls:
            if s.id == state_id:
                return s
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        for s in cls:
            if s.display == name:
                return s
        return None


S = TransactionState

VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
"""Kafka's valid previous states of each state."""


class IllegalTransition(Exception):
    """A transition the state machine does not allow (a coordinator bug, never a client's doing)."""


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The state a transition leads to: what is written to the log and applied once written."""

    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    txn_start_ms: int
    txn_last_update_ms: int


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_ms: int = -1
    txn_last_update_ms: int = -1
    pending_state: TransactionState | None = None
    has_failed_epoch_fence: bool = False
    fence_in_flight: bool = False

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_EPOCH - 1

    def _transit(
        self,
        state: TransactionState,
        *,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        last_producer_epoch: int | None = None,
        txn_timeout_ms: int | None = None,
        partitions: frozenset[TopicPartition] | None = None,
        txn_start_ms: int | None = None,
        now_ms: int,
    ) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransition(
                f"{self.transactional_id}: a transition to {self.pending_state.display} is already pending"
            )
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(
                f"{self.transactional_id}: no transition from {self.state.display} to {state.display}"
            )
        new_pid = self.producer_id if producer_id is None else producer_id
        transit = TxnTransitMetadata(
            producer_id=new_pid,
            previous_producer_id=self.producer_id if new_pid != self.producer_id else self.previous_producer_id,
            producer_epoch=self.producer_epoch if producer_epoch is None else producer_epoch,
            last_producer_epoch=self.last_producer_epoch if last_producer_epoch is None else last_producer_epoch,
            txn_timeout_ms=self.txn_timeout_ms if txn_timeout_ms is None else txn_timeout_ms,
            state=state,
            partitions=frozenset(self.partitions) if partitions is None else partitions,
            txn_start_ms=self.txn_start_ms if txn_start_ms is None else txn_start_ms,
            txn_last_update_ms=now_ms,
        )
        self.pending_state = state
        return transit

    # -- the transitions -------------------------------------------------------------------------------

    def prepare_increment_producer_epoch(
        self, txn_timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransitMetadata | None:
        """InitProducerId on an id with no transaction open: the next epoch (or, KIP-360, the current one
        again for a retry of a bump that succeeded). None when the expected epoch is fenced."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransition(f"{self.transactional_id}: epoch {self.producer_epoch} is exhausted")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._transit(
            S.EMPTY,
            producer_epoch=epoch,
            last_producer_epoch=last,
            txn_timeout_ms=txn_timeout_ms,
            partitions=frozenset(),
            txn_start_ms=-1,
            now_ms=now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, txn_timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransitMetadata:
        """The epoch is exhausted: a new producer id at epoch 0."""
        return self._transit(
            S.EMPTY,
            producer_id=new_producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=txn_timeout_ms,
            partitions=frozenset(),
            txn_start_ms=-1,
            now_ms=now_ms,
        )

    def prepare_fence_producer_epoch(self, now_ms: int) -> TxnTransitMetadata:
        """Fence the producer of an open transaction (a new instance, or its timeout) before aborting it:
        the epoch goes up by one (not again after a fence whose write failed)."""
        if self.producer_epoch >= MAX_EPOCH:
            raise IllegalTransition(f"{self.transactional_id}: cannot fence epoch {self.producer_epoch}")
        epoch = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._transit(
            S.PREPARE_EPOCH_FENCE, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH, now_ms=now_ms
        )

    def prepare_add_partitions(self, added: set[TopicPartition], now_ms: int) -> TxnTransitMetadata:
        start = now_ms if self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) else self.txn_start_ms
        return self._transit(
            S.ONGOING, partitions=frozenset(self.partitions | added), txn_start_ms=start, now_ms=now_ms
        )

    def prepare_abort_or_commit(
        self, state: TransactionState, now_ms: int, *, fenced_epoch: int | None = None
    ) -> TxnTransitMetadata:
        """Ongoing -> PrepareCommit / PrepareAbort; ``fenced_epoch`` is the epoch a pending fence took
        (which the PrepareAbort record carries)."""
        if fenced_epoch is not None:
            # Kafka's endTransaction after prepareFenceProducerEpoch: the fence's epoch is taken at once (an
            # older epoch is fenced from now on, even if the write fails), and the abort carries it.
            self.pending_state = None
            self.producer_epoch = fenced_epoch
            self.last_producer_epoch = NO_PRODUCER_EPOCH
            self.fence_in_flight = True
        return self._transit(state, now_ms=now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self._transit(state, partitions=frozenset(), now_ms=now_ms)

    def prepare_dead(self, now_ms: int) -> TxnTransitMetadata:
        return self._transit(S.DEAD, partitions=frozenset(), now_ms=now_ms)

    # -- applying ----------------------------------------------------------------------------------------

    def complete_transition_to(self, transit: TxnTransitMetadata) -> None:
        """Apply a transition whose record is in the log."""
        if self.pending_state != transit.state:
            raise IllegalTransition(
                f"{self.transactional_id}: completing {transit.state.display}, but "
                f"{self.pending_state.display if self.pending_state else 'nothing'} is pending"
            )
        if self.state not in VALID_PREVIOUS[transit.state]:
            raise IllegalTransition(
                f"{self.transactional_id}: no transition from {self.state.display} to {transit.state.display}"
            )
        if transit.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            self.has_failed_epoch_fence = False
        self.fence_in_flight = False
        self.producer_id = transit.producer_id
        self.previous_producer_id = transit.previous_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.txn_start_ms = transit.txn_start_ms
        self.txn_last_update_ms = transit.txn_last_update_ms
        self.pending_state = None

    def abort_pending(self) -> None:
        """The write of a prepared transition failed: nothing changes (a failed fence is remembered so
        that its retry does not bump the epoch twice)."""
        if self.fence_in_flight:
            self.has_failed_epoch_fence = True
        self.fence_in_flight = False
        self.pending_state = None

    @classmethod
    def from_transit(cls, transactional_id: str, transit: TxnTransitMetadata) -> TransactionMetadata:
        """The state a loaded record describes."""
        return cls(
            transactional_id=transactional_id,
            producer_id=transit.producer_id,
            previous_producer_id=transit.previous_producer_id,
            producer_epoch=transit.producer_epoch,
            last_producer_epoch=transit.last_producer_epoch,
            txn_timeout_ms=transit.txn_timeout_ms,
            state=transit.state,
            partitions=set(transit.partitions),
            txn_start_ms=transit.txn_start_ms,
            txn_last_update_ms=transit.txn_last_update_ms,
        )
