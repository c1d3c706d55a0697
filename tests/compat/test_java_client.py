"""Apache Kafka's Java client 3.9.1 (the line Spark 4.x uses) against a Rill broker.

``java/RillJavaCheck.java`` is compiled once per session against the client jars that the test extra installs
(``shigawire-apache-flink-libraries`` ships them under ``pyflink/lib``) and run once per scenario. It prints what the
Java client saw; these tests compare that output line for line with what the records must be.

The Java client fetches in incremental fetch sessions (KIP-227, with topic ids: Fetch v13+), which Rill serves.
The producer runs with idempotence on, the Java default.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from tests.compat._data import BASE_TS, CODECS, make_records
from tests.integration.broker._wire import Wire
from tests.integration.telemetry._telemetry import alter, free_port, pushed, scrape

import rill.testing

JARS = ["kafka-clients.jar", "lz4-java.jar", "snappy-java.jar", "zstd-jni.jar", "slf4j-api.jar"]
JVM_FLAGS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
SOURCE = Path(__file__).parent / "java" / "RillJavaCheck.java"
N_JAVA = 2000
SETUP_HINT = "scripts/test.sh installs it (apt default-jdk-headless; pip install -e '.[test]')"

Runner = Callable[..., list[str]]

# The records carry 2023 timestamps: keep retention from deleting them should a test outlive the first check.
pytestmark = pytest.mark.rill_broker_config(**{"log.retention.ms": "-1"})


def client_jars() -> list[Path]:
    """The Java client's jars from the installed wheel; a clear failure when they are not there."""
    spec = importlib.util.find_spec("pyflink")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"the Java Kafka client jars are missing (package shigawire-apache-flink-libraries): {SETUP_HINT}")
    for root in spec.submodule_search_locations:
        lib = Path(root) / "lib"
        if all((lib / jar).is_file() for jar in JARS):
            return [lib / jar for jar in JARS]
    pytest.fail(f"pyflink/lib lacks one of {JARS}: {SETUP_HINT}")


