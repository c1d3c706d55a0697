"""Administering share groups (KIP-932) against one broker, with real clients: AlterShareGroupOffsets and
DeleteShareGroupOffsets (through ``rill share-groups`` and raw requests: confluent-kafka's AdminClient has no
share-group offset calls), the per-group ``share.auto.offset.reset`` and ``share.isolation.level`` set through
confluent-kafka's ``incremental_alter_configs``, and what a confluent-kafka ShareConsumer then reads. Refused
requests change nothing, neither what the broker answers nor the state it keeps on disk."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from confluent_kafka.error import KafkaException
from tests.integration.broker._wire import Wire
from tests.integration.share._share import SHORT_LOCKS, poll_until, produce, share_consumer, warm_up

import rill.testing
from rill.cli.share_groups import main as share_groups
from rill.errors import ErrorCode
from rill.protocol import ApiKey

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def broker() -> Iterator[rill.testing.TestBroker]:
    with rill.testing.broker(SHORT_LOCKS) as b:
        yield b


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(10)


def _set_group_config(bootstrap: str, group: str, name: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(10)


def _group_config(bootstrap: str, group: str, name: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group)
    value: str = admin.describe_configs([resource])[resource].result(10)[name].value
    return value


def _starts(w: Wire, group: str) -> tuple[int, dict[tuple[str, int], int]]:
    """DescribeShareGroupOffsets: the group's error and each partition's start offset."""
    r = w.call(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, {"groups": [{"group_id": group, "topics": None}]})["groups"][0]
    return r["error_code"], {(t["topic_name"], p["partition_index"]): p["start_offset"]
                             for t in r["topics"] for p in t["partitions"]}  # fmt: skip


_LOADING = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


def _coordinated(w: Wire, key: int, body: dict[str, Any]) -> dict[str, Any]:
    """A group-coordinator request, sent again while the coordinator is still coming up (a client without a
    FindCoordinator first, as these tests are, may find __consumer_offsets being made)."""
    deadline = time.monotonic() + 30
    while True:
        r = w.call(key, 0, body)
        if r["error_code"] not in _LOADING or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def _alter(w: Wire, group: str, topics: dict[str, list[tuple[int, int]]]) -> dict[str, Any]:
    body = {"group_id": group, "topics": [
        {"topic_name": t, "partitions": [{"partition_index": p, "start_offset": o} for p, o in ps]}
        for t, ps in topics.items()]}  # fmt: skip
    return _coordinated(w, ApiKey.ALTER_SHARE_GROUP_OFFSETS, body)


def _partition_codes(r: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {(t["topic_name"], p["partition_index"]): p["error_code"] for t in r["responses"] for p in t["partitions"]}


def _delete_offsets(w: Wire, group: str, topics: list[str]) -> dict[str, Any]:
    body = {"group_id": group, "topics": [{"topic_name": t} for t in topics]}
    return _coordinated(w, ApiKey.DELETE_SHARE_GROUP_OFFSETS, body)


def test_reset_to_earliest_then_a_share_consumer_reads_from_there(
    broker: rill.testing.TestBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    bs = broker.bootstrap_servers
    _create(bs, "reset-t", 2)
    produce(bs, "reset-t", [(i % 2, b"r%d" % i) for i in range(6)])  # before the group ever fetched
    argv = ["reset-offsets", "--group", "rg", "--topic", "reset-t", "--to-earliest", "--bootstrap-server", bs]
    w = Wire(bs)
    try:
        assert share_groups([*argv, "--dry-run"]) == 0  # the plan only
        rows = [line.split() for line in capsys.readouterr().out.splitlines()]
        assert rows == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], ["rg", "reset-t", "0", "0"],
                        ["rg", "reset-t", "1", "0"]]  # fmt: skip
        assert _starts(w, "rg")[0] == ErrorCode.GROUP_ID_NOT_FOUND
        other = ["reset-offsets", "--group", "rg", "--bootstrap-server", bs, "--dry-run"]
        assert share_groups([*other, "--topic", "reset-t:1", "--to-offset", "1000"]) == 0  # moved to the log end
        out, err = capsys.readouterr()
        assert out.splitlines()[1].split() == ["rg", "reset-t", "1", "3"] and "Value will be set to 3" in err
        assert share_groups([*other, "--topic", "reset-t:0", "--to-datetime", "2999-01-01T00:00:00"]) == 0
        assert capsys.readouterr().out.splitlines()[1].split() == ["rg", "reset-t", "0", "3"]  # no record: the end
        assert share_groups([*other, "--topic", "no-such-topic", "--to-earliest"]) != 0
        assert "Topic no-such-topic does not exist" in capsys.readouterr().err
        assert share_groups([*argv, "--execute"]) == 0  # a group that does not exist yet is created
        assert _starts(w, "rg") == (0, {("reset-t", 0): 0, ("reset-t", 1): 0})
        capsys.readouterr()
        assert share_groups(["reset-offsets", "--group", "rg", "--all-topics", "--to-latest", "--bootstrap-server", bs,
                             "--dry-run"]) == 0  # fmt: skip
        assert [line.split()[1:] for line in capsys.readouterr().out.splitlines()[1:]] == [
            ["reset-t", "0", "3"], ["reset-t", "1", "3"]]  # fmt: skip
    finally:
        w.close()
    c = share_consumer(bs, "rg", ["reset-t"])
    try:
        got = poll_until(c, 6, skip_warm=False)
        assert sorted(m.value() for m in got) == sorted(b"r%d" % i for i in range(6))
    finally:
        c.close()


def _persisted(b: rill.testing.TestBroker, group: str) -> tuple[list[Any], list[int]]:
    """What the share coordinator keeps of ``group``, and the log end of each ``__share_group_state`` partition
    (a refused request writes no record)."""
    coordinator = b.broker.services.share_coordinator
    states = sorted((k, repr(v)) for p in list(coordinator.partitions.values())
                    for k, v in list(p.shard.states.items()) if k.group_id == group)  # fmt: skip
    ends = [plog.log.log_end_offset for tp, plog in sorted(b.broker.replica_manager.partitions().items(), key=str)
            if tp.topic == "__share_group_state"]  # fmt: skip
    return states, ends


def test_refused_alter_and_delete_change_nothing(
    broker: rill.testing.TestBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    bs = broker.bootstrap_servers
    _create(bs, "busy-t", 1)
    c = share_consumer(bs, "busy", ["busy-t"])
    w = Wire(bs)
    try:
        warm_up(bs, c, "busy-t", 1)
        c.poll(0.2)  # the warm-up record is acknowledged (implicit mode) on this poll
        before = (_starts(w, "busy"), _persisted(broker, "busy"))
        # a group with a member: the whole request is refused
        r = _alter(w, "busy", {"busy-t": [(0, 0)]})
        assert r["error_code"] == ErrorCode.NON_EMPTY_GROUP
        assert set(_partition_codes(r).values()) == {ErrorCode.NON_EMPTY_GROUP}
        assert _delete_offsets(w, "busy", ["busy-t"])["error_code"] == ErrorCode.NON_EMPTY_GROUP
        argv = ["--group", "busy", "--bootstrap-server", bs]
        assert share_groups(["reset-offsets", *argv, "--topic", "busy-t", "--to-earliest", "--execute"]) != 0
        assert "Share group 'busy' is not empty" in capsys.readouterr().err
        assert share_groups(["delete", *argv]) != 0
        assert "is not empty" in capsys.readouterr().err
        assert (_starts(w, "busy"), _persisted(broker, "busy")) == before
    finally:
        c.close()
        w.close()
    w = Wire(bs)
    try:
        deadline = time.monotonic() + 30
        while _alter(w, "busy", {"no-such-topic": [(0, 0)]})["error_code"] == ErrorCode.NON_EMPTY_GROUP:
            assert time.monotonic() < deadline, "the member never left"  # its leave comes as the consumer closes
            time.sleep(0.2)
        before = (_starts(w, "busy"), _persisted(broker, "busy"))
        # per partition: a topic or partition that does not exist, an offset past the log end, a negative one
        r = _alter(w, "busy", {"no-such-topic": [(0, 0)], "busy-t": [(1, 0), (0, 10**6), (0, -3)]})
        assert r["error_code"] == 0
        assert [p["error_code"] for t in r["responses"] for p in t["partitions"]] == [
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.INVALID_REQUEST]  # fmt: skip
        r = _delete_offsets(w, "busy", ["no-such-topic"])
        assert [t["error_code"] for t in r["responses"]] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        assert _delete_offsets(w, "nobody", ["busy-t"])["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        # a consumer group's id is not a share group's
        consumer = Consumer({"bootstrap.servers": bs, "group.id": "classic", "enable.auto.commit": False})
        consumer.commit(offsets=[KafkaTopicPartition("busy-t", 0, 1)], asynchronous=False)
        consumer.close()
        assert _alter(w, "classic", {"busy-t": [(0, 0)]})["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        assert _starts(w, "classic")[0] == ErrorCode.GROUP_ID_NOT_FOUND
        assert share_groups(["delete", "--group", "classic", "--bootstrap-server", bs]) != 0  # not a share group's
        assert "Share group 'classic' does not exist" in capsys.readouterr().err
        assert "classic" in {g["group_id"] for g in w.call(ApiKey.LIST_GROUPS, 4, {"states_filter": []})["groups"]}
        assert (_starts(w, "busy"), _persisted(broker, "busy")) == before
    finally:
        w.close()


def test_delete_offsets_then_delete_the_group(
    broker: rill.testing.TestBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    bs = broker.bootstrap_servers
    _create(bs, "del-t", 1)
    _create(bs, "keep-t", 1)
    produce(bs, "del-t", [(0, b"x")])
    w = Wire(bs)
    try:
        assert _partition_codes(_alter(w, "dg", {"del-t": [(0, 1)], "keep-t": [(0, 0)]})) == {
            ("del-t", 0): 0, ("keep-t", 0): 0}  # fmt: skip
        assert share_groups(["delete-offsets", "--group", "dg", "--topic", "del-t", "--bootstrap-server", bs]) == 0
        assert capsys.readouterr().out.splitlines()[1].split() == ["del-t", "Successful"]
        assert _starts(w, "dg") == (0, {("keep-t", 0): 0})
        assert share_groups(["delete", "--group", "dg", "--bootstrap-server", bs]) == 0
        assert _starts(w, "dg")[0] == ErrorCode.GROUP_ID_NOT_FOUND
        assert _persisted(broker, "dg")[0] == []  # the share coordinator keeps nothing of it
        assert share_groups(["delete", "--group", "dg", "--bootstrap-server", bs]) != 0
        assert "Share group 'dg' does not exist" in capsys.readouterr().err
    finally:
        w.close()


def test_auto_offset_reset_set_through_incremental_alter_configs(broker: rill.testing.TestBroker) -> None:
    bs = broker.bootstrap_servers
    _create(bs, "auto-t", 1)
    hour_ago = int(time.time() * 1000) - 3_600_000
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for i in range(3):
        producer.produce("auto-t", b"old%d" % i, partition=0, timestamp=hour_ago)
    for i in range(2):
        producer.produce("auto-t", b"new%d" % i, partition=0)
    assert producer.flush(10) == 0
    assert _group_config(bs, "early", "share.auto.offset.reset") == "latest"
    _set_group_config(bs, "early", "share.auto.offset.reset", "earliest")
    _set_group_config(bs, "recent", "share.auto.offset.reset", "by_duration:PT10M")
    for bad in ("first", "by_duration:-PT1H", "by_duration:1h"):  # refused, changing nothing
        with pytest.raises(KafkaException, match="INVALID_CONFIG"):
            _set_group_config(bs, "early", "share.auto.offset.reset", bad)
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        _set_group_config(bs, "early", "share.isolation.level", "read_most")
    assert _group_config(bs, "early", "share.auto.offset.reset") == "earliest"
    assert _group_config(bs, "early", "share.isolation.level") == "read_uncommitted"
    for group, want in (("early", [b"old0", b"old1", b"old2", b"new0", b"new1"]), ("recent", [b"new0", b"new1"])):
        c = share_consumer(bs, group, ["auto-t"])
        try:
            assert [m.value() for m in poll_until(c, len(want), skip_warm=False)] == want
        finally:
            c.close()


def test_read_committed_share_group_skips_aborted_transactions(broker: rill.testing.TestBroker) -> None:
    bs = broker.bootstrap_servers
    _create(bs, "txn-t", 1)
    producer = Producer({"bootstrap.servers": bs, "transactional.id": "share-txn", "linger.ms": 0})
    producer.init_transactions(10)
    for values, commit in (([b"c1", b"c2"], True), ([b"a1", b"a2"], False), ([b"c3"], True), ([b"a3"], False)):
        producer.begin_transaction()
        for v in values:
            producer.produce("txn-t", v, partition=0)
        assert producer.flush(10) == 0  # in the log before the abort (which would purge what is still queued)
        producer.commit_transaction(10) if commit else producer.abort_transaction(10)
    plain = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    plain.produce("txn-t", b"end", partition=0)  # after everything: its arrival means the rest came before
    assert plain.flush(10) == 0
    for group, level in (("committed", "read_committed"), ("uncommitted", "read_uncommitted")):
        _set_group_config(bs, group, "share.auto.offset.reset", "earliest")
        _set_group_config(bs, group, "share.isolation.level", level)
    # what the broker hands out (librdkafka's ShareConsumer also drops aborted records itself, so the wire is
    # where the broker's own filter shows): offsets 0-1 c1 c2, 2 marker, 3-4 a1 a2, 5 marker, 6 c3, 7 marker,
    # 8 a3, 9 marker, 10 end
    topic_id = broker.broker.services.metadata.topic("txn-t").topic_id
    expected = {"committed": [(0, 1), (6, 6), (10, 10)], "uncommitted": [(0, 1), (3, 4), (6, 6), (8, 8), (10, 10)]}
    w = Wire(bs)
    try:
        for group, want in expected.items():
            member = _join(w, group, "txn-t")
            got: list[tuple[int, int]] = []
            epoch = 0
            while not got or got[-1][1] < 10:
                got += _acquired(_fetch(w, 1, member, epoch, topic_id, [], group_id=group, max_records=100))
                epoch += 1
                assert epoch < 20, got
            assert got == want, group
    finally:
        w.close()
    c = share_consumer(bs, "committed", ["txn-t"])  # and a ShareConsumer of the group reads on from there
    try:
        produce(bs, "txn-t", [(0, b"after")])
        assert [m.value() for m in poll_until(c, 1, skip_warm=False)] == [b"after"]
    finally:
        c.close()


def _join(w: Wire, group: str, topic: str) -> str:
    r = w.call(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {"group_id": group, "member_id": "", "member_epoch": 0,
                                                  "rack_id": None, "subscribed_topic_names": [topic]})  # fmt: skip
    assert r["error_code"] == 0, r
    member_id: str = r["member_id"]
    return member_id


def _fetch(w: Wire, version: int, member: str, epoch: int, topic_id: uuid.UUID, acks: list[dict[str, Any]],
           **fields: Any) -> dict[str, Any]:  # fmt: skip
    body = {"group_id": "v2g", "member_id": member, "share_session_epoch": epoch, "max_wait_ms": 2000,
            "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 3, "batch_size": 3, "share_acquire_mode": 0,
            "is_renew_ack": False, "forgotten_topics_data": [],
            "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0,
                                                             "acknowledgement_batches": acks}]}]}  # fmt: skip
    return w.call(ApiKey.SHARE_FETCH, version, {**body, **fields})


def _acquired(r: dict[str, Any]) -> list[tuple[int, int]]:
    return [(a["first_offset"], a["last_offset"]) for t in r["responses"] for p in t["partitions"]
            for a in p["acquired_records"]]  # fmt: skip


def test_share_fetch_and_acknowledge_v2(broker: rill.testing.TestBroker) -> None:
    """Version 2 (Kafka 4.2): the record-limit acquire mode acquires no more than MaxRecords, even inside a batch;
    RENEW restarts the holder's locks (only in a request that says IsRenewAck); a renewing ShareFetch fetches
    nothing."""
    bs = broker.bootstrap_servers
    _create(bs, "v2-t", 1)
    _set_group_config(bs, "v2g", "share.auto.offset.reset", "earliest")
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 1000, "batch.num.messages": 100})
    for i in range(10):
        producer.produce("v2-t", b"v%d" % i, partition=0)
    assert producer.flush(10) == 0  # one batch of 10
    topic_id = broker.broker.services.metadata.topic("v2-t").topic_id
    w = Wire(bs)
    try:
        versions = {a["api_key"]: (a["min_version"], a["max_version"])
                    for a in w.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                             "client_software_version": "1"})["api_keys"]}  # fmt: skip
        assert [versions[k] for k in (78, 79, 91, 92)] == [(1, 2), (1, 2), (0, 0), (0, 0)]
        member = _join(w, "v2g", "v2-t")
        assert _acquired(_fetch(w, 2, member, 0, topic_id, [], share_acquire_mode=1)) == [(0, 2)]
        assert _acquired(_fetch(w, 2, member, 1, topic_id, [])) == [(3, 9)]  # batch-optimized: the whole rest
        sp = next(sp for (g, _, _), sp in broker.broker.services.share.partitions.partitions.items() if g == "v2g")
        old = sp.records[0].lock_deadline_ms
        renew = [{"first_offset": 0, "last_offset": 2, "acknowledge_types": [4]}]
        topics = [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": renew}]}]
        v1 = w.call(ApiKey.SHARE_ACKNOWLEDGE, 1, {"group_id": "v2g", "member_id": member, "share_session_epoch": 2,
                                                  "topics": topics})  # fmt: skip
        assert [p["error_code"] for t in v1["responses"] for p in t["partitions"]] == [ErrorCode.INVALID_REQUEST]
        assert sp.records[0].lock_deadline_ms == old
        time.sleep(0.05)  # (the lock's new deadline is later than the old: not a bound on anything measured)
        v2 = w.call(ApiKey.SHARE_ACKNOWLEDGE, 2, {"group_id": "v2g", "member_id": member, "share_session_epoch": 3,
                                                  "is_renew_ack": True, "topics": topics})  # fmt: skip
        assert [p["error_code"] for t in v2["responses"] for p in t["partitions"]] == [0]
        assert v2["acquisition_lock_timeout_ms"] == 1000
        assert sp.records[0].lock_deadline_ms > old and sp.state_of(0).name == "ACQUIRED"
        refused = _fetch(w, 2, member, 4, topic_id, renew, is_renew_ack=True)  # renewing, yet asks for records
        assert refused["error_code"] == ErrorCode.INVALID_REQUEST
        r = _fetch(w, 2, member, 4, topic_id, renew, is_renew_ack=True, max_wait_ms=0, min_bytes=0, max_bytes=0,
                   max_records=0)  # fmt: skip
        assert r["error_code"] == 0 and _acquired(r) == []
        assert [p["acknowledge_error_code"] for t in r["responses"] for p in t["partitions"]] == [0]
    finally:
        w.close()


def test_a_group_given_offsets_is_kept_across_a_restart(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A share group that only has a state (reset before any consumer came) is still listed and described, as
    Empty, after the broker restarts."""
    with rill.testing.broker(data_dir=tmp_path) as b:
        _create(b.bootstrap_servers, "kept-t", 1)
        w = Wire(b.bootstrap_servers)
        try:
            assert _partition_codes(_alter(w, "kept", {"kept-t": [(0, 0)]})) == {("kept-t", 0): 0}
        finally:
            w.close()
        b.restart()
        bs = b.bootstrap_servers
        assert share_groups(["list", "--state", "--bootstrap-server", bs]) == 0
        assert capsys.readouterr().out.splitlines()[1].split() == ["kept", "Empty"]
        assert share_groups(["describe", "kept", "--state", "--bootstrap-server", bs]) == 0
        assert capsys.readouterr().out.splitlines()[1].split()[:3] == ["kept", "simple", "Empty"]
        assert share_groups(["describe", "kept", "--bootstrap-server", bs]) == 0
        assert capsys.readouterr().out.splitlines()[1].split() == ["kept", "kept-t", "0", "0"]


