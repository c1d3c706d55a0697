"""Consumer groups with confluent-kafka (librdkafka 2.16): assignment across members, rebalances when members
close or die, exactly-once / at-least-once consumption with commits after processing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient
from tests.compat._groups import (
    BROKER_CONFIGS,
    assignment_of,
    consumer_config,
    create_topic,
    partitions_cover,
    poll_all,
    produce,
)

import rill.testing

PARTITIONS = 6
# The bound of a wait for the group to reach a state: a rebalance takes a few seconds (the initial rebalance delay
# among them), far longer on a loaded machine; the bound is there for a test that cannot succeed, not a slow one.
WAIT_S = 120.0


@pytest.fixture
def broker():
    with rill.testing.broker(BROKER_CONFIGS) as b:
        yield b


@pytest.mark.timeout(3 * WAIT_S)
@pytest.mark.parametrize("assignor", ["range", "roundrobin", "cooperative-sticky"])
def test_three_members_exactly_once_then_one_closes(broker, assignor: str) -> None:
    bs = broker.bootstrap_servers
    create_topic(bs, "orders", PARTITIONS)
    sent = produce(bs, "orders", 300, PARTITIONS)
    config = consumer_config(bs, f"g-{assignor}", partition_assignment_strategy=assignor)
    consumers = [ck.Consumer(config) for _ in range(3)]

    def commit_on_revoke(c: ck.Consumer, _partitions: list[ck.TopicPartition]) -> None:
        # The usual pattern: before partitions move, commit what was processed, synchronously.
        try:
            c.commit(asynchronous=False)
        except ck.KafkaException as e:
            assert e.args[0].code() == ck.KafkaError._NO_OFFSET, e

    for c in consumers:
        c.subscribe(["orders"], on_revoke=commit_on_revoke)
    received: Counter[bytes] = Counter()

    def process(c: ck.Consumer, msg: ck.Message) -> None:
        received[msg.value()] += 1
        # Asynchronous: all members are polled from this one thread, and a synchronous commit queued behind
        # its member's pending JoinGroup would stop the others from polling, so a rebalance that needs their
        # poll calls (cooperative revocation) could not finish. The revoke callback above makes the commits
        # complete before partitions move.
        c.commit(message=msg, asynchronous=True)

    try:
        assert poll_all(
            consumers,
            lambda: sum(received.values()) >= len(sent) and partitions_cover(consumers, PARTITIONS),
            WAIT_S,
            process,
        ), f"got {sum(received.values())} records; assignments {[assignment_of(c) for c in consumers]}"
        assert all(len(assignment_of(c)) == 2 for c in consumers)
        admin = AdminClient({"bootstrap.servers": bs})
        future = admin.describe_consumer_groups([f"g-{assignor}"])[f"g-{assignor}"]
        assert poll_all(consumers, future.done, 15)
        described = future.result(0)
        assert len(described.members) == 3

        # One member closes (LeaveGroup): its partitions move to the other two.
        leaving = consumers.pop()
        moved = assignment_of(leaving)
        leaving.close()
        more = produce(bs, "orders", 120, PARTITIONS, start=len(sent))
        assert poll_all(
            consumers,
            lambda: sum(received.values()) >= len(sent) + len(more) and partitions_cover(consumers, PARTITIONS),
            WAIT_S,
            process,
        ), f"assignments after leave: {[assignment_of(c) for c in consumers]}"
        assert moved <= assignment_of(consumers[0]) | assignment_of(consumers[1])
        assert set(received) == set(sent) | set(more)
        assert all(n == 1 for n in received.values()), "a record was consumed twice with no member dying"
    finally:
        for c in consumers:
            c.close()


_KILLED_MEMBER = textwrap.dedent(
    """
    import sys, confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 2000, "heartbeat.interval.ms": 300})
    c.subscribe([sys.argv[3]])
    n = 0
    while True:
        m = c.poll(0.1)
        if m is None or m.error():
            continue
        print(m.value().decode(), flush=True)
        n += 1
        if n % 5 == 0:   # commits lag processing: a kill leaves processed-but-uncommitted records
            c.commit(asynchronous=False)
    """
)


@pytest.mark.timeout(4 * WAIT_S)
def test_member_killed_partitions_move_at_least_once(broker, tmp_path) -> None:
    bs = broker.bootstrap_servers
    create_topic(bs, "events", PARTITIONS)
    script = tmp_path / "member.py"
    script.write_text(_KILLED_MEMBER)
    out = (tmp_path / "out.txt").open("w")
    proc = subprocess.Popen([sys.executable, str(script), bs, "g-kill", "events"], stdout=out)
    received: Counter[bytes] = Counter()
    consumers = [ck.Consumer(consumer_config(bs, "g-kill", session_timeout_ms=2000)) for _ in range(2)]
    try:
        for c in consumers:
            c.subscribe(["events"])

        def process(c: ck.Consumer, msg: ck.Message) -> None:
            received[msg.value()] += 1
            c.commit(message=msg, asynchronous=False)

        def member_alive() -> None:
            assert proc.poll() is None, f"the member to kill exited ({proc.returncode})"

        # The three share the partitions (the member to kill has joined, however long its process took to
        # start); only then are the records written, so that it has some of its own to process.
        def three_way() -> bool:
            member_alive()
            return len(assignment_of(consumers[0]) | assignment_of(consumers[1])) == 4

        assert poll_all(consumers, three_way, WAIT_S, process)
        sent = produce(bs, "events", 600, PARTITIONS)

        def member_processed() -> bool:
            member_alive()
            return (tmp_path / "out.txt").stat().st_size > 0

        assert poll_all(consumers, member_processed, WAIT_S, process)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        # Its session expires, the group rebalances, and the two survivors own all six partitions.
        assert poll_all(
            consumers,
            lambda: (
                partitions_cover(consumers, PARTITIONS) and set(received) | _lines(tmp_path / "out.txt") >= set(sent)
            ),
            WAIT_S,
            process,
        )
        everything = Counter(received)
        everything.update(_lines(tmp_path / "out.txt"))
        assert set(everything) == set(sent)  # at least once: nothing lost
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        out.close()
        for c in consumers:
            c.close()


def _lines(path) -> set[bytes]:
    return {line.encode() for line in path.read_text().split()}


@pytest.mark.timeout(4 * WAIT_S)
def test_static_member_restart_causes_no_rebalance() -> None:
    with rill.testing.broker(BROKER_CONFIGS) as b:
        bs = b.bootstrap_servers
        create_topic(bs, "static", PARTITIONS)
        assigns: Counter[str] = Counter()

        def make(instance: str) -> ck.Consumer:
            config = consumer_config(bs, "g-static", group_instance_id=instance, session_timeout_ms=10000)
            c = ck.Consumer(config)
            c.subscribe(["static"], on_assign=lambda _c, _p: assigns.update([instance]))
            return c

        a, other = make("a"), make("b")
        assert poll_all([a, other], lambda: partitions_cover([a, other], PARTITIONS), WAIT_S)
        coordinator = b.broker.services.group_coordinator
        group = coordinator.groups["g-static"]
        assert poll_all([a, other], lambda: group.state.value == "Stable", WAIT_S)
        generation = group.generation_id
        a_partitions = assignment_of(a)
        other_assigns = assigns["b"]
        a.close()  # a static member does not leave the group on close
        time.sleep(0.5)
        assert group.generation_id == generation and len(group.members) == 2
        a = make("a")
        assert poll_all([a, other], lambda: assignment_of(a) == a_partitions, WAIT_S)
        poll_all([a, other], lambda: False, 1.5)  # give a rebalance, if any, time to show
        assert group.generation_id == generation
        assert assigns["b"] == other_assigns, "the other member was rebalanced"
        assert group.state.value == "Stable"

        a.close()
        other.close()
