"""Preferred leader election: asked for with ElectLeaders (confluent-kafka's AdminClient.elect_leaders), and
done by the controller by itself when a broker leads too few of its preferred partitions."""

from __future__ import annotations

import pytest
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from rill.testing.cluster import cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _move_leadership_off(c: object, broker: int, topic: str) -> None:
    """Stop ``broker`` (controlled: its partitions' leadership moves) and start it again; once it is back in
    the ISR it is a follower of partitions it prefers to lead."""
    c.stop(broker)  # type: ignore[attr-defined]
    c.start(broker)  # type: ignore[attr-defined]
    c.wait_for(lambda: broker in c.isr(topic, 0), 30, f"broker {broker} back in the ISR")  # type: ignore[attr-defined]


def test_elect_leaders_moves_leadership_back_to_the_preferred_replica() -> None:
    with cluster(3, auto_leader_rebalance_enable="false") as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([NewTopic("pref", 1, replica_assignment=[[0, 1, 2]])])["pref"].result(30)
        assert c.leader("pref", 0) == 0
        _move_leadership_off(c, 0, "pref")
        assert c.leader("pref", 0) != 0
        tp = TopicPartition("pref", 0)
        result = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(30)
        assert result[tp] is None, result
        assert c.leader("pref", 0) == 0

        def every_broker_knows() -> bool:  # each broker learns the new leader from ZooKeeper, a moment apart
            views = [AdminClient({"bootstrap.servers": c.broker(b).bootstrap_servers}).list_topics("pref", timeout=10)
                     for b in c.brokers]  # fmt: skip
            return all(v.topics["pref"].partitions[0].leader == 0 for v in views)

        c.wait_for(every_broker_knows, 10, "every broker's view of the new leader")
        again = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(30)  # already the preferred leader
        assert again[tp] is not None and again[tp].name() == "ELECTION_NOT_NEEDED", again


def test_the_controller_rebalances_leadership_by_itself() -> None:
    with cluster(3, leader_imbalance_check_interval_seconds="1") as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([NewTopic("auto", 1, replica_assignment=[[1, 2, 0]])])["auto"].result(30)
        _move_leadership_off(c, 1, "auto")
        c.wait_for(lambda: c.leader("auto", 0) == 1, 20, "leadership back on the preferred replica")
