"""Share groups (KIP-932) served to confluent-kafka's ShareConsumer on one broker: more consumers than
partitions each get records and no record goes to two of them; accept, release and reject; a lock that
expires delivers the record again; a record released at the delivery limit is archived."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.share._share import SHORT_LOCKS, poll_until, produce, share_consumer, warm_up

import rill.testing
from rill.coordinator.share.share_partition import RecordState

pytestmark = pytest.mark.timeout(180)


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(10)


def _coordinated(b: rill.testing.TestBroker, group: str) -> list[Any]:
    """The share partitions of ``group`` whose state the broker's share coordinator holds."""
    coordinator = b.broker.services.share_coordinator
    return [k for p in list(coordinator.partitions.values()) for k in list(p.shard.states) if k.group_id == group]


def _share_partition(b: rill.testing.TestBroker, group: str, partition: int) -> Any:
    share = b.broker.services.share
    return next(sp for (g, _, p), sp in share.partitions.partitions.items() if g == group and p == partition)


def test_five_consumers_share_two_partitions() -> None:
    with rill.testing.broker() as b:
        _create(b.bootstrap_servers, "t", 2)
        # at most 10 records a fetch: records appended at once are spread over the fetches waiting for them
        consumers = [share_consumer(b.bootstrap_servers, "sg", ["t"], max_poll_records=10) for _ in range(5)]
        try:
            warm_up(b.bootstrap_servers, consumers[0], "t", 2)
            got: list[list[bytes]] = [[] for _ in consumers]
            stop = threading.Event()

            def run(i: int) -> None:
                while not stop.is_set():
                    for m in consumers[i].poll(0.2):
                        assert m.error() is None
                        if m.value() != b"warm":
                            got[i].append(m.value())

            threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(5)]
            for t in threads:
                t.start()
            time.sleep(1.0)  # let every consumer join and park a fetch (not a bound on anything measured)
            n = 300
            produce(b.bootstrap_servers, "t", ((i % 2, b"r%d" % i) for i in range(n)))
            deadline = time.monotonic() + 60
            while sum(map(len, got)) < n and time.monotonic() < deadline:
                time.sleep(0.1)
            stop.set()
            for t in threads:
                t.join(10)
            everything = [v for g in got for v in g]
            assert sorted(everything) == sorted(b"r%d" % i for i in range(n))  # each record exactly once
            assert all(g for g in got), [len(g) for g in got]  # every consumer got records
        finally:
            for c in consumers:
                c.close()


def test_accept_release_reject() -> None:
    with rill.testing.broker(SHORT_LOCKS) as b:
        _create(b.bootstrap_servers, "t", 1)
        c = share_consumer(b.bootstrap_servers, "sg", ["t"], explicit=True)
        try:
            warm_up(b.bootstrap_servers, c, "t", 1, explicit=True)
            produce(b.bootstrap_servers, "t", [(0, b"accept"), (0, b"release"), (0, b"reject")])
            first: list[Any] = []
            deadline = time.monotonic() + 30
            while len(first) < 3 and time.monotonic() < deadline:
                msgs = c.poll(0.5)
                for m in msgs:
                    first.append(m)
                    kind = {b"accept": AcknowledgeType.ACCEPT, b"release": AcknowledgeType.RELEASE,
                            b"reject": AcknowledgeType.REJECT}[m.value()]  # fmt: skip
                    c.acknowledge(m, kind)
                if msgs:
                    c.commit_sync(10)
            assert sorted(m.value() for m in first) == [b"accept", b"reject", b"release"]
            again = []
            deadline = time.monotonic() + 30
            while not again and time.monotonic() < deadline:
                again = list(c.poll(0.5))
            assert [m.value() for m in again] == [b"release"]
            for m in again:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            c.commit_sync(10)
            # nothing is left in flight: the accepted, rejected and re-accepted records are all finished
            sp = _share_partition(b, "sg", 0)
            assert sp.start_offset == sp.end_offset == max(m.offset() for m in first) + 1
            assert not list(c.poll(1.5))  # longer than a lock: nothing comes back
        finally:
            c.close()


def test_expired_lock_redelivers_to_another_consumer() -> None:
    with rill.testing.broker(SHORT_LOCKS) as b:
        _create(b.bootstrap_servers, "t", 1)
        holder = share_consumer(b.bootstrap_servers, "sg", ["t"], explicit=True)
        other = share_consumer(b.bootstrap_servers, "sg", ["t"])
        try:
            warm_up(b.bootstrap_servers, holder, "t", 1, explicit=True)
            produce(b.bootstrap_servers, "t", [(0, b"x%d" % i) for i in range(5)])
            held: list[Any] = []
            deadline = time.monotonic() + 30
            while len(held) < 5 and time.monotonic() < deadline:
                held.extend(holder.poll(0.5))  # acquired, never acknowledged
            assert sorted(m.value() for m in held) == [b"x%d" % i for i in range(5)]
            # the holder stops polling; its locks run out and the other consumer gets every record
            again = poll_until(other, 5)
            assert sorted(m.value() for m in again) == [b"x%d" % i for i in range(5)]
        finally:
            other.close()
            holder.close()


