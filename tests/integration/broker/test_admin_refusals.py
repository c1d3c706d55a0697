"""A refused admin request changes nothing: not the metadata, not the logs, not the next start.

Random sequences of requests that must be refused (and of ``validate_only`` requests, which must change
nothing either) are thrown at every admin API of a real broker over the wire; after each one the cluster's
state as clients see it (topics, partitions, configs, offsets, groups) and the log directories' contents are
compared with what they were, and once the broker has been restarted, again."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.broker._wire import Wire

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

TOPIC, BROKER, GROUP, CLIENT_METRICS = 2, 4, 32, 16
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
ZERO_UUID = "00000000-0000-0000-0000-000000000000"


# -- the state a refused request must leave alone ----------------------------------------------------------


def _state(w: Wire, log_dir: Path) -> dict[str, Any]:
    meta = w.call(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False})  # fmt: skip
    topics = sorted(
        (t["name"], str(t["topic_id"]), tuple((p["partition_index"], p["leader_id"], tuple(p["replica_nodes"]),
                                              tuple(p["isr_nodes"])) for p in t["partitions"]))
        for t in meta["topics"]
    )  # fmt: skip
    resources = [{"resource_type": TOPIC, "resource_name": name, "configuration_keys": None} for name, _, _ in topics]
    resources += [{"resource_type": BROKER, "resource_name": n, "configuration_keys": None} for n in ("0", "")]
    resources += [{"resource_type": GROUP, "resource_name": "sg", "configuration_keys": None}]
    listed = w.call(ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": []})["config_resources"]
    resources += [{"resource_type": CLIENT_METRICS, "resource_name": r["resource_name"], "configuration_keys": None}
                  for r in listed if r["resource_type"] == CLIENT_METRICS]  # fmt: skip
    described = w.call(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": resources, "include_synonyms": False,
                                                    "include_documentation": False})["results"]  # fmt: skip
    configs = sorted((r["resource_name"], c["name"], c["value"], c["config_source"]) for r in described
                     for c in r["configs"] if c["name"] != "listeners")  # fmt: skip  (a restart names its port)
    offsets = {}
    for name, _, parts in topics:
        for ts in (-2, -1):
            body = {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": name, "partitions": [{"partition_index": p[0], "timestamp": ts} for p in parts]}]}
            got = w.call(ApiKey.LIST_OFFSETS, 7, body)["topics"][0]["partitions"]
            offsets[(name, ts)] = [(p["partition_index"], p["offset"]) for p in got]
    groups = sorted(g["group_id"] for g in w.call(ApiKey.LIST_GROUPS, 4, {"states_filter": []})["groups"])
    committed = {}
    for g in groups:
        body = {"group_id": g, "topics": None, "require_stable": False}
        got = w.call(ApiKey.OFFSET_FETCH, 7, body)["topics"]
        committed[g] = sorted((t["name"], p["partition_index"], p["committed_offset"]) for t in got
                              for p in t["partitions"])  # fmt: skip
    files = sorted(
        (str(p.relative_to(log_dir)), p.stat().st_size)
        for p in log_dir.rglob("*")
        if (p.is_file() and p.suffix in (".log", ".json")) or p.name.endswith("partition.metadata")
    )
    listed = sorted((r["resource_name"], r["resource_type"]) for r in listed)
    return {"topics": topics, "listed": listed, "configs": configs, "offsets": offsets, "groups": committed,
            "files": files}  # fmt: skip


def _differences(now: dict[str, Any], before: dict[str, Any]) -> list[str]:
    """What differs between two states, line by line (empty when they are equal)."""
    out: list[str] = []
    for key in before:
        a, b = before[key], now[key]
        if a == b:
            continue
        if isinstance(a, list) and isinstance(b, list):
            out += [f"{key}: gone {x!r}" for x in a if x not in b] + [f"{key}: new {x!r}" for x in b if x not in a]
        else:
            out.append(f"{key}: {a!r} -> {b!r}")
    return out


# -- requests that must be refused -----------------------------------------------------------------------------

Refused = tuple[str, int, int, dict[str, Any], Callable[[dict[str, Any]], list[int]]]

_bad_names = st.sampled_from(["", ".", "..", "a/b", "x" * 250, "with space", "plain", "compacted", "team_events",
                              "__consumer_offsets"])  # fmt: skip  (team_events collides with team.events)
_huge = st.one_of(st.integers(10_001, 2**31 - 1), st.just(2**31 - 1))
_bad_configs = st.sampled_from([{"segment.bytes": "1"}, {"retention.ms": "abc"}, {"no.such.config": "1"},
                                {"cleanup.policy": "sometimes"}, {"max.message.bytes": "-5"},
                                {"message.timestamp.type": "Whenever"}])  # fmt: skip


def _codes_create(r: dict[str, Any]) -> list[int]:
    return [t["error_code"] for t in r["topics"]]


def _new_topic(name: str, partitions: int = 1, rf: int = 1, configs: dict[str, str] | None = None,
               assignments: list[tuple[int, list[int]]] | None = None) -> dict[str, Any]:  # fmt: skip
    return {"name": name, "num_partitions": partitions, "replication_factor": rf,
            "assignments": [{"partition_index": p, "broker_ids": b} for p, b in assignments or []],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}  # fmt: skip


@st.composite
def _create_topics(draw: st.DrawFn) -> Refused:
    kind = draw(st.sampled_from(["name", "partitions", "huge", "rf", "config", "assignment", "both", "validate"]))
    fresh = f"fresh-{draw(st.integers(0, 10**6))}"
    validate_only = kind == "validate" or draw(st.booleans())
    topic = {
        "name": lambda: _new_topic(draw(_bad_names)),
        "partitions": lambda: _new_topic(fresh, draw(st.integers(-1000, 0).filter(lambda n: n != -1))),
        "huge": lambda: _new_topic(fresh, draw(_huge)),
        "rf": lambda: _new_topic(fresh, 1, draw(st.one_of(st.integers(2, 1000), st.just(0)))),
        "config": lambda: _new_topic(fresh, 1, 1, draw(_bad_configs)),
        "assignment": lambda: _new_topic(fresh, -1, -1, assignments=[(0, [draw(st.integers(1, 99))])]),
        "both": lambda: _new_topic(fresh, 2, 1, assignments=[(0, [0])]),
        "validate": lambda: _new_topic(fresh, draw(st.integers(1, 20))),
    }[kind]()
    body = {"topics": [topic], "timeout_ms": 5000, "validate_only": validate_only}
    return ("CreateTopics", ApiKey.CREATE_TOPICS, 5, body, _codes_create)


@st.composite
def _delete_topics(draw: st.DrawFn) -> Refused:
    names = draw(st.lists(st.sampled_from(["missing", "also-missing", "__consumer_offsets", ""]), min_size=1,
                          max_size=3, unique=True))  # fmt: skip
    body = {"topic_names": names, "timeout_ms": 5000}
    return ("DeleteTopics", ApiKey.DELETE_TOPICS, 5, body, lambda r: [t["error_code"] for t in r["responses"]])


@st.composite
def _create_partitions(draw: st.DrawFn) -> Refused:
    kind = draw(st.sampled_from(["fewer", "huge", "assignment", "unknown", "validate"]))
    count, assignments, name, validate_only = 3, None, "plain", kind == "validate"
    if kind == "fewer":
        count = draw(st.integers(-5, 2))
    elif kind == "huge":  # more than 10,000 new partitions ("plain" has 2): Kafka's limit per request
        count = draw(st.one_of(st.integers(10_003, 2**31 - 1), st.just(2**31 - 1)))
    elif kind == "assignment":
        assignments = [{"broker_ids": [draw(st.integers(1, 99))]}]
    elif kind == "unknown":
        name = "missing"
    body = {"topics": [{"name": name, "count": count, "assignments": assignments}], "timeout_ms": 5000,
            "validate_only": validate_only}  # fmt: skip
    return ("CreatePartitions", ApiKey.CREATE_PARTITIONS, 2, body, lambda r: [t["error_code"] for t in r["results"]])


@st.composite
def _alter_configs(draw: st.DrawFn) -> Refused:
    incremental = draw(st.booleans())
    target = draw(st.sampled_from([(TOPIC, "plain"), (TOPIC, "missing"), (BROKER, "0"), (BROKER, "7")]))
    validate_only = draw(st.booleans())
    if target == (BROKER, "0"):
        bad = draw(st.sampled_from([{"log.retention.ms": "abc"}, {"broker.id": "3"}, {"no.such": "1"}]))
    else:
        bad = draw(_bad_configs)
    if target[0] == TOPIC and target[1] == "plain" and validate_only:
        bad = draw(st.one_of(st.just(bad), st.just({"retention.ms": "5000"})))  # valid, but validate_only
    name, value = next(iter(bad.items()))
    if incremental:
        # SUBTRACT of a policy the list does not hold is a successful no-op in Kafka (the result is checked, not
        # the value taken away): refused only where the resource itself is refused.
        ops = [SET, APPEND] if target == (TOPIC, "plain") else [SET, APPEND, SUBTRACT]
        op = draw(st.sampled_from(ops)) if name == "cleanup.policy" else SET
        configs = [{"name": name, "config_operation": op, "value": value}]
        body = {"resources": [{"resource_type": target[0], "resource_name": target[1], "configs": configs}],
                "validate_only": validate_only}  # fmt: skip
        return ("IncrementalAlterConfigs", ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body,
                lambda r: [x["error_code"] for x in r["responses"]])  # fmt: skip
    configs = [{"name": name, "value": value}]
    body = {"resources": [{"resource_type": target[0], "resource_name": target[1], "configs": configs}],
            "validate_only": validate_only}  # fmt: skip
    return ("AlterConfigs", ApiKey.ALTER_CONFIGS, 1, body, lambda r: [x["error_code"] for x in r["responses"]])


@st.composite
def _delete_records(draw: st.DrawFn) -> Refused:
    name, offset = draw(st.sampled_from([("plain", 10**6), ("plain", -7), ("compacted", 1), ("missing", 0)]))
    body = {"topics": [{"name": name, "partitions": [{"partition_index": 0, "offset": offset}]}], "timeout_ms": 5000}
    return ("DeleteRecords", ApiKey.DELETE_RECORDS, 2, body,
            lambda r: [p["error_code"] for t in r["topics"] for p in t["partitions"]])  # fmt: skip


@st.composite
def _groups(draw: st.DrawFn) -> Refused:
    if draw(st.booleans()):
        body = {"groups_names": [draw(st.sampled_from(["no-such-group", "other"]))]}
        return ("DeleteGroups", ApiKey.DELETE_GROUPS, 2, body, lambda r: [g["error_code"] for g in r["results"]])
    body = {"group_id": "no-such-group", "topics": [{"name": "plain", "partitions": [{"partition_index": 0}]}]}
    return ("OffsetDelete", ApiKey.OFFSET_DELETE, 0, body, lambda r: [r["error_code"]])


@st.composite
def _share(draw: st.DrawFn) -> Refused:
    """Share-group requests that must be refused: a join without subscriptions, an unknown member, a share
    session never opened, an acknowledgement that tries to open one."""
    group = draw(st.sampled_from(["sg", "g"]))
    kind = draw(st.sampled_from(["join", "unknown", "leave", "fetch", "ack0", "ack"]))
    if kind in ("join", "unknown", "leave"):
        epoch = {"join": 0, "unknown": 5, "leave": -1}[kind]
        body = {"group_id": group, "member_id": "m" if kind != "join" else "", "member_epoch": epoch,
                "rack_id": None, "subscribed_topic_names": None}  # fmt: skip
        return ("ShareGroupHeartbeat", ApiKey.SHARE_GROUP_HEARTBEAT, 1, body, lambda r: [r["error_code"]])
    topics = [{"topic_id": uuid.uuid4(), "partitions": [{"partition_index": 0, "acknowledgement_batches": [
        {"first_offset": 0, "last_offset": 3, "acknowledge_types": [1]}]}]}]  # fmt: skip
    if kind == "fetch":
        body = {"group_id": group, "member_id": draw(st.sampled_from(["", "m"])),
                "share_session_epoch": draw(st.sampled_from([3, -1])), "max_wait_ms": 0, "min_bytes": 1,
                "max_records": 10, "batch_size": 10, "topics": topics, "forgotten_topics_data": []}  # fmt: skip
        return ("ShareFetch", ApiKey.SHARE_FETCH, 1, body, lambda r: [r["error_code"]])
    body = {"group_id": group, "member_id": "m", "share_session_epoch": 0 if kind == "ack0" else 4, "topics": topics}
    return ("ShareAcknowledge", ApiKey.SHARE_ACKNOWLEDGE, 1, body, lambda r: [r["error_code"]])


def _share_state_codes(r: dict[str, Any]) -> list[int]:
    return [p["error_code"] for t in r["results"] for p in t["partitions"]]


@st.composite
def _share_state(draw: st.DrawFn) -> Refused:
    """The share coordinator's inter-broker requests that must be refused: no group id, a negative partition, a
    topic id no topic has, a state batch no leader writes, a start offset below -1."""
    kind = draw(st.sampled_from(["no group", "negative", "unknown topic", "bad batch", "bad start"]))
    group = "" if kind == "no group" else draw(st.sampled_from(["sg", "g"]))
    partition = -1 if kind == "negative" else draw(st.integers(0, 1))
    batches = [{"first_offset": 0, "last_offset": 4, "delivery_state": 2, "delivery_count": 1}]
    if kind == "bad batch":
        batches = [draw(st.sampled_from([{"first_offset": 5, "last_offset": 4, "delivery_state": 2,
                                          "delivery_count": 1},
                                         {"first_offset": 0, "last_offset": 4, "delivery_state": 1,
                                          "delivery_count": 1}]))]  # fmt: skip
    part = {"partition": partition, "state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "state_batches": batches}
    if kind == "bad start" or (kind != "bad batch" and draw(st.booleans())):
        key, name = ApiKey.INITIALIZE_SHARE_GROUP_STATE, "InitializeShareGroupState"
        part = {"partition": partition, "state_epoch": 1, "start_offset": -5 if kind == "bad start" else 0}
    else:
        key, name = ApiKey.WRITE_SHARE_GROUP_STATE, "WriteShareGroupState"
    body = {"group_id": group, "topics": [{"topic_id": uuid.uuid4(), "partitions": [part]}]}
    return (name, key, 0, body, _share_state_codes)


@st.composite
def _share_admin(draw: st.DrawFn) -> Refused:
    """Share-group administration that must be refused: start offsets of partitions that do not exist, past the
    log end or negative, of a consumer group or of no group; a bad share.auto.offset.reset or
    share.isolation.level (the share group "sg" has a state, seeded)."""
    kind = draw(st.sampled_from(["alter", "delete", "config"]))
    if kind == "alter":
        group = draw(st.sampled_from(["sg", "g", ""]))
        wanted = draw(st.sampled_from([("missing", 0, 0), ("plain", 7, 0), ("plain", 0, 10**6), ("plain", 1, -1),
                                       ("__consumer_offsets", 0, 0)]))  # fmt: skip
        if group != "sg":
            wanted = ("plain", 0, 0)  # valid, but the group is not a share group, or has no id
        body = {"group_id": group, "topics": [{"topic_name": wanted[0], "partitions": [
            {"partition_index": wanted[1], "start_offset": wanted[2]}]}]}  # fmt: skip
        return ("AlterShareGroupOffsets", ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, body,
                lambda r: [r["error_code"] or p["error_code"]
                           for t in r["responses"] for p in t["partitions"]])  # fmt: skip
    if kind == "delete":
        group, topic = draw(st.sampled_from([("sg", "missing"), ("g", "plain"), ("nobody", "plain"), ("", "plain")]))
        body = {"group_id": group, "topics": [{"topic_name": topic}]}
        return ("DeleteShareGroupOffsets", ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, body,
                lambda r: [r["error_code"] or t["error_code"]
                           for t in r["responses"]] or [r["error_code"]])  # fmt: skip
    name, value = draw(st.sampled_from([("share.auto.offset.reset", "first"),
                                        ("share.auto.offset.reset", "by_duration:1h"),
                                        ("share.auto.offset.reset", "by_duration:-PT1S"),
                                        ("share.isolation.level", "read_most")]))  # fmt: skip
    body = {"resources": [{"resource_type": GROUP, "resource_name": "sg", "configs": [
        {"name": name, "config_operation": SET, "value": value}]}], "validate_only": draw(st.booleans())}  # fmt: skip
    return ("IncrementalAlterConfigs", ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body,
            lambda r: [x["error_code"] for x in r["responses"]])  # fmt: skip


@st.composite
def _client_metrics(draw: st.DrawFn) -> Refused:
    """Client metrics subscriptions Kafka refuses (KIP-714), and telemetry pushes it refuses."""
    if draw(st.booleans()):
        instance = draw(st.sampled_from([uuid.UUID(int=0), uuid.uuid4()]))
        body = {"client_instance_id": instance, "subscription_id": draw(st.integers(-(2**31), 2**31 - 1)),
                "terminating": False, "compression_type": draw(st.sampled_from([0, 4, 9])),
                "metrics": draw(st.binary(max_size=64))}  # fmt: skip
        return ("PushTelemetry", ApiKey.PUSH_TELEMETRY, 0, body, lambda r: [r["error_code"]])
    name = draw(st.sampled_from(["kept", "new", ""]))
    bad = draw(st.sampled_from([{"interval.ms": "50"}, {"interval.ms": "x"}, {"metrics": "a,a"}, {"nope": "1"},
                                {"match": "client_id=("}, {"match": "rack=a"}]))  # fmt: skip
    if name == "":
        bad = {"metrics": "*"}
    validate_only = draw(st.booleans())
    key, value = next(iter(bad.items()))
    configs = [{"name": key, "config_operation": SET, "value": value}]
    body = {"resources": [{"resource_type": CLIENT_METRICS, "resource_name": name, "configs": configs}],
            "validate_only": validate_only}  # fmt: skip
    return ("IncrementalAlterConfigs", ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body,
            lambda r: [x["error_code"] for x in r["responses"]])  # fmt: skip


_LOG_DIRS: list[str] = []  # the seeded broker's (absolute)


@st.composite
def _alter_replica_log_dirs(draw: st.DrawFn) -> Refused:
    """A log dir that is not the broker's (absolute or not), or a partition that does not exist."""
    kind = draw(st.sampled_from(["elsewhere", "relative", "missing"]))
    path = {"elsewhere": "/no/such/log/dir", "relative": "logs", "missing": _LOG_DIRS[0]}[kind]
    name, partition = ("missing", 0) if kind == "missing" else ("plain", draw(st.integers(0, 1)))
    body = {"dirs": [{"path": path, "topics": [{"name": name, "partitions": [partition]}]}]}
    return ("AlterReplicaLogDirs", ApiKey.ALTER_REPLICA_LOG_DIRS, 2, body,
            lambda r: [p["error_code"] for t in r["results"] for p in t["partitions"]])  # fmt: skip


