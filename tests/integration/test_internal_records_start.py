"""Nothing a client writes stops a broker, a registry or a mirror from starting, or from serving: records of any
bytes (the writers' layouts with any field values, cut short, random) written straight into the logs of
``__consumer_offsets``, ``__transaction_state`` and ``__share_group_state`` (clients can no longer produce
there, but a file can hold anything), produced to a registry's ``_schemas`` topic and to a mirror's offset syncs
topic. Each starts, and real clients produce, consume, commit, describe groups, run a transaction, read a share
group, register schemas, mirror a topic."""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.integration._internal_log import append_on_disk
from tests.integration.broker._wire import Wire
from tests.integration.share._share import share_consumer, warm_up
from tests.integration.transactions._txn import find_txn_coordinator
from tests.internal_records import KeyValue, offsets_records, schemas_records, share_state_records, txn_records

import rill.testing
from rill.common import TopicPartition as TP
from rill.mirror import MirrorConfig, MirrorMaker
from rill.mirror.offset_sync import encode_sync, syncs_topic
from rill.registry.schemas import SchemaText
from rill.registry.store import Version, schema_record
from rill.testing.registry import registry

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

CONFIGS = {"offsets.topic.num.partitions": "2", "transaction.state.log.num.partitions": "2"}
INTERNAL = ("__consumer_offsets", "__transaction_state")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data directory of a stopped broker with both internal topics and a topic ``plain``."""
    data = tmp_path_factory.mktemp("template")
    with rill.testing.broker(CONFIGS, data_dir=data) as b:
        _produce_and_read(b.bootstrap_servers, b"first")
        _commit_and_read_back(b.bootstrap_servers, "first-group")
        w = Wire(b.bootstrap_servers)
        assert find_txn_coordinator(w, "first-txn")["error_code"] == 0
        w.close()
    return data


def _produce_and_read(bootstrap: str, value: bytes) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce("plain", value)
    assert p.flush(15) == 0
    assert value in _read_committed(bootstrap, "plain")


def _read_committed(bootstrap: str, topic: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "isolation.level": "read_committed",
                  "enable.auto.commit": False})  # fmt: skip
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)
        c.assign([TopicPartition(topic, 0, low)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and c.position([TopicPartition(topic, 0)])[0].offset < high:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value())
        return got
    finally:
        c.close()


def _commit_and_read_back(bootstrap: str, group: str) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition("plain", 0, 1)], asynchronous=False)
        assert [tp.offset for tp in c.committed([TopicPartition("plain", 0)], timeout=15)] == [1]
    finally:
        c.close()


def _serves(bootstrap: str) -> None:
    """Real clients: produce and consume, commit and read back, every group listed and described, and a
    transaction of an id the records may have shaped (``tx-a``) committed and read by read_committed."""
    _produce_and_read(bootstrap, b"again")
    _commit_and_read_back(bootstrap, "after-group")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups(request_timeout=15).result(20)
    ids = [g.group_id for g in listed.valid]
    assert "after-group" in ids
    for group_id, future in admin.describe_consumer_groups(ids, request_timeout=15).items():
        assert future.result(20).group_id == group_id
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-a", "transaction.timeout.ms": 60000})
    p.init_transactions(60)
    p.begin_transaction()
    p.produce("plain", b"in-txn")
    p.commit_transaction(30)
    assert b"in-txn" in _read_committed(bootstrap, "plain")


def _start_on(template: Path, offsets: list[KeyValue], txns: list[KeyValue]) -> None:
    work = Path(tempfile.mkdtemp(prefix="rill-internal-"))
    try:
        data = work / "data"
        shutil.copytree(template, data)
        for p in range(2):
            append_on_disk(data / "logs", TP("__consumer_offsets", p), offsets, per_batch=3)
            append_on_disk(data / "logs", TP("__transaction_state", p), txns, per_batch=3)
        with rill.testing.broker(CONFIGS, data_dir=data) as b:
            _serves(b.bootstrap_servers)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow, HealthCheck.data_too_large])
@example(offsets=[(b"\x00", b"v")], txns=[(b"\x00", b"v")])  # the record
@given(offsets=st.lists(offsets_records, min_size=1, max_size=40), txns=st.lists(txn_records, min_size=1, max_size=40))
def test_a_broker_starts_and_serves_whatever_its_internal_logs_hold(
    template: Path, offsets: list[KeyValue], txns: list[KeyValue]
) -> None:
    _start_on(template, offsets, txns)


# -- __share_group_state ----------------------------------------------------------------------------------------

SHARE_CONFIGS = {"share.coordinator.state.topic.num.partitions": "2", "group.share.heartbeat.interval.ms": "500"}


@pytest.fixture(scope="module")
def share_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data directory of a stopped broker whose share group ``sg`` read topic ``queue``."""
    data = tmp_path_factory.mktemp("share-template")
    with rill.testing.broker(SHARE_CONFIGS, data_dir=data) as b:
        _create(b.bootstrap_servers, NewTopic("queue", 1))
        c = share_consumer(b.bootstrap_servers, "sg", ["queue"])
        try:
            warm_up(b.bootstrap_servers, c, "queue", 1)
        finally:
            c.close()
    return data


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                               HealthCheck.too_slow, HealthCheck.data_too_large])
@example(records=[(b"\x00", b"v"), (b"\x00\x00\x00\x02sg", None)])
@given(records=st.lists(share_state_records, min_size=1, max_size=40))
def test_a_broker_starts_and_serves_share_groups_whatever_its_share_state_holds(
    share_template: Path, records: list[KeyValue]
) -> None:
    work = Path(tempfile.mkdtemp(prefix="rill-share-state-"))
    try:
        data = work / "data"
        shutil.copytree(share_template, data)
        for p in range(2):
            append_on_disk(data / "logs", TP("__share_group_state", p), records, per_batch=3)
        with rill.testing.broker(SHARE_CONFIGS, data_dir=data) as b:
            for group in ("sg", "after-share"):
                c = share_consumer(b.bootstrap_servers, group, ["queue"])
                try:
                    warm_up(b.bootstrap_servers, c, "queue", 1)
                finally:
                    c.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- the schema registry --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plain_broker() -> Iterator[rill.testing.TestBroker]:
    with rill.testing.broker() as b:
        yield b


