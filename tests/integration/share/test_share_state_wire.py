"""The share coordinator's inter-broker APIs over the wire of a real broker, as a share-partition leader uses them:
a write is read back, also after a restart (it is in ``__share_group_state``, not in memory); a read from a newer
leader epoch fences the writes of an older one (FENCED_LEADER_EPOCH), an initialization at a newer state epoch
those of an older state (FENCED_STATE_EPOCH); a delete removes the state. And a leader fenced that way by a new
leader's read answers the acknowledgements of its ShareConsumer with an error, never as durable."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.broker._wire import Wire
from tests.integration.share._share import produce, share_consumer, warm_up

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey

pytestmark = [pytest.mark.timeout(180)]

CONFIGS = {"share.coordinator.state.topic.num.partitions": "3", "group.share.heartbeat.interval.ms": "500"}


def _topic(b: rill.testing.TestBroker, name: str) -> tuple[uuid.UUID, int]:
    """Create ``name`` (one partition): its topic id and its partition's leader epoch."""
    admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})  # held until the result
    admin.create_topics([NewTopic(name, 1)])[name].result(15)
    w = Wire(b.bootstrap_servers)
    try:
        meta = w.call(ApiKey.METADATA, 12, {"topics": [{"name": name, "topic_id": None}],
                                            "allow_auto_topic_creation": False})  # fmt: skip
    finally:
        w.close()
    (topic,) = meta["topics"]
    return topic["topic_id"], topic["partitions"][0]["leader_epoch"]


def _call(w: Wire, api: int, group: str, topic_id: uuid.UUID, partition: dict[str, Any]) -> dict[str, Any]:
    """One partition's result; retried while the state topic is made and its partitions load."""
    deadline = time.monotonic() + 30
    while True:
        body = {"group_id": group, "topics": [{"topic_id": topic_id, "partitions": [partition]}]}
        (result,) = w.call(api, 0, body)["results"]
        (got,) = result["partitions"]
        if got["error_code"] not in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            return dict(got)
        assert time.monotonic() < deadline, got
        time.sleep(0.1)


