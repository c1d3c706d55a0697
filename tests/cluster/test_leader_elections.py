"""Preferred leader election: asked for with ElectLeaders (confluent-kafka's AdminClient.elect_leaders), and
done by the controller by itself when a broker leads too few of its preferred partitions."""

from __future__ import annotations

import pytest
from confluent_kafka import ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.cluster._helpers import read_all
from tests.integration.broker._wire import Wire

from rill.protocol import ApiKey
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


def test_every_broker_follows_leader_moves_of_single_partitions() -> None:
    """Each broker reads only the state of a partition whose leader moved (not its whole topic): every broker
    answers the new leaders of the partitions moved and the old leader of the others, and produces reach them."""
    with cluster(3, auto_leader_rebalance_enable="false") as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([NewTopic("many", 12, replica_assignment=[[0, 1, 2]] * 12)])["many"].result(30)
        moved = {4: 1, 9: 2}
        w = Wire(c.broker(0).bootstrap_servers)
        try:  # the preferred replica of two partitions changes (the replicas stay): then a preferred election
            body = {"timeout_ms": 30000, "topics": [{"name": "many", "partitions": [
                {"partition_index": p, "replicas": [b, *(r for r in (0, 1, 2) if r != b)]}
                for p, b in moved.items()]}]}  # fmt: skip
            resp = w.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body)
            assert all(p["error_code"] == 0 for p in resp["responses"][0]["partitions"]), resp
        finally:
            w.close()
        tps = [TopicPartition("many", p) for p in moved]
        result = admin.elect_leaders(ElectionType.PREFERRED, tps).result(30)
        assert all(e is None for e in result.values()), result
        wanted = {p: moved.get(p, 0) for p in range(12)}

        def every_broker_knows() -> bool:
            views = [AdminClient({"bootstrap.servers": c.broker(b).bootstrap_servers}).list_topics("many", timeout=10)
                     for b in c.brokers]  # fmt: skip
            return all({p: m.leader for p, m in v.topics["many"].partitions.items()} == wanted for v in views)

        c.wait_for(every_broker_knows, 20, "every broker's view of the moved leaders")
        producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all"})
        for p in (0, 4, 9):
            producer.produce("many", value=b"v%d" % p, partition=p)
        assert producer.flush(30) == 0
        got = read_all(c, "many", 12, 3)
        assert {p: [v for _, v in got[p]] for p in (0, 4, 9)} == {p: [b"v%d" % p] for p in (0, 4, 9)}
