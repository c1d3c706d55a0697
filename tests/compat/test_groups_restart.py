"""Committed offsets and static memberships live in ``__consumer_offsets``: they survive a broker restart,
clean (SIGTERM-style stop) or not (SIGKILL of the broker process)."""

from __future__ import annotations

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient
from tests.compat._groups import (
    BROKER_CONFIGS,
    assignment_of,
    consumer_config,
    create_topic,
    poll_all,
    produce,
    read_to_end,
)

import rill.testing

PARTITIONS = 4


def _describe(bs: str, group: str) -> object:
    admin = AdminClient({"bootstrap.servers": bs})
    return admin.describe_consumer_groups([group])[group].result(15)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kill", [False, True], ids=["clean", "sigkill"])
def test_offsets_and_static_members_survive_restart(kill: bool) -> None:
    with rill.testing.broker(BROKER_CONFIGS, subprocess=True) as b:
        bs = b.bootstrap_servers
        create_topic(bs, "ledger", PARTITIONS)
        produce(bs, "ledger", 80, PARTITIONS)
        config = consumer_config(bs, "g-durable", group_instance_id="worker-1", session_timeout_ms=30000)
        consumer = ck.Consumer(config)
        consumer.subscribe(["ledger"])
        seen: list[bytes] = []
        expected: dict[int, int] = {}

        def process(c: ck.Consumer, msg: ck.Message) -> None:
            seen.append(msg.value())
            if len(seen) <= 50:
                c.commit(message=msg, asynchronous=False)
                expected[msg.partition()] = msg.offset() + 1

        assert poll_all([consumer], lambda: len(seen) >= 80, 30, process)
        committed = {
            tp.partition: tp.offset
            for tp in consumer.committed([ck.TopicPartition("ledger", p) for p in range(PARTITIONS)], timeout=10)
        }
        assert {p: o for p, o in committed.items() if o >= 0} == expected
        assigned = assignment_of(consumer)
        consumer.close()  # a static member stays in the group after close

        b.restart(kill=kill)

        group = _describe(bs, "g-durable")
        assert [m.group_instance_id for m in group.members] == ["worker-1"]
        probe = ck.Consumer(consumer_config(bs, "g-durable"))
        after = {
            tp.partition: tp.offset
            for tp in probe.committed([ck.TopicPartition("ledger", p) for p in range(PARTITIONS)], timeout=10)
        }
        probe.close()
        assert after == committed

        # New records after the restart (they also move the high watermark past the recovered records).
        fresh = produce(bs, "ledger", PARTITIONS, PARTITIONS, start=1000)

        # The static member comes back within its session timeout: same assignment, resumes at the commits.
        consumer = ck.Consumer(config)
        consumer.subscribe(["ledger"])
        resumed: list[bytes] = []
        assert poll_all([consumer], lambda: len(resumed) >= 34, 30, lambda _c, m: resumed.append(m.value()))
        # a record delivered twice would come before the consumer reaches the end of every partition
        assert poll_all([consumer], lambda: read_to_end(consumer, "ledger", PARTITIONS), 30,
                        lambda _c, m: resumed.append(m.value()))  # fmt: skip
        assert assignment_of(consumer) == assigned
        assert sorted(resumed) == sorted(seen[50:] + fresh)  # exactly the records past the commits
        consumer.close()


@pytest.mark.timeout(120)
def test_deleting_a_topic_removes_the_offsets_groups_committed_for_it() -> None:
    """As in Kafka, a deleted topic's committed offsets go with it (tombstoned, so a restart does not bring
    them back): a topic created again under the same name starts with no committed offsets, and a group
    whose only offsets were the deleted topic's is gone."""
    with rill.testing.broker(BROKER_CONFIGS, subprocess=True) as b:
        bs = b.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        create_topic(bs, "x", 2)
        create_topic(bs, "y", 1)
        both = [ck.TopicPartition("x", 0, 5), ck.TopicPartition("x", 1, 6), ck.TopicPartition("y", 0, 7)]
        for group, offsets in (("g-both", both), ("g-only-x", both[:2])):
            consumer = ck.Consumer(consumer_config(bs, group))
            consumer.commit(offsets=offsets, asynchronous=False)
            consumer.close()

        def committed(group: str) -> list[tuple[str, int, int]]:
            request = [ck.ConsumerGroupTopicPartitions(group)]
            result = admin.list_consumer_group_offsets(request)[group].result(15)
            return sorted((tp.topic, tp.partition, tp.offset) for tp in result.topic_partitions)

        assert committed("g-both") == [("x", 0, 5), ("x", 1, 6), ("y", 0, 7)]
        admin.delete_topics(["x"], operation_timeout=10)["x"].result(15)
        assert committed("g-both") == [("y", 0, 7)]
        groups = {g.group_id for g in admin.list_consumer_groups().result(15).valid}
        assert "g-both" in groups and "g-only-x" not in groups
        create_topic(bs, "x", 2)
        consumer = ck.Consumer(consumer_config(bs, "g-both"))
        assert [tp.offset for tp in consumer.committed([ck.TopicPartition("x", 0)], timeout=15)] == [
            ck.OFFSET_INVALID
        ]
        consumer.close()

        b.restart(kill=True)
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        assert committed("g-both") == [("y", 0, 7)]
        assert "g-only-x" not in {g.group_id for g in admin.list_consumer_groups().result(15).valid}


@pytest.mark.timeout(120)
def test_groups_use_the_partitions_a_hand_made_offsets_topic_has() -> None:
    """``__consumer_offsets`` created by hand, with fewer partitions than ``offsets.topic.num.partitions``:
    as in Kafka, groups map onto the partitions the topic has, so every group can commit, and the offsets are
    read back after a restart."""
    with rill.testing.broker(BROKER_CONFIGS, subprocess=True) as b:
        create_topic(b.bootstrap_servers, "__consumer_offsets", 1)
        create_topic(b.bootstrap_servers, "data", 1)
        groups = [f"g{i}" for i in range(8)]  # over the 5 partitions the config asks for, most map past 0
        for i, group in enumerate(groups):
            consumer = ck.Consumer(consumer_config(b.bootstrap_servers, group))
            consumer.commit(offsets=[ck.TopicPartition("data", 0, i + 1)], asynchronous=False)
            consumer.close()
        b.restart(kill=True)
        for i, group in enumerate(groups):
            consumer = ck.Consumer(consumer_config(b.bootstrap_servers, group))
            assert consumer.committed([ck.TopicPartition("data", 0)], timeout=15)[0].offset == i + 1
            consumer.close()
