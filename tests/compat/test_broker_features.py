"""Broker behaviour seen through confluent-kafka: restarts, big messages, many partitions, offsets by time,
DeleteRecords."""

from __future__ import annotations

import resource
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

import rill.testing


def _consume(bootstrap: str, topic: str, partition: int, start: int, n: int, timeout: float = 60) -> list:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"t-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "fetch.message.max.bytes": 10 * 1024 * 1024,
        }
    )
    c.assign([TopicPartition(topic, partition, start)])
    got: list = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.5):
                assert m.error() is None, m.error()
                got.append(m)
    finally:
        c.close()
    return got


@pytest.mark.slow
def test_idempotent_producer_across_broker_restart(tmp_path) -> None:
    n = 20_000
    with rill.testing.broker(subprocess=True, data_dir=tmp_path / "data") as b:
        p = Producer(
            {
                "bootstrap.servers": b.bootstrap_servers,
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 60000,
                "retry.backoff.ms": 50,
            }
        )
        errors: list = []
        done = threading.Event()

        def produce() -> None:
            for i in range(n):
                while True:
                    try:
                        p.produce(
                            "idem",
                            str(i).encode(),
                            partition=0,
                            on_delivery=lambda err, _m: errors.append(err) if err else None,
                        )
                        break
                    except BufferError:
                        p.poll(0.01)
                if i % 100 == 0:
                    p.poll(0)
                    time.sleep(0.002)
            p.flush(60)
            done.set()

        t = threading.Thread(target=produce)
        t.start()
        time.sleep(1.0)
        b.restart()
        t.join(90)
        assert done.is_set()
        assert not errors, errors[:3]
        got = _consume(b.bootstrap_servers, "idem", 0, 0, n)
        values = [int(m.value()) for m in got]
        assert values == list(range(n)), "duplicates or gaps after a broker restart"


def test_five_megabyte_message(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("big", 1, 1, config={"max.message.bytes": str(8 * 1024 * 1024)})])[
        "big"
    ].result(10)
    payload = bytes(range(256)) * (5 * 1024 * 1024 // 256)
    p = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 16 * 1024 * 1024})
    p.produce("big", payload, partition=0)
    assert p.flush(30) == 0
    got = _consume(bootstrap, "big", 0, 0, 1)
    assert got[0].value() == payload
    # Above the topic's limit the broker refuses it with MESSAGE_TOO_LARGE.
    errs: list = []
    p.produce("big", payload * 2, partition=0, on_delivery=lambda err, _m: errs.append(err))
    p.flush(30)
    assert errs and errs[0] is not None and errs[0].name() == "MSG_SIZE_TOO_LARGE"


@pytest.mark.slow
def test_thousand_partitions(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("wide", 1000, 1)])["wide"].result(60)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(1000):
        p.produce("wide", f"v{i}".encode(), partition=i)
    assert p.flush(60) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wide-reader", "enable.auto.commit": False})
    c.assign([TopicPartition("wide", i, 0) for i in range(1000)])
    seen = {}
    deadline = time.monotonic() + 60
    while len(seen) < 1000 and time.monotonic() < deadline:
        for m in c.consume(1000, timeout=0.5):
            assert m.error() is None
            seen[m.partition()] = m.value()
    c.close()
    assert seen == {i: f"v{i}".encode() for i in range(1000)}