_REFUSED = st.one_of(_create_topics(), _delete_topics(), _create_partitions(), _alter_configs(), _delete_records(),
                     _groups(), _share(), _share_admin(), _client_metrics(),
                     _alter_replica_log_dirs(), _share_state())  # fmt: skip


# -- the test ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[rill.testing.TestBroker, Path]]:
    data = tmp_path_factory.mktemp("refusals")
    with rill.testing.broker(data_dir=data, num_partitions=2) as b:
        w = Wire(b.bootstrap_servers)
        body = {"topics": [_new_topic("plain", 2), _new_topic("compacted", 1, 1, {"cleanup.policy": "compact"}),
                           _new_topic("team.events")], "timeout_ms": 5000, "validate_only": False}  # fmt: skip
        assert _codes_create(w.call(ApiKey.CREATE_TOPICS, 5, body)) == [0, 0, 0]
        producer = Producer({"bootstrap.servers": b.bootstrap_servers})
        for i in range(20):
            producer.produce("plain", key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
            producer.produce("compacted", key=b"k%d" % (i % 3), value=b"v%d" % i)
        assert producer.flush(10) == 0
        consumer = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "g", "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition("plain", 0, 4), TopicPartition("plain", 1, 2)], asynchronous=False)
        consumer.close()
        _make_share_group_state(w)
        body = {"group_id": "sg", "topics": [{"topic_name": "plain", "partitions": [
            {"partition_index": 0, "start_offset": 3}]}]}  # fmt: skip
        assert w.call(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, body)["responses"][0]["partitions"][0]["error_code"] == 0
        subscription = [{"name": "metrics", "config_operation": SET, "value": "org.apache.kafka."}]
        body = {"resources": [{"resource_type": CLIENT_METRICS, "resource_name": "kept", "configs": subscription}],
                "validate_only": False}  # fmt: skip
        assert [r["error_code"] for r in w.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"]] == [0]
        w.close()
        _LOG_DIRS[:] = [str(data / "logs")]
        yield b, data / "logs"


def _make_share_group_state(w: Wire) -> None:
    """Create ``__share_group_state`` (FindCoordinator of a share partition) and wait for its partitions to load,
    so the refused share-state requests reach the coordinator."""
    key = "sg:ASNFZ4mrze8BI0VniavN7w:0"
    got = w.call(ApiKey.FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": [key]})["coordinators"][0]
    assert got["error_code"] in (0, ErrorCode.COORDINATOR_NOT_AVAILABLE), got
    deadline = time.monotonic() + 30
    while True:
        body = {"group_id": "sg", "topics": [{"topic_id": uuid.uuid4(), "partitions": [
            {"partition": p, "leader_epoch": -1} for p in range(50)]}]}  # fmt: skip
        codes = set(_share_state_codes(w.call(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, body)))
        if codes == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION} or codes == {0}:
            return
        assert time.monotonic() < deadline, codes
        time.sleep(0.1)


def test_refused_admin_requests_change_nothing(seeded: tuple[rill.testing.TestBroker, Path]) -> None:
    b, log_dir = seeded
    w = Wire(b.bootstrap_servers)
    try:
        before = _state(w, log_dir)
        seen: list[str] = []

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
        @given(requests=st.lists(_REFUSED, min_size=1, max_size=4))
        def run(requests: list[Refused]) -> None:
            for what, key, version, body, codes in requests:
                start = time.monotonic()
                got = codes(w.call(key, version, body))
                assert time.monotonic() - start < 2, f"{what} took {time.monotonic() - start:.1f}s: {body}"
                if not body.get("validate_only"):
                    assert all(c != 0 for c in got), f"{what} was not refused: {body} -> {got}"
                seen.append(what)
                assert not _differences(_state(w, log_dir), before), f"{what} changed the state: {body}"

        run()
        assert {"CreateTopics", "DeleteTopics", "CreatePartitions", "DeleteRecords", "AlterReplicaLogDirs"} <= set(seen)
    finally:
        w.close()
    b.restart()
    w = Wire(b.bootstrap_servers)
    try:
        assert not _differences(_state(w, log_dir), before)
    finally:
        w.close()


def test_an_empty_cleanup_policy_is_kept_and_the_broker_still_creates_and_starts(tmp_path: Path) -> None:
    """IncrementalAlterConfigs SUBTRACT of a topic's only cleanup policy leaves the empty list, which Kafka 4.2
    takes (infinite retention, no compaction): the broker keeps creating topics and starts again."""
    with rill.testing.broker(data_dir=tmp_path) as b:
        w = Wire(b.bootstrap_servers)
        body = {"topics": [_new_topic("t")], "timeout_ms": 5000, "validate_only": False}
        assert _codes_create(w.call(ApiKey.CREATE_TOPICS, 5, body)) == [0]
        op = {"name": "cleanup.policy", "config_operation": SUBTRACT, "value": "delete"}
        body = {"resources": [{"resource_type": TOPIC, "resource_name": "t", "configs": [op]}], "validate_only": False}
        assert [r["error_code"] for r in w.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"]] == [0]
        body = {"topics": [_new_topic("after")], "timeout_ms": 5000, "validate_only": False}
        assert _codes_create(w.call(ApiKey.CREATE_TOPICS, 5, body)) == [0]
        w.close()
        b.restart()
        w = Wire(b.bootstrap_servers)
        res = {"resource_type": TOPIC, "resource_name": "t", "configuration_keys": ["cleanup.policy"]}
        body = {"resources": [res], "include_synonyms": False, "include_documentation": False}
        (entry,) = w.call(ApiKey.DESCRIBE_CONFIGS, 4, body)["results"][0]["configs"]
        assert entry["value"] == ""
        w.close()


def test_a_request_for_too_many_partitions_is_refused_at_once(rill_broker: rill.testing.TestBroker) -> None:
    """CreateTopics (validate_only or not) and CreatePartitions asking for 2**31-1 partitions are refused
    before any work, in milliseconds, and the broker keeps serving."""
    w = Wire(rill_broker.bootstrap_servers)
    try:
        for validate_only in (True, False):
            body = {"topics": [_new_topic("big", 2**31 - 1), _new_topic("small", 1)], "timeout_ms": 5000,
                    "validate_only": validate_only}  # fmt: skip
            start = time.monotonic()
            got = w.call(ApiKey.CREATE_TOPICS, 5, body)["topics"]
            assert time.monotonic() - start < 0.5
            assert [t["error_code"] for t in got] == [ErrorCode.POLICY_VIOLATION] * 2
            assert "Excessively large number of partitions" in got[0]["error_message"]
        body = {"topics": [_new_topic("small", 1)], "timeout_ms": 5000, "validate_only": False}
        assert _codes_create(w.call(ApiKey.CREATE_TOPICS, 5, body)) == [0]
        body = {"topics": [{"name": "small", "count": 2**31 - 1, "assignments": None}], "timeout_ms": 5000,
                "validate_only": False}  # fmt: skip
        start = time.monotonic()
        (got,) = w.call(ApiKey.CREATE_PARTITIONS, 2, body)["results"]
        assert time.monotonic() - start < 0.5
        assert got["error_code"] == ErrorCode.POLICY_VIOLATION
    finally:
        w.close()


def test_partitions_beyond_the_open_files_limit_are_refused(tmp_path: Path) -> None:
    """Under the open-files limit: a request the limit cannot hold is refused before any log is made, with a
    message naming the limit (it used to make logs until EMFILE)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with rill.testing.broker(data_dir=tmp_path) as b:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))  # 300 kept free, and what is open now
        try:
            w = Wire(b.bootstrap_servers)
            body = {"topics": [_new_topic("wide", 1000)], "timeout_ms": 5000, "validate_only": False}
            (got,) = w.call(ApiKey.CREATE_TOPICS, 5, body)["topics"]
            assert got["error_code"] == ErrorCode.POLICY_VIOLATION and "open-files limit" in got["error_message"]
            assert not any(p.name.startswith("wide-") for p in (tmp_path / "logs").iterdir())
            body = {"topics": [_new_topic("narrow", 10)], "timeout_ms": 5000, "validate_only": False}
            assert _codes_create(w.call(ApiKey.CREATE_TOPICS, 5, body)) == [0]
            w.close()
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert os.path.isdir(tmp_path)
