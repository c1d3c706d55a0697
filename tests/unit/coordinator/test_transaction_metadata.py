"""The transaction state machine: Kafka's transitions, prepared then completed, refused ones changing nothing."""

from __future__ import annotations

import pytest

from rill.common import TopicPartition
from rill.coordinator.transaction.transaction_metadata import (
    MAX_EPOCH,
    VALID_PREVIOUS,
    IllegalTransition,
    TransactionMetadata,
    TransactionState,
)

S = TransactionState
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def _new(epoch: int = -1, state: TransactionState = S.EMPTY) -> TransactionMetadata:
    return TransactionMetadata("tx", 7, -1, epoch, -1, 60000, state)


def _apply(md: TransactionMetadata, transit: object) -> None:
    md.complete_transition_to(transit)  # type: ignore[arg-type]


def test_state_ids_and_names_are_kafkas() -> None:
    assert [(s.id, s.display) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
        (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence"),
    ]  # fmt: skip
    assert S.from_name("Ongoing") is S.ONGOING and S.from_name("ongoing") is None


def test_a_commit_goes_through_every_state() -> None:
    md = _new()
    _apply(md, md.prepare_increment_producer_epoch(60000, None, 1000))
    assert (md.state, md.producer_epoch, md.last_producer_epoch) == (S.EMPTY, 0, -1)
    _apply(md, md.prepare_add_partitions({TP0}, 2000))
    assert md.state == S.ONGOING and md.partitions == {TP0} and md.txn_start_ms == 2000
    _apply(md, md.prepare_add_partitions({TP1}, 3000))
    assert md.partitions == {TP0, TP1} and md.txn_start_ms == 2000 and md.txn_last_update_ms == 3000
    _apply(md, md.prepare_abort_or_commit(S.PREPARE_COMMIT, 4000))
    assert md.state == S.PREPARE_COMMIT and md.partitions == {TP0, TP1}
    _apply(md, md.prepare_complete(5000))
    assert md.state == S.COMPLETE_COMMIT and md.partitions == set()
    # the next transaction starts anew
    _apply(md, md.prepare_add_partitions({TP1}, 6000))
    assert md.txn_start_ms == 6000


def test_a_prepared_transition_changes_nothing_until_completed() -> None:
    md = _new(epoch=3, state=S.EMPTY)
    transit = md.prepare_add_partitions({TP0}, 2000)
    assert md.pending_state == S.ONGOING and md.state == S.EMPTY and md.partitions == set()
    with pytest.raises(IllegalTransition):  # one transition at a time
        md.prepare_add_partitions({TP1}, 2001)
    md.abort_pending()  # the write failed
    assert md.pending_state is None and md.state == S.EMPTY and md.partitions == set()
    _apply(md, md.prepare_add_partitions({TP0}, 2002))
    assert md.state == S.ONGOING
    with pytest.raises(IllegalTransition):  # completing something that is not pending
        md.complete_transition_to(transit)


@pytest.mark.parametrize("target", list(S))
def test_only_kafkas_previous_states_lead_to_each_state(target: TransactionState) -> None:
    for state in S:
        md = _new(epoch=1, state=state)
        transit = md._transit(target, now_ms=1) if state in VALID_PREVIOUS[target] else None
        if transit is None:
            with pytest.raises(IllegalTransition):
                md._transit(target, now_ms=1)
            assert md.pending_state is None
        else:
            md.complete_transition_to(transit)
            assert md.state == target


def test_epoch_bump_and_kip_360() -> None:
    md = _new(epoch=4)
    # a new instance: bump, last epoch forgotten
    _apply(md, md.prepare_increment_producer_epoch(60000, None, 1))
    assert (md.producer_epoch, md.last_producer_epoch) == (5, -1)
    # KIP-360: the producer gives its current epoch: bumped, the old one remembered
    _apply(md, md.prepare_increment_producer_epoch(60000, 5, 2))
    assert (md.producer_epoch, md.last_producer_epoch) == (6, 5)
    # a retry of that call (the response was lost): the same epoch again, not bumped twice
    _apply(md, md.prepare_increment_producer_epoch(60000, 5, 3))
    assert (md.producer_epoch, md.last_producer_epoch) == (6, 5)
    # any other epoch is fenced, and nothing is prepared
    assert md.prepare_increment_producer_epoch(60000, 2, 4) is None
    assert md.pending_state is None


def test_epoch_exhaustion_rotates_the_producer_id() -> None:
    md = _new(epoch=MAX_EPOCH - 1)
    assert md.is_producer_epoch_exhausted
    with pytest.raises(IllegalTransition):
        md.prepare_increment_producer_epoch(60000, None, 1)
    _apply(md, md.prepare_producer_id_rotation(8, 60000, 1, record_last_epoch=True))
    assert (md.producer_id, md.producer_epoch, md.previous_producer_id, md.last_producer_epoch) == (
        8, 0, 7, MAX_EPOCH - 1,
    )  # fmt: skip


def test_fencing_an_open_transaction_bumps_the_epoch_once() -> None:
    md = _new(epoch=2, state=S.EMPTY)
    _apply(md, md.prepare_add_partitions({TP0}, 1))
    fence = md.prepare_fence_producer_epoch(2)
    assert fence.state == S.PREPARE_EPOCH_FENCE and fence.producer_epoch == 3 and md.producer_epoch == 2
    abort = md.prepare_abort_or_commit(S.PREPARE_ABORT, 3, fenced_epoch=fence.producer_epoch)
    assert abort.producer_epoch == 3 and md.producer_epoch == 3  # the old instance is fenced at once
    md.abort_pending()  # the PrepareAbort write failed
    assert md.has_failed_epoch_fence and md.state == S.ONGOING
    again = md.prepare_fence_producer_epoch(4)
    assert again.producer_epoch == 3  # not bumped a second time
    _apply(md, md.prepare_abort_or_commit(S.PREPARE_ABORT, 5, fenced_epoch=again.producer_epoch))
    assert md.state == S.PREPARE_ABORT and md.producer_epoch == 3
    _apply(md, md.prepare_complete(6))
    assert md.state == S.COMPLETE_ABORT and not md.has_failed_epoch_fence


def test_an_id_can_expire_only_when_no_transaction_is_open() -> None:
    md = _new(epoch=0, state=S.ONGOING)
    with pytest.raises(IllegalTransition):
        md.prepare_dead(1)
    md = _new(epoch=0, state=S.COMPLETE_ABORT)
    _apply(md, md.prepare_dead(1))
    assert md.state == S.DEAD