def test_many_partitions_under_the_common_open_files_limit(tmp_path) -> None:
    """Every segment holds a few descriptors, so 400 partitions need more than the soft limit of 1,024
    that many machines start processes with; the broker raises its soft limit to the hard one, as
    the JVM does for Kafka, instead of failing the topic's creation with EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.fail(f"this test needs a hard limit on open files of at least 4096, not {hard}")
    b = rill.testing.TestBroker({}, subprocess=True, data_dir=tmp_path)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        b.start()  # the broker process inherits the low soft limit
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.create_topics([NewTopic("wide", 400, 1)])["wide"].result(60)
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 20})
        errors: list = []
        for i in range(400):
            p.produce("wide", f"v{i}".encode(), partition=i, on_delivery=lambda err, _m: errors.append(err))
        assert p.flush(60) == 0
        assert len(errors) == 400 and not any(errors)
        assert [m.value() for m in _consume(b.bootstrap_servers, "wide", 399, 0, 1)] == [b"v399"]
        assert "Raised the open files limit from 1024 to" in (tmp_path / "broker.log").read_text()
    finally:
        b.close()

def test_list_offsets_by_timestamp_and_delete_records(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    base = 1_800_000_000_000
    for i in range(100):
        p.produce("times", f"{i}".encode(), partition=0, timestamp=base + i * 1000)
        p.flush(10)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "times-reader"})
    found = c.offsets_for_times([TopicPartition("times", 0, base + 42_500)], timeout=10)
    assert found[0].offset == 43
    found = c.offsets_for_times([TopicPartition("times", 0, base + 10**9)], timeout=10)
    assert found[0].offset == -1  # past the last timestamp: no offset (the end)
    low, high = c.get_watermark_offsets(TopicPartition("times", 0), timeout=10)
    assert (low, high) == (0, 100)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.delete_records([TopicPartition("times", 0, 60)])
    for fut in result.values():
        assert fut.result(10).low_watermark == 60
    low, high = c.get_watermark_offsets(TopicPartition("times", 0), timeout=10, cached=False)
    assert (low, high) == (60, 100)
    got = _consume(bootstrap, "times", 0, 60, 40)
    assert [int(m.value()) for m in got] == list(range(60, 100))
    c.close()

    cfg = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "times")])
    entries = next(iter(cfg.values())).result(10)
    assert entries["retention.ms"].value == "604800000"
    assert entries["cleanup.policy"].value == "delete"


def test_timestamp_bounds_refuse_records_from_the_future(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"bounded-{uuid.uuid4().hex[:8]}"
    configs = {"message.timestamp.after.max.ms": "60000", "message.timestamp.before.max.ms": "3600000"}
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(10)
    reports: list[tuple[int | None, bytes]] = []

    def on_delivery(err, msg) -> None:
        reports.append((err.code() if err is not None else None, msg.value()))

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0, "on_delivery": on_delivery})
    now = int(time.time() * 1000)
    for value, ts in ((b"now", now), (b"in an hour", now + 3_600_000), (b"two hours ago", now - 7_200_000)):
        p.produce(topic, value, partition=0, timestamp=ts)
        p.flush(10)
    assert reports == [
        (None, b"now"),
        (KafkaError.INVALID_TIMESTAMP, b"in an hour"),
        (KafkaError.INVALID_TIMESTAMP, b"two hours ago"),
    ]
    assert [m.value() for m in _consume(bootstrap, topic, 0, 0, 1)] == [b"now"]
    entries = next(iter(admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values())).result(10)
    assert entries["message.timestamp.after.max.ms"].value == "60000"


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_a_compacted_topic_refuses_records_without_a_key(rill_broker, compression: str) -> None:
    bootstrap = rill_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"compacted-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})])[topic].result(10)
    reports: list[tuple[int | None, bytes]] = []

    def on_delivery(err, msg) -> None:
        reports.append((err.code() if err is not None else None, msg.value()))

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 0,
            "retries": 0,
            "compression.type": compression,
            "on_delivery": on_delivery,
        }
    )
    p.produce(topic, b"keyed", key=b"k1", partition=0)
    p.flush(10)
    p.produce(topic, b"no key", partition=0)
    p.flush(10)
    assert reports == [(None, b"keyed"), (KafkaError.INVALID_RECORD, b"no key")]
    assert [(m.key(), m.value()) for m in _consume(bootstrap, topic, 0, 0, 1)] == [(b"k1", b"keyed")]


def test_a_second_broker_on_the_same_data_refuses_to_start(tmp_path) -> None:
    topic = "shared"
    with rill.testing.broker(subprocess=True, data_dir=tmp_path / "data") as b:
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0})
        for i in range(100):
            p.produce(topic, f"before-{i}".encode(), partition=0)
        assert p.flush(10) == 0
        second = subprocess.run(
            [sys.executable, "-m", "rill", "broker", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
             "--override", f"log.dirs={b.overrides['log.dirs']}"],
            capture_output=True, text=True, timeout=60,
        )
        assert second.returncode == 1
        assert "another broker process is using the log dir" in second.stderr
        for i in range(100):
            p.produce(topic, f"after-{i}".encode(), partition=0)
        assert p.flush(10) == 0
        values = [m.value() for m in _consume(b.bootstrap_servers, topic, 0, 0, 200)]
        assert values == [f"before-{i}".encode() for i in range(100)] + [f"after-{i}".encode() for i in range(100)]


@pytest.mark.parametrize("kill", [False, True], ids=["clean", "sigkill"])
def test_acknowledged_records_survive_a_restart(tmp_path, kill: bool) -> None:
    n = 5_000
    with rill.testing.broker(subprocess=True, data_dir=tmp_path / "data") as b:
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "acks": "all", "linger.ms": 2})
        for i in range(n):
            p.produce("durable", str(i).encode(), partition=0)
        assert p.flush(30) == 0
        b.restart(kill=kill)
        got = _consume(b.bootstrap_servers, "durable", 0, 0, n, timeout=30)
        assert [int(m.value()) for m in got] == list(range(n))
        c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "durable-check"})
        assert c.get_watermark_offsets(TopicPartition("durable", 0), timeout=10) == (0, n)
        c.close()


def test_authorized_operations_are_every_supported_operation_without_an_authorizer(rill_broker) -> None:
    """Asked for, the AuthorizedOperations of DescribeCluster, Metadata (topics) and DescribeGroups list what
    Kafka lists when no authorizer is configured: every operation the resource type supports."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation

    bootstrap = rill_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"ops-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert set(cluster.authorized_operations) == {
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE,
    }
    described = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(10)
    assert set(described.authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.DELETE,
        AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    }
    group = f"ops-{uuid.uuid4().hex[:8]}"
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    c.close()
    g = admin.describe_consumer_groups([group], include_authorized_operations=True)[group].result(10)
    assert set(g.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}
    # Not asked for: omitted, as before.
    assert admin.describe_cluster().result(10).authorized_operations is None