def _find(w: Wire, key: str) -> None:
    """FindCoordinator (key type SHARE) makes __share_group_state; this broker coordinates every key."""
    deadline = time.monotonic() + 30
    while True:
        (got,) = w.call(ApiKey.FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": [key]})["coordinators"]
        if got["error_code"] == 0:
            return
        assert got["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE and time.monotonic() < deadline, got
        time.sleep(0.1)


def _write(state_epoch: int, leader_epoch: int, start: int, batches: list[tuple[int, int, int, int]]) -> dict[str, Any]:
    return {"partition": 0, "state_epoch": state_epoch, "leader_epoch": leader_epoch, "start_offset": start,
            "state_batches": [{"first_offset": f, "last_offset": last, "delivery_state": s, "delivery_count": c}
                              for f, last, s, c in batches]}  # fmt: skip


def test_share_state_rpcs_write_read_fence_and_delete(tmp_path: Any) -> None:
    with rill.testing.broker(CONFIGS, data_dir=tmp_path) as b:
        topic_id, _ = _topic(b, "t")
        w = Wire(b.bootstrap_servers)
        try:
            (bad,) = w.call(ApiKey.FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": ["no-colons"]})[
                "coordinators"]  # fmt: skip
            assert bad["error_code"] == ErrorCode.INVALID_REQUEST
            _find(w, "sg:ASNFZ4mrze8BI0VniavN7w:0")
            read = _call(w, ApiKey.READ_SHARE_GROUP_STATE, "sg", topic_id, {"partition": 0, "leader_epoch": 0})
            assert (read["error_code"], read["start_offset"], read["state_batches"]) == (0, -1, [])
            first = _write(0, 3, 10, [(10, 12, 2, 1), (13, 14, 0, 2)])
            assert _call(w, ApiKey.WRITE_SHARE_GROUP_STATE, "sg", topic_id, first)["error_code"] == 0
            # an update: the batches written laid over the state so far, the start offset moved
            assert _call(w, ApiKey.WRITE_SHARE_GROUP_STATE, "sg", topic_id,
                         _write(0, 3, 11, [(13, 13, 2, 2)]))["error_code"] == 0  # fmt: skip
            want = [(11, 12, 2, 1), (13, 13, 2, 2), (14, 14, 0, 2)]
            read = _call(w, ApiKey.READ_SHARE_GROUP_STATE, "sg", topic_id, {"partition": 0, "leader_epoch": 3})
            assert read["start_offset"] == 11
            assert [(x["first_offset"], x["last_offset"], x["delivery_state"], x["delivery_count"])
                    for x in read["state_batches"]] == want  # fmt: skip
            # a new leader's read fences the old leader
            assert _call(w, ApiKey.READ_SHARE_GROUP_STATE, "sg", topic_id,
                         {"partition": 0, "leader_epoch": 4})["error_code"] == 0  # fmt: skip
            assert _call(w, ApiKey.WRITE_SHARE_GROUP_STATE, "sg", topic_id,
                         _write(0, 3, 12, []))["error_code"] == ErrorCode.FENCED_LEADER_EPOCH  # fmt: skip
            assert _call(w, ApiKey.READ_SHARE_GROUP_STATE, "sg", topic_id,
                         {"partition": 0, "leader_epoch": 3})["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
            # a new state epoch (a reset) fences writers of the old state
            assert _call(w, ApiKey.INITIALIZE_SHARE_GROUP_STATE, "sg", topic_id,
                         {"partition": 0, "state_epoch": 1, "start_offset": 20})["error_code"] == 0  # fmt: skip
            assert _call(w, ApiKey.WRITE_SHARE_GROUP_STATE, "sg", topic_id,
                         _write(0, 4, 21, []))["error_code"] == ErrorCode.FENCED_STATE_EPOCH  # fmt: skip
            assert _call(w, ApiKey.WRITE_SHARE_GROUP_STATE, "sg", topic_id,
                         _write(1, 4, 21, [(21, 22, 4, 5)]))["error_code"] == 0  # fmt: skip
            summary = _call(w, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, "sg", topic_id,
                            {"partition": 0, "leader_epoch": -1})  # fmt: skip
            assert (summary["error_code"], summary["state_epoch"], summary["start_offset"]) == (0, 1, 21)
            unknown = _call(w, ApiKey.WRITE_SHARE_GROUP_STATE, "sg", uuid.uuid4(), _write(0, 0, 0, []))
            assert unknown["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            # the other group's state, deleted below, and this one's, read after a restart
            assert _call(w, ApiKey.WRITE_SHARE_GROUP_STATE, "gone", topic_id,
                         _write(0, 0, 5, [(5, 6, 2, 1)]))["error_code"] == 0  # fmt: skip
            assert _call(w, ApiKey.DELETE_SHARE_GROUP_STATE, "gone", topic_id, {"partition": 0})["error_code"] == 0
        finally:
            w.close()
        b.restart()
        w = Wire(b.bootstrap_servers)
        try:
            read = _call(w, ApiKey.READ_SHARE_GROUP_STATE, "sg", topic_id, {"partition": 0, "leader_epoch": 5})
            assert (read["error_code"], read["state_epoch"], read["start_offset"]) == (0, 1, 21)
            assert [(x["first_offset"], x["last_offset"], x["delivery_state"], x["delivery_count"])
                    for x in read["state_batches"]] == [(21, 22, 4, 5)]  # fmt: skip
            gone = _call(w, ApiKey.READ_SHARE_GROUP_STATE, "gone", topic_id, {"partition": 0, "leader_epoch": 5})
            assert (gone["error_code"], gone["start_offset"]) == (0, -1)
        finally:
            w.close()


def test_a_fenced_leader_does_not_answer_acknowledgements_as_durable() -> None:
    """A read at a newer leader epoch than the partition's (as a new leader's) fences the broker's own writes:
    the acknowledgement of records it handed out is answered with an error, and the state keeps them
    unacknowledged."""
    with rill.testing.broker(CONFIGS) as b:
        topic_id, epoch = _topic(b, "t")
        consumer = share_consumer(b.bootstrap_servers, "sg", ["t"], explicit=True)
        w = Wire(b.bootstrap_servers)
        try:
            warm_up(b.bootstrap_servers, consumer, "t", 1, explicit=True)
            produce(b.bootstrap_servers, "t", [(0, b"r%d" % i) for i in range(3)])
            held: list[Any] = []
            deadline = time.monotonic() + 30
            while len(held) < 3:
                assert time.monotonic() < deadline, held
                held += [m for m in consumer.poll(0.5) if m.error() is None]
            before = _call(w, ApiKey.READ_SHARE_GROUP_STATE, "sg", topic_id,
                           {"partition": 0, "leader_epoch": epoch + 1})  # the seam: a newer leader reads  # fmt: skip
            assert before["error_code"] == 0
            for m in held:
                consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            results = consumer.commit_sync(30)
            errors = [e for e in results.values() if e is not None]
            assert errors, f"the fenced leader answered its acknowledgements as durable: {results}"
            after = _call(w, ApiKey.READ_SHARE_GROUP_STATE, "sg", topic_id, {"partition": 0, "leader_epoch": epoch + 1})
            assert after["start_offset"] == before["start_offset"]
            assert after["state_batches"] == before["state_batches"]
        finally:
            w.close()
            consumer.close()


def test_initialize_resets_a_share_partition_its_leader_serves() -> None:
    """The persister's initialize, as a reset calls it through the share partition manager: the share partition
    starts again at the offset given, at a new state epoch, and what was accepted after it is delivered again."""
    import asyncio

    with rill.testing.broker(CONFIGS) as b:
        topic_id, _ = _topic(b, "t")
        consumer = share_consumer(b.bootstrap_servers, "sg", ["t"])
        try:
            warm_up(b.bootstrap_servers, consumer, "t", 1)
            produce(b.bootstrap_servers, "t", [(0, b"r%d" % i) for i in range(5)])
            got: list[Any] = []
            deadline = time.monotonic() + 30
            while len(got) < 5:
                assert time.monotonic() < deadline, got
                got += [m for m in consumer.poll(0.5) if m.error() is None and m.value() != b"warm"]
            consumer.commit_sync(10)
        finally:
            consumer.close()
        first = min(m.offset() for m in got)
        manager = b.broker.services.share.partitions
        loop = b.broker._background.get_loop()
        reset = asyncio.run_coroutine_threadsafe(manager.initialize("sg", (topic_id, 0), first), loop).result(30)
        assert reset == ErrorCode.NO_ERROR
        w = Wire(b.bootstrap_servers)
        try:
            summary = _call(w, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, "sg", topic_id,
                            {"partition": 0, "leader_epoch": -1})  # fmt: skip
            assert (summary["state_epoch"], summary["start_offset"]) == (1, first)
        finally:
            w.close()
        again = share_consumer(b.bootstrap_servers, "sg", ["t"])
        try:
            seen: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(seen) < 5:
                assert time.monotonic() < deadline, seen
                seen += [m.value() for m in again.poll(0.5) if m.error() is None and m.value() != b"warm"]
            assert sorted(seen) == [b"r%d" % i for i in range(5)]
        finally:
            again.close()
