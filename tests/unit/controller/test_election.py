"""The controller's election rule (a pure function) and Kafka's replica placement."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from rill.controller.election import elect
from rill.metadata import zk_layout as zl
from rill.metadata.placement import assign_replicas, rack_alternated
from rill.metadata.store import BrokerInfo

REPLICAS = (1, 2, 3)


def _state(leader: int, epoch: int, isr: tuple[int, ...]) -> zl.LeaderAndIsr:
    return zl.LeaderAndIsr(leader, epoch, isr, 1, 5)


def test_a_new_partition_takes_its_first_live_replica() -> None:
    new, why = elect(REPLICAS, None, {2, 3}, 7, False) or (None, "")
    assert new == zl.LeaderAndIsr(2, 0, (2, 3), 7) and why == "new partition"


def test_a_new_partition_without_a_live_replica_waits_for_one() -> None:
    assert elect(REPLICAS, None, {4}, 7, False) is None  # no state: nothing stored that no one could leave
    # A state stored leaderless with an empty ISR (nothing was ever committed) starts like a new partition.
    new, why = elect(REPLICAS, _state(-1, 0, ()), {3}, 7, False) or (None, "")
    assert new == zl.LeaderAndIsr(3, 1, (3,), 7) and why == "new partition"


def test_a_dead_leader_is_replaced_by_the_first_live_isr_member_in_assignment_order() -> None:
    new, _ = elect(REPLICAS, _state(1, 4, (3, 1, 2)), {2, 3}, 7, False) or (None, "")
    assert new is not None and (new.leader, new.leader_epoch, new.isr) == (2, 5, (3, 2))


def test_a_live_replica_outside_the_isr_never_leads_without_unclean_election() -> None:
    current = _state(1, 4, (1,))
    offline, why = elect(REPLICAS, current, {2, 3}, 7, False) or (None, "")
    assert offline is not None and offline.leader == -1 and offline.isr == (1,) and "no ISR member" in why
    assert elect(REPLICAS, zl.LeaderAndIsr(-1, 5, (1,), 7, 6), {2, 3}, 7, False) is None  # stays offline
    back, _ = elect(REPLICAS, zl.LeaderAndIsr(-1, 5, (1,), 7, 6), {1, 2}, 7, False) or (None, "")
    assert back is not None and (back.leader, back.leader_epoch) == (1, 6)  # the ISR member returns


def test_unclean_election_takes_a_live_replica() -> None:
    new, why = elect(REPLICAS, _state(1, 4, (1,)), {3}, 7, True) or (None, "")
    assert new is not None and (new.leader, new.isr) == (3, (3,)) and "unclean" in why


def test_dead_followers_leave_the_isr_and_the_leader_stays() -> None:
    new, _ = elect(REPLICAS, _state(1, 4, (1, 2, 3)), {1, 2}, 7, False) or (None, "")
    assert new is not None and (new.leader, new.leader_epoch, new.isr) == (1, 4, (1, 2))
    assert elect(REPLICAS, _state(1, 4, (1, 2)), {1, 2, 3}, 7, False) is None


@given(live=st.sets(st.sampled_from(REPLICAS)), isr=st.lists(st.sampled_from(REPLICAS), min_size=1, unique=True),
       index=st.integers(0, 2))  # fmt: skip
def test_a_clean_election_never_picks_a_replica_outside_the_isr(live: set[int], isr: list[int], index: int) -> None:
    leader = isr[index % len(isr)]  # a leader is in its ISR
    result = elect(REPLICAS, _state(leader, 3, tuple(isr)), live, 7, False)
    if result is not None:
        new = result[0]
        assert new.leader == -1 or (new.leader in isr and new.leader in live)
        assert set(new.isr) <= set(isr)
        assert new.leader_epoch >= 3


def _brokers(n: int, racks: int = 0) -> list[BrokerInfo]:
    return [BrokerInfo(i, "h", 9000 + i, f"r{i % racks}" if racks else None) for i in range(n)]


def test_placement_spreads_leaders_and_replicas() -> None:
    parts = assign_replicas(_brokers(3), 30, 3, random.Random(1))
    assert all(len(set(r)) == 3 for r in parts.values())
    assert Counter(r[0] for r in parts.values()) == {0: 10, 1: 10, 2: 10}


def test_placement_is_rack_aware() -> None:
    brokers = _brokers(6, racks=3)
    assert rack_alternated(brokers) == [0, 1, 2, 3, 4, 5]
    for replicas in assign_replicas(brokers, 24, 3, random.Random(2)).values():
        assert len({brokers[r].rack for r in replicas}) == 3


def test_znode_payloads_round_trip() -> None:
    broker = BrokerInfo(3, "10.0.0.3", 9093, "r1", (("PLAINTEXT", "10.0.0.3", 9093, "PLAINTEXT"),))
    assert zl.decode_broker(3, zl.encode_broker(broker)) == broker
    secured = BrokerInfo(3, "10.0.0.3", 9093, "r1", (("INTERNAL", "10.0.0.3", 9093, "SSL"),
                                                     ("EXTERNAL", "a.example", 19093, "SASL_SSL")))  # fmt: skip
    assert zl.decode_broker(3, zl.encode_broker(secured)) == secured
    state = zl.LeaderAndIsr(2, 9, (2, 1), 4)
    assert zl.decode_state(zl.encode_state(state), 11) == zl.LeaderAndIsr(2, 9, (2, 1), 4, 11)
    assignment = zl.Assignment(__import__("uuid").uuid4(), {0: (1, 2), 1: (2, 1)})
    assert zl.decode_assignment(zl.encode_assignment(assignment)) == assignment
    assert zl.decode_configs(zl.encode_configs({"retention.ms": "5"})) == {"retention.ms": "5"}