def test_transactional_producers_of_three_clients_initialize(rill_broker) -> None:
    """``init_transactions`` of librdkafka, kafka-python and aiokafka finds the transaction coordinator and gets a
    producer id (it used to be refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED: transactions were not built)."""
    import asyncio

    import aiokafka
    import kafka

    bootstrap = rill_broker.bootstrap_servers
    start = time.monotonic()
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-ck"})
    p.init_transactions(30)
    p.begin_transaction()
    p.commit_transaction(30)

    kp = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id="tx-kp", max_block_ms=30000)
    kp.init_transactions()
    kp.close(timeout=5)

    async def aio() -> None:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="tx-aio")
        await asyncio.wait_for(producer.start(), 30)
        await producer.stop()

    asyncio.run(aio())
    assert time.monotonic() - start < 20


def test_a_join_group_held_for_the_rebalance_is_not_logged_as_slow(caplog) -> None:
    """JoinGroup waits on purpose (here the new group's initial rebalance delay, 1.5 s), like a Fetch waits
    for data: the broker does not warn "Slow request" for it."""
    with rill.testing.broker({"group.initial.rebalance.delay.ms": "1500"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.create_topics([NewTopic("held", 1, 1)])["held"].result(10)
        c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "held-group",
                      "session.timeout.ms": 6000})
        assigned: list[object] = []
        with caplog.at_level("WARNING", logger="rill.api.dispatcher"):
            start = time.monotonic()
            c.subscribe(["held"], on_assign=lambda _c, parts: assigned.extend(parts))
            while not assigned and time.monotonic() - start < 30:
                c.poll(0.2)
            waited = time.monotonic() - start
        c.close()
    assert assigned and waited > 1.5  # the JoinGroup was held past the dispatcher's 1 s threshold
    assert not [r for r in caplog.records if "Slow request" in r.getMessage()]


def test_a_topic_whose_logs_cannot_all_be_made_is_taken_back(tmp_path) -> None:
    """With too few file descriptors for a topic's logs, CreateTopics is refused (POLICY_VIOLATION, naming the
    open-files limit) before any log is made, and leaves nothing behind: the topic used to stay in the metadata,
    half its logs made, and the broker could not start again ("Too many open files" while loading them)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tmp_path / "data"
    limited = (
        "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (300, 300)); "
        "sys.argv = ['rill', *sys.argv[1:]]; runpy.run_module('rill', run_name='__main__')"
    )
    args = [sys.executable, "-c", limited, "broker", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", f"log.dirs={data}"]  # fmt: skip

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(b"rill broker ready on"):
                return proc
        proc.wait(10)
        pytest.fail(f"the broker did not start again (exit {proc.returncode})")

    proc = start()
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        with pytest.raises(KafkaException) as e:
            admin.create_topics([NewTopic("wide", 600, 1)])["wide"].result(60)  # one descriptor each: 600 > 300
        assert e.value.args[0].name() == "POLICY_VIOLATION" and "open-files limit" in e.value.args[0].str()
        assert "wide" not in admin.list_topics(timeout=10).topics
        assert not [d for d in data.iterdir() if d.name.startswith("wide-") and not d.name.endswith("-delete")]
        admin.create_topics([NewTopic("narrow", 10, 1)])["narrow"].result(30)
    finally:
        proc.terminate()
        proc.wait(30)
    proc = start()
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        assert set(admin.list_topics(timeout=10).topics) == {"narrow"}
    finally:
        proc.terminate()
        proc.wait(30)