def test_share_sessions_are_bounded() -> None:
    """A ShareFetch at epoch 0 opens a session for any member id (Kafka does not ask the group), and a session
    outlived its member: without a bound, one client made as many as it sent requests. At
    group.share.max.share.sessions the sessions of ids that are no member make room; beyond, a new one is
    SHARE_SESSION_LIMIT_REACHED; a member's new session replaces its own, and a closed one frees its place."""
    with rill.testing.broker({**SHORT_LOCKS, "group.share.max.share.sessions": "3"}) as b:
        _create(b.bootstrap_servers, "sessions-t", 1)
        w = Wire(b.bootstrap_servers)
        try:
            topic_id = b.broker.services.metadata.topic("sessions-t").topic_id
            members = [_join(w, "v2g", "sessions-t") for _ in range(3)]
            assert _fetch(w, 1, "not-a-member", 0, topic_id, [], max_wait_ms=0)["error_code"] == 0
            opened = [_fetch(w, 1, m, 0, topic_id, [], max_wait_ms=0)["error_code"] for m in members[:2]]
            assert opened == [0, 0]  # the third session
            assert _fetch(w, 1, members[2], 0, topic_id, [], max_wait_ms=0)["error_code"] == 0  # made room
            assert ("v2g", "not-a-member") not in b.broker.services.share.partitions.sessions
            refused = _fetch(w, 1, "forged", 0, topic_id, [], max_wait_ms=0)["error_code"]
            assert refused == ErrorCode.SHARE_SESSION_LIMIT_REACHED
            assert _fetch(w, 1, members[0], 0, topic_id, [], max_wait_ms=0)["error_code"] == 0  # its own, again
            closed = _fetch(w, 1, members[1], -1, topic_id, [], max_wait_ms=0, max_records=0)["error_code"]
            assert closed == 0
            assert _fetch(w, 1, "forged", 0, topic_id, [], max_wait_ms=0)["error_code"] == 0
        finally:
            w.close()


