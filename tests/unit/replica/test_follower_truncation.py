"""A follower's truncation against its leader, on two real logs (files on disk): the leader's OffsetForLeaderEpoch
answer is what its epoch cache gives (as the handler answers it), the follower cuts its log where
``truncation_target`` says, then copies the leader's batches from there as a fetch would. Afterwards both logs
hold the same records and the same leader epochs (KIP-101/279)."""

from __future__ import annotations

from pathlib import Path

from tests.unit.log.logtest_util import make_batch, open_log

from rill.log.log import Log
from rill.replica.replica_fetcher import truncation_target


def _replicate(leader: Log, follower: Log) -> None:
    """One round of the follower's truncation, then fetches until it has the leader's log."""
    cache = follower.leader_epoch_cache
    asked = cache.latest_epoch if cache.latest_epoch >= 0 else 0
    done = False
    while not done:
        epoch, end = leader.leader_epoch_cache.end_offset_for(asked, leader.log_end_offset)
        target, done = truncation_target(follower, asked, epoch, end)
        follower.truncate_to(target)
        asked = cache.latest_epoch if cache.latest_epoch >= 0 else 0
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(leader.read_bytes(follower.log_end_offset, 1 << 20))


def test_an_epoch_begun_without_records_goes_when_the_truncation_is_a_no_op(tmp_path: Path) -> None:
    """The follower led epoch 2 from offset 10 and wrote nothing; the leader, elected unclean at epoch 3, has
    epoch 1 records up to 15. Its answer (epoch 1 ends at 15) cuts nothing from the follower's log, which ends at
    10 -- but the follower's epoch 2 entry must go: kept, it would claim the epoch 1 records fetched next (10 to
    14) for epoch 2, and as leader this replica would answer a broker that wrote records of its own at epoch 2
    from offset 10 that epoch 2 ends at 15, so that broker would keep its divergent records."""
    leader = open_log(tmp_path / "leader" / "t-0")
    follower = open_log(tmp_path / "follower" / "t-0")
    try:
        for plog in (leader, follower):
            plog.append(make_batch(5, tag=0), leader_epoch=0)
            plog.append(make_batch(5, tag=1), leader_epoch=1)
        leader.append(make_batch(5, tag=2), leader_epoch=1)
        follower.leader_epoch_cache.assign(2, follower.log_end_offset)  # made leader of epoch 2, wrote nothing
        leader.leader_epoch_cache.assign(3, leader.log_end_offset)
        leader.append(make_batch(2, tag=3), leader_epoch=3)
        assert follower.leader_epoch_cache.entries == [(0, 0), (1, 5), (2, 10)]

        _replicate(leader, follower)

        assert follower.log_end_offset == leader.log_end_offset == 17
        assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries == [(0, 0), (1, 5), (3, 15)]
        assert follower.leader_epoch_cache.end_offset_for(0, follower.log_end_offset) == (0, 5)
        # the checkpoint on disk says the same
        again = open_log(tmp_path / "follower" / "t-0")
        try:
            assert again.leader_epoch_cache.entries == [(0, 0), (1, 5), (3, 15)]
        finally:
            again.close()
    finally:
        leader.close()
        follower.close()


def test_the_follower_cuts_its_own_later_epoch_records(tmp_path: Path) -> None:
    """The usual case: records the follower wrote as leader at an epoch the new leader never had are dropped."""
    leader = open_log(tmp_path / "leader" / "t-0")
    follower = open_log(tmp_path / "follower" / "t-0")
    try:
        for plog in (leader, follower):
            plog.append(make_batch(4, tag=0), leader_epoch=0)
        follower.append(make_batch(3, tag=9), leader_epoch=1)  # never replicated
        leader.leader_epoch_cache.assign(2, leader.log_end_offset)
        leader.append(make_batch(2, tag=5), leader_epoch=2)

        _replicate(leader, follower)

        assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries == [(0, 0), (2, 4)]
        assert follower.read_bytes(0, 1 << 20) == leader.read_bytes(0, 1 << 20)
    finally:
        leader.close()
        follower.close()


def test_an_answer_of_no_such_epoch_keeps_what_the_follower_knows_committed(tmp_path: Path) -> None:
    """A leader that knows no such epoch answers -1: the follower keeps its log up to its high watermark and
    fetches the rest again (Kafka's rule), rather than keeping records the leader may not have."""
    follower = open_log(tmp_path / "follower" / "t-0")
    try:
        follower.append(make_batch(6, tag=0), leader_epoch=4)
        follower.high_watermark = 4
        assert truncation_target(follower, 4, -1, -1) == (4, True)
    finally:
        follower.close()