@pytest.fixture(scope="session")
def java_check(tmp_path_factory: pytest.TempPathFactory) -> Runner:
    """Compile RillJavaCheck once; returns ``run(bootstrap, scenario, *args, timeout=...) -> stdout lines``."""
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        pytest.fail(f"a JDK (javac and java) is needed for the Java client tests: {SETUP_HINT}")
    out_dir = tmp_path_factory.mktemp("rill-java")
    jars = [str(j) for j in client_jars()]
    compiled = subprocess.run(
        [javac, "-d", str(out_dir), "-cp", ":".join(jars), str(SOURCE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if compiled.returncode != 0:
        pytest.fail(f"javac failed:\n{compiled.stdout}{compiled.stderr}")
    classpath = ":".join([str(out_dir), *jars])

    def run(bootstrap: str, scenario: str, *args: object, timeout: float = 90) -> list[str]:
        cmd = [java, *JVM_FLAGS, "-cp", classpath, "RillJavaCheck", bootstrap, scenario, *map(str, args)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"RillJavaCheck {scenario} {args} did not finish in {timeout} s; stderr:\n{_text(e.stderr)}")
        if done.returncode != 0:
            stderr = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("SLF4J:"))
            pytest.fail(f"RillJavaCheck {scenario} {args} exited {done.returncode}:\n{stderr[-4000:]}")
        return done.stdout.splitlines()

    return run


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")


def expected_lines(n: int, seed: str, partitions: int) -> list[str]:
    """The ``rec`` lines RillJavaCheck prints for records 0..n-1 of ``seed``, sorted by partition and offset."""
    lines: list[tuple[int, int, str]] = []
    for i, r in enumerate(make_records(n, seed=seed)):
        p, offset = i % partitions, i // partitions
        headers = ",".join(f"{k}={v.hex()}" for k, v in r.headers)
        lines.append((p, offset, f"rec {p} {offset} {r.timestamp} 0 {r.key.hex()} {r.value.hex()} {headers}"))
    return [line for _, _, line in sorted(lines)]


def assert_lines(got: list[str], want: list[str]) -> None:
    """Compare without pytest's full diff of thousands of long lines: name the first difference."""
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            pytest.fail(f"line {i} differs:\n got: {g[:300]}\nwant: {w[:300]}")
    assert len(got) == len(want), f"{len(got)} lines, expected {len(want)}; tail: {got[-3:]}"


def read_all_confluent(bootstrap: str, topic: str, n: int) -> list[ck.Message]:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    got: list[ck.Message] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            for m in consumer.consume(1000, timeout=0.5):
                assert m.error() is None, m.error()
                got.append(m)
    finally:
        consumer.close()
    return got


# ---------------------------------------------------------------------------------------------------------- admin


@pytest.mark.timeout(120)
def test_admin_client(rill_broker, java_check: Runner) -> None:
    """Create with configs, describe (by name and by id), describe and alter configs, list offsets, delete records,
    grow, delete."""
    out = java_check(rill_broker.bootstrap_servers, "admin", "java-admin")
    ts = [BASE_TS + 297, BASE_TS + 298, BASE_TS + 299]
    assert out == [
        "cluster nodes=1 controller=true clusterId=true",
        "created java-admin partitions=3 replicationFactor=1 topicId=true",
        "create again: TopicExistsException",
        "describe java-admin internal=false p0:replicas=1,isr=1 p1:replicas=1,isr=1 p2:replicas=1,isr=1",
        "describe by id: java-admin partitions=3",
        "config retention.ms=3600000 source=DYNAMIC_TOPIC_CONFIG",
        "config cleanup.policy=delete source=DYNAMIC_TOPIC_CONFIG",
        "config max.message.bytes=2000000 source=DYNAMIC_TOPIC_CONFIG",
        "config segment.bytes=1073741824 source=DEFAULT_CONFIG",
        "altered retention.ms=7200000 source=DYNAMIC_TOPIC_CONFIG",
        "altered max.message.bytes=1048588 source=DEFAULT_CONFIG",
        "listOffsets earliest p0=0@-1 p1=0@-1 p2=0@-1",
        "listOffsets latest p0=100@-1 p1=100@-1 p2=100@-1",
        f"listOffsets maxTimestamp p0=99@{ts[0]} p1=99@{ts[1]} p2=99@{ts[2]}",
        f"listOffsets forTimestamp p0=50@{BASE_TS + 150} p1=50@{BASE_TS + 151} p2=50@{BASE_TS + 152}",
        "deleteRecords p0 low=40 p1 low=100",
        "deleteRecords beyond end: OffsetOutOfRangeException",
        "listOffsets earliest p0=40@-1 p1=100@-1 p2=0@-1",
        "createPartitions partitions=4",
        "deleted java-admin",
    ]


@pytest.mark.timeout(60)
def test_list_offsets_max_timestamp_answers_offset_and_timestamp_in_their_fields(rill_broker) -> None:
    """Regression (found by the Java admin client): ListOffsets with the max-timestamp spec (-3) once answered the
    timestamp in the offset field and the offset in the timestamp field."""
    bootstrap = rill_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("max-ts", 1, 1)])["max-ts"].result(15)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    # The largest timestamp sits in the middle of the log, in a batch of its own.
    for i, ts in enumerate([BASE_TS + 5, BASE_TS + 50, BASE_TS + 7]):
        producer.produce("max-ts", f"v{i}".encode(), partition=0, timestamp=ts)
        assert producer.flush(15) == 0
    tp = ck.TopicPartition("max-ts", 0)
    info = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(15)
    assert (info.offset, info.timestamp) == (1, BASE_TS + 50)


# ------------------------------------------------------------------------------------------- produce and consume


@pytest.mark.timeout(150)
@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_produce_then_assign_consume(rill_broker, java_check: Runner, codec: str) -> None:
    """The Java producer writes keyed records with headers and timestamps; the Java consumer (assign +
    seekToBeginning) reads them back exactly, and so does librdkafka."""
    bootstrap = rill_broker.bootstrap_servers
    topic, seed = f"java-{codec}", f"java-{codec}"
    assert java_check(bootstrap, "produce", topic, 1, codec, N_JAVA, seed) == [
        f"produced {N_JAVA} codec={codec} partitions=1"
    ]
    out = java_check(bootstrap, "consume", topic, N_JAVA)
    assert out[-1] == f"consumed {N_JAVA}"
    assert_lines(out[:-1], expected_lines(N_JAVA, seed, 1))

    got = read_all_confluent(bootstrap, topic, N_JAVA)
    assert len(got) == N_JAVA
    for i, (m, r) in enumerate(zip(got, make_records(N_JAVA, seed=seed), strict=True)):
        assert (m.offset(), m.key(), m.value()) == (i, r.key, r.value)
        assert m.timestamp() == (ck.TIMESTAMP_CREATE_TIME, r.timestamp)
        assert m.headers() == r.headers