def test_a_share_group_cannot_take_the_id_of_a_consumer_group(broker: rill.testing.TestBroker) -> None:
    """Kafka keeps one group per id: a ShareGroupHeartbeat for the id of a classic group (one with committed
    offsets) answers GROUP_ID_NOT_FOUND, and the offsets stay."""
    from rill.client.client import KafkaClient
    from rill.common import TopicPartition

    _create(broker.bootstrap_servers, "taken-t", 1)
    with KafkaClient(broker.bootstrap_servers, timeout_s=30) as client:
        client.commit_offsets("taken", {TopicPartition("taken-t", 0): 0})
        w = Wire(broker.bootstrap_servers)
        try:
            r = w.call(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
                "group_id": "taken", "member_id": "", "member_epoch": 0, "rack_id": None,
                "subscribed_topic_names": ["taken-t"]})  # fmt: skip
            assert r["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND, r
        finally:
            w.close()
        assert client.fetch_committed("taken", [TopicPartition("taken-t", 0)])[TopicPartition("taken-t", 0)] == 0


def test_a_heartbeat_whose_member_record_cannot_be_written_is_refused(broker: rill.testing.TestBroker) -> None:
    """What a member sends goes into its group's records in __consumer_offsets: a member id past 255 bytes, an
    empty rack, a subscription that is no topic name, or one that makes the record larger than 16 KiB is
    INVALID_REQUEST and changes nothing; the group's other members go on."""
    _create(broker.bootstrap_servers, "bounded-t", 1)
    w = Wire(broker.bootstrap_servers)
    try:
        def join(member: str, topics: list[str], rack: str | None = None) -> dict[str, Any]:
            return w.call(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {"group_id": "bounded", "member_id": member,
                                                             "member_epoch": 0, "rack_id": rack,
                                                             "subscribed_topic_names": topics})  # fmt: skip

        ok = join("m1", ["bounded-t"])
        assert ok["error_code"] == 0, ok
        refused = [join("x" * 256, ["bounded-t"]), join("m2", ["bounded-t"], rack=""), join("m2", ["no such/name"]),
                   join("m2", [f"t{i:0>200}" for i in range(100)])]  # fmt: skip
        assert [r["error_code"] for r in refused] == [ErrorCode.INVALID_REQUEST] * 4, refused
        described = w.call(ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": ["bounded"]})["groups"][0]
        assert [m["member_id"] for m in described["members"]] == ["m1"], described
        again = w.call(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {"group_id": "bounded", "member_id": "m1",
                                                          "member_epoch": ok["member_epoch"], "rack_id": None,
                                                          "subscribed_topic_names": None})  # fmt: skip
        assert again["error_code"] == 0, again
    finally:
        w.close()


def test_a_consumer_group_cannot_take_the_id_of_a_share_group(broker: rill.testing.TestBroker) -> None:
    """An OffsetCommit, a JoinGroup or a ConsumerGroupHeartbeat for the id of a share group answers
    GROUP_ID_NOT_FOUND (before, a commit made a classic group of the id, and the share group's members were
    refused from then on)."""
    from rill.client.client import KafkaClient
    from rill.client.connection import BrokerConnection
    from rill.common import TopicPartition
    from rill.errors import KafkaError

    _create(broker.bootstrap_servers, "owned-t", 1)
    w = Wire(broker.bootstrap_servers)
    try:
        joined = w.call(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
            "group_id": "owned", "member_id": "m1", "member_epoch": 0, "rack_id": None,
            "subscribed_topic_names": ["owned-t"]})  # fmt: skip
        assert joined["error_code"] == 0, joined
        with KafkaClient(broker.bootstrap_servers, timeout_s=30) as client:
            with pytest.raises(KafkaError) as refused:
                client.commit_offsets("owned", {TopicPartition("owned-t", 0): 0})
            assert refused.value.code == ErrorCode.GROUP_ID_NOT_FOUND
            conn: BrokerConnection = client.coordinator("owned")
            join = conn.request(ApiKey.JOIN_GROUP, {"group_id": "owned", "session_timeout_ms": 10000,
                                                    "rebalance_timeout_ms": 10000, "member_id": "",
                                                    "group_instance_id": None, "protocol_type": "consumer",
                                                    "protocols": [{"name": "range", "metadata": b""}],
                                                    "reason": None}, version=9)[1]  # fmt: skip
            assert join["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND, join
            heartbeat = conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, {
                "group_id": "owned", "member_id": "c1", "member_epoch": 0, "instance_id": None, "rack_id": None,
                "rebalance_timeout_ms": 10000, "subscribed_topic_names": ["owned-t"], "subscribed_topic_regex": None,
                "server_assignor": None, "topic_partitions": []}, version=1)[1]  # fmt: skip
            assert heartbeat["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND, heartbeat
        again = w.call(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {"group_id": "owned", "member_id": "m1",
                                                          "member_epoch": joined["member_epoch"], "rack_id": None,
                                                          "subscribed_topic_names": None})  # fmt: skip
        assert again["error_code"] == 0, again
    finally:
        w.close()