def _create(bootstrap: str, topic: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the result: a dropped one fails it
    admin.create_topics([topic])[topic.topic].result(15)


def _http(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, method=method,
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


_runs = iter(range(1_000_000))
_GOOD = SchemaText("AVRO", '{"type":"fixed","name":"Good","size":4}')


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow, HealthCheck.data_too_large])
@example(records=[(b"[" * 5000, b"{}"), (b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}', b"[1]")])
@given(records=st.lists(schemas_records, min_size=1, max_size=40))
def test_a_registry_starts_and_serves_whatever_its_topic_holds(
    plain_broker: rill.testing.TestBroker, records: list[KeyValue]
) -> None:
    """Anything produced to the registry's topic, then a record the registry wrote itself (in the same poll of
    its reader: one that raised took those after it down with it): the registry starts, has that record, and
    registers and serves schemas."""
    run = next(_runs)
    topic = f"_schemas-{run}"
    _create(plain_broker.bootstrap_servers, NewTopic(topic, 1, config={"cleanup.policy": "compact"}))
    p = Producer({"bootstrap.servers": plain_broker.bootstrap_servers, "linger.ms": 50})
    for key, value in [*records, schema_record(Version("written", 1, 7, _GOOD, False))]:
        p.produce(topic, value, key or b"no-key", partition=0)  # a compacted topic takes keyed records only
    assert p.flush(15) == 0
    with registry(plain_broker.bootstrap_servers, topic=topic, group=f"registry-{run}", startup_timeout=90) as r:
        status, body = _http("GET", f"{r.url}/subjects/written/versions/1")
        assert status == 200 and body["id"] == 7, body
        assert _http("GET", f"{r.url}/subjects")[0] == 200
        assert _http("GET", f"{r.url}/config")[0] == 200
        new = '{"type":"fixed","name":"New","size":2}'
        status, body = _http("POST", f"{r.url}/subjects/fresh-{run}/versions", {"schema": new})
        assert status == 200, body
        assert _http("GET", f"{r.url}/schemas/ids/{body['id']}")[1]["schema"] == new


# -- the mirror's offset syncs --------------------------------------------------------------------------------


def test_a_mirror_starts_and_translates_past_syncs_it_did_not_write() -> None:
    """The syncs topic holds records no mirror wrote, among them a sync of the copied partition with a negative
    target offset below where the copy resumes. The mirror starts, copies, and carries a group's offset over as
    a real position (a negative one was committed as a logical offset, or refused)."""
    with rill.testing.broker() as source, rill.testing.broker() as target:
        src, dst = source.bootstrap_servers, target.bootstrap_servers
        _create(src, NewTopic("orders", 1))
        p = Producer({"bootstrap.servers": src})
        for i in range(20):
            p.produce("orders", b"o%d" % i)
        assert p.flush(15) == 0
        config = MirrorConfig(src, dst, "orders", refresh_interval_s=1.0, group_sync_interval_s=0.5)
        # The mirror's own group has copied up to 15 before (a restart resumes there); the group to carry over
        # has read up to 10.
        for group, offset in ((config.group_id, 15), ("billing", 10)):
            c = Consumer({"bootstrap.servers": src, "group.id": group, "enable.auto.commit": False})
            c.commit(offsets=[TopicPartition("orders", 0, offset)], asynchronous=False)
            c.close()
        syncs = syncs_topic(config.name)
        _create(dst, NewTopic(syncs, 1))
        junk: list[KeyValue] = [
            (b"\xff\xfe", b"1 2"), (None, b"x"), (b"orders:0", None), (b"orders:x", b"1 2"), (b":0", b"1 2"),
            (b"orders:0", b"1"), (b"orders:-1", b"1 2"), (b"orders:7", "3 \u0663".encode()),
            (b"orders:0", b"99999999999999999999999 1"), (b"orders:0", b"5 -7"), encode_sync("orders", 0, 5, -7),
        ]  # fmt: skip
        p = Producer({"bootstrap.servers": dst})
        for key, value in junk:
            p.produce(syncs, value, key, partition=0)
        assert p.flush(15) == 0

        mirror = MirrorMaker(config)
        stop = threading.Event()
        thread = threading.Thread(target=mirror.run, args=(stop,), daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + 90
            while mirror.stats.records < 5 or mirror.stats.group_offsets_written < 1:
                assert thread.is_alive() and time.monotonic() < deadline, (mirror.stats, "mirror did not copy")
                time.sleep(0.2)
        finally:
            stop.set()
            thread.join(60)
        admin = AdminClient({"bootstrap.servers": dst})
        offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("billing")])["billing"].result(10)
        # 10 is below where this copy began (15, now at target offset 0): the first record copied
        assert [(tp.topic, tp.partition, tp.offset) for tp in offsets.topic_partitions] == [("orders", 0, 0)]