@pytest.mark.timeout(120)
def test_java_consumer_reads_what_librdkafka_wrote(rill_broker, java_check: Runner) -> None:
    """Batches from another client (zstd, three partitions) read by the Java consumer across partitions; then the
    offset lookups Spark's Kafka source makes."""
    bootstrap = rill_broker.bootstrap_servers
    seed, n, partitions = "from-librdkafka", 1500, 3
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("java-mixed", partitions, 1)])["java-mixed"].result(15)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": "zstd", "linger.ms": 5})
    for i, r in enumerate(make_records(n, seed=seed)):
        producer.produce(
            "java-mixed", r.value, r.key, partition=i % partitions, timestamp=r.timestamp, headers=r.headers
        )
    assert producer.flush(30) == 0
    out = java_check(bootstrap, "consume", "java-mixed", n)
    assert out[-1] == f"consumed {n}"
    assert_lines(out[:-1], expected_lines(n, seed, partitions))

    # What Spark's source needs besides reads: offsetsForTimes, beginning/end offsets, and OffsetOutOfRange.
    assert java_check(bootstrap, "edges", "java-mixed", BASE_TS + 10) == [
        f"offsetsForTimes ts p0=4@{BASE_TS + 12} p1=3@{BASE_TS + 10} p2=3@{BASE_TS + 11}",
        "offsetsForTimes future p0=- p1=- p2=-",
        "offsets p0=0..500 p1=0..500 p2=0..500",
        "seek beyond end: OffsetOutOfRangeException {java-mixed-0=505}",
    ]


# ----------------------------------------------------------------------------------------------- consumer groups


@pytest.mark.timeout(180)
@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_group_commits_then_two_members_resume(rill_broker, java_check: Runner, assignor: str) -> None:
    """One member reads half of each partition and commits it with metadata; two members then join the same group,
    split the partitions, resume from the committed offsets and together read the rest exactly once."""
    bootstrap = rill_broker.bootstrap_servers
    topic, seed, n, partitions = f"java-group-{assignor}", f"group-{assignor}", 900, 3
    java_check(bootstrap, "produce", topic, partitions, "lz4", n, seed)
    out = java_check(bootstrap, "group", topic, f"g-{assignor}", assignor, n, timeout=150)
    summary = [line for line in out if not line.startswith("rec ")]
    assert summary == [
        "phase1 committed p0=150:phase1-0 p1=150:phase1-1 p2=150:phase1-2",
        "phase2 resumed p0=150 p1=150 p2=150",
        "phase2 both members held partitions=true",
        "final committed p0=300 p1=300 p2=300",
        f"consumed {n}",
    ]
    assert_lines([line for line in out if line.startswith("rec ")], expected_lines(n, seed, partitions))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_the_java_producer_fails_exactly_the_records_named_in_record_errors(
    rill_broker, java_check: Runner, codec: str
) -> None:
    """A batch with keyless records, to a compacted topic: the broker names every one of them in
    RecordErrors, and the Java producer fails exactly those with InvalidRecordException and the rest
    of the batch with its "part of a batch which had one more more invalid records" error."""
    lines = [line for line in java_check(rill_broker.bootstrap_servers, "record-errors", f"re-{codec}", 10, codec)
             if line.startswith("result ")]
    assert len(lines) == 10, lines
    for i, line in enumerate(lines):
        _, index, kind, *_ = line.split(" ", 3)
        assert int(index) == i
        if i % 3 == 0:
            assert kind == "InvalidRecordException", line
        else:
            assert kind == "KafkaException" and "invalid records" in line, line


# ------------------------------------------------------------------------------------------- client telemetry


@pytest.mark.timeout(150)
def test_the_java_producer_pushes_its_metrics_when_subscribed(java_check: Runner) -> None:
    """KIP-714 with the Java client (3.7+): a subscription matching its software name makes it push; its producer
    metrics show on the broker's Prometheus endpoint, each series labelled with its client instance id."""
    port = free_port()
    with rill.testing.broker({"metrics.port": str(port)}) as b:
        wire = Wire(b.bootstrap_servers)
        subscription = {"metrics": "org.apache.kafka.producer.", "interval.ms": "100",
                        "match": "client_software_name=apache-kafka-java"}  # fmt: skip
        assert alter(wire, "java", subscription) == (0, "")
        wire.close()
        assert java_check(b.bootstrap_servers, "produce", "java-telemetry", 1, "none", N_JAVA, "tel") == [
            f"produced {N_JAVA} codec=none partitions=1"
        ]
        samples = pushed(scrape(port))
        names = {name for name, _ in samples}
        assert "org_apache_kafka_producer_record_send_total" in names, sorted(names)
        assert all(n.startswith("org_apache_kafka_producer_") for n in names)
        assert len({dict(labels)["client_instance_id"] for _, labels in samples}) == 1