def test_release_past_delivery_limit_archives() -> None:
    with rill.testing.broker({**SHORT_LOCKS, "group.share.delivery.count.limit": "2"}) as b:
        _create(b.bootstrap_servers, "t", 1)
        c = share_consumer(b.bootstrap_servers, "sg", ["t"], explicit=True)
        try:
            warm_up(b.bootstrap_servers, c, "t", 1, explicit=True)
            produce(b.bootstrap_servers, "t", [(0, b"poison"), (0, b"fine")])
            deliveries: dict[bytes, int] = {}
            offsets: dict[bytes, int] = {}
            deadline = time.monotonic() + 30
            while deliveries.get(b"poison", 0) < 2 or b"fine" not in deliveries:
                assert time.monotonic() < deadline, deliveries
                msgs = c.poll(0.5)
                for m in msgs:
                    deliveries[m.value()] = deliveries.get(m.value(), 0) + 1
                    offsets[m.value()] = m.offset()
                    kind = AcknowledgeType.RELEASE if m.value() == b"poison" else AcknowledgeType.ACCEPT
                    c.acknowledge(m, kind)
                if msgs:
                    c.commit_sync(10)
            assert deliveries == {b"poison": 2, b"fine": 1}
            sp = _share_partition(b, "sg", 0)
            assert sp.state_of(offsets[b"poison"]) in (None, RecordState.ARCHIVED)
            assert sp.start_offset > offsets[b"poison"]  # archived: the share partition moved past it
            assert not list(c.poll(1.5))
        finally:
            c.close()


def test_share_groups_listed_and_described(capsys: pytest.CaptureFixture[str]) -> None:
    from rill.cli.share_groups import main as share_groups

    with rill.testing.broker() as b:
        _create(b.bootstrap_servers, "t", 2)
        consumers = [share_consumer(b.bootstrap_servers, "workers", ["t"]) for _ in range(2)]
        try:
            warm_up(b.bootstrap_servers, consumers[0], "t", 2)
            deadline = time.monotonic() + 30
            while True:  # the second consumer joins on its first poll
                consumers[1].poll(0.2)
                capsys.readouterr()
                argv = ["describe", "workers", "--members", "--bootstrap-server", b.bootstrap_servers]
                assert share_groups(argv) == 0
                out = capsys.readouterr().out
                if out.count("t:0,1") == 2 or time.monotonic() > deadline:
                    break
            lines = out.splitlines()
            assert lines[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
            assert [line.split()[-2:] for line in lines[1:]] == [["2", "t:0,1"], ["2", "t:0,1"]]
            assert share_groups(["describe", "workers", "--state", "--bootstrap-server", b.bootstrap_servers]) == 0
            assert capsys.readouterr().out.splitlines()[1].split()[:3] == ["workers", "simple", "Stable"]
            # the warm-up records (one per partition at least) were accepted: each start offset is past them
            assert share_groups(["describe", "workers", "--bootstrap-server", b.bootstrap_servers]) == 0
            rows = [line.split() for line in capsys.readouterr().out.splitlines()]
            assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET"]
            assert [r[:3] for r in rows[1:]] == [["workers", "t", "0"], ["workers", "t", "1"]]
            assert all(int(r[3]) >= 1 for r in rows[1:])
            assert share_groups(["list", "--state", "--bootstrap-server", b.bootstrap_servers]) == 0
            assert capsys.readouterr().out.splitlines()[1:] == ["workers  Stable"]
            assert share_groups(["describe", "nobody", "--bootstrap-server", b.bootstrap_servers]) != 0
            assert "does not exist" in capsys.readouterr().err
        finally:
            for c in consumers:
                c.close()


def test_delete_groups_deletes_an_empty_share_group_and_its_state() -> None:
    from confluent_kafka.error import KafkaException

    with rill.testing.broker() as b:
        _create(b.bootstrap_servers, "t", 1)
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        c = share_consumer(b.bootstrap_servers, "doomed", ["t"])
        try:
            warm_up(b.bootstrap_servers, c, "t", 1)
            with pytest.raises(KafkaException, match="NON_EMPTY_GROUP"):
                admin.delete_consumer_groups(["doomed"])["doomed"].result(10)
        finally:
            c.close()
        assert _coordinated(b, "doomed")  # the share coordinator keeps the group's state in __share_group_state
        deadline = time.monotonic() + 30
        while True:  # the member's leave reaches the broker as the consumer closes
            try:
                admin.delete_consumer_groups(["doomed"])["doomed"].result(10)
                break
            except KafkaException as e:
                assert "NON_EMPTY_GROUP" in str(e) and time.monotonic() < deadline
                time.sleep(0.2)
        assert not _coordinated(b, "doomed")
        assert "doomed" not in b.broker.services.share.coordinator.groups
