"""AlterClientQuotas and DescribeClientQuotas over the wire and through ``rill configs``; a quota change in
effect at once; the throttled response and the muted channel (KIP-219); follower fetches never throttled."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest
from tests.integration.broker._wire import Wire
from tests.integration.quotas._quota_clients import alter_quotas

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.records.builder import build_batch
from rill.records.record import Record

pytestmark = pytest.mark.timeout(90)

CLIENT = "wire-test"  # the client id of every Wire request


def _alter(
    w: Wire, entries: list[tuple[dict[str, str | None], dict[str, float | None]]], validate_only: bool = False
) -> list[Any]:
    body = {
        "entries": [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
                "ops": [{"key": k, "value": v or 0.0, "remove": v is None} for k, v in ops.items()],
            }
            for entity, ops in entries
        ],
        "validate_only": validate_only,
    }
    return [
        (ErrorCode(e["error_code"]), e["error_message"]) for e in w.call(ApiKey.ALTER_CLIENT_QUOTAS, 1, body)["entries"]
    ]


def _describe(w: Wire, components: list[tuple[str, int, str | None]], strict: bool = False, version: int = 1) -> Any:
    body = {
        "components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
        "strict": strict,
    }
    r = w.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, version, body)
    if r["error_code"]:
        return ErrorCode(r["error_code"])
    entries = [
        (tuple((c["entity_type"], c["entity_name"]) for c in e["entity"]), {v["key"]: v["value"] for v in e["values"]})
        for e in r["entries"]
    ]
    return sorted(entries, key=lambda e: [(t, n or "<default>") for t, n in e[0]])


def test_alterations_are_checked_first_and_refused_ones_change_nothing(rill_broker) -> None:
    w = Wire(rill_broker.bootstrap_servers)
    results = _alter(
        w,
        [
            ({"client-id": "app"}, {"producer_byte_rate": 1024.0, "request_percentage": 12.5}),
            ({"user": "alice", "client-id": None}, {"consumer_byte_rate": 2048.0}),
            ({"user": None}, {"producer_byte_rate": 4096.0}),
            ({"client-id": "bad"}, {"producer_byte_rate": 1.5}),
            ({"client-id": "bad"}, {"no_such_quota": 1.0}),
            ({"client-id": "bad2"}, {"consumer_byte_rate": 0.0}),
            ({"user": ""}, {"producer_byte_rate": 1.0}),
            ({"topic": "t"}, {"producer_byte_rate": 1.0}),
            ({}, {"producer_byte_rate": 1.0}),
        ],
    )
    assert [code for code, _ in results] == [ErrorCode.NONE] * 3 + [ErrorCode.INVALID_REQUEST] * 6
    assert results[3][1] == "Configuration producer_byte_rate must be a Long value"
    assert results[4][1] == "Invalid configuration key no_such_quota"
    everything = _describe(w, [])
    assert everything == [
        ((("client-id", "app"),), {"producer_byte_rate": 1024.0, "request_percentage": 12.5}),
        ((("user", None),), {"producer_byte_rate": 4096.0}),
        ((("user", "alice"), ("client-id", None)), {"consumer_byte_rate": 2048.0}),
    ]
    assert _alter(w, [({"client-id": "other"}, {"producer_byte_rate": 1.0})], validate_only=True) == [
        (ErrorCode.NONE, None)
    ]
    assert _describe(w, []) == everything  # validate_only wrote nothing

    # filters: exact, default, any; strict leaves out entities with a type no component names
    assert _describe(w, [("client-id", 0, "app")], strict=True) == [everything[0]]
    assert _describe(w, [("user", 1, None)], strict=True) == [everything[1]]
    assert _describe(w, [("user", 2, None)]) == everything[1:]
    assert _describe(w, [("user", 2, None)], strict=True) == [everything[1]]
    assert _describe(w, [("user", 0, "alice"), ("client-id", 1, None)], strict=True) == [everything[2]]
    assert _describe(w, [("user", 2, None), ("user", 1, None)]) == ErrorCode.INVALID_REQUEST
    assert _describe(w, [("topic", 2, None)]) == ErrorCode.UNSUPPORTED_VERSION
    assert _describe(w, [("user", 7, None)]) == ErrorCode.INVALID_REQUEST
    assert _describe(w, [("user", 2, None)], version=0) == everything[1:]

    # removing a key; an entity with no key left is gone
    assert _alter(w, [({"user": None}, {"producer_byte_rate": None})]) == [(ErrorCode.NONE, None)]
    assert _describe(w, [("user", 1, None)], strict=True) == []
    w.close()


def test_quotas_are_kept_across_a_restart(rill_broker) -> None:
    alter_quotas(rill_broker.bootstrap_servers, {"user": "bob", "client-id": "x y"}, {"producer_byte_rate": 777.0})
    rill_broker.restart()
    w = Wire(rill_broker.bootstrap_servers)
    assert _describe(w, [("user", 0, "bob")]) == [
        ((("user", "bob"), ("client-id", "x y")), {"producer_byte_rate": 777.0})
    ]
    w.close()


def _produce(w: Wire, topic: str, nbytes: int) -> int:
    records = build_batch([Record(0, 1_700_000_000_000, b"k", b"v" * nbytes, [])])
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    r = w.call(ApiKey.PRODUCE, 9, body)
    assert r["responses"][0]["partition_responses"][0]["error_code"] == 0
    return int(r["throttle_time_ms"])


def _metadata(w: Wire) -> None:
    w.call(ApiKey.METADATA, 9, {"topics": [], "allow_auto_topic_creation": False,
                                "include_cluster_authorized_operations": False,
                                "include_topic_authorized_operations": False})  # fmt: skip


def _create(w: Wire, topic: str) -> None:
    body = {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
            "timeout_ms": 5000, "validate_only": False}  # fmt: skip
    assert w.call(ApiKey.CREATE_TOPICS, 5, body)["topics"][0]["error_code"] == 0


def test_a_quota_change_applies_at_once_and_a_throttled_channel_is_muted() -> None:
    # a new group may send its quota times quota.window.num - 1 windows at once and no more in those windows:
    # two windows of one second keep the waits of this test short
    with rill.testing.broker(quota_window_num=2) as b:
        bootstrap = b.bootstrap_servers
        w = Wire(bootstrap)
        _create(w, "t")
        assert _produce(w, "t", 200_000) == 0  # no quota
        alter_quotas(bootstrap, {"client-id": CLIENT}, {"producer_byte_rate": 100_000.0})
        changed = time.monotonic()
        throttle = _produce(w, "t", 200_000)
        assert time.monotonic() - changed < 2.0
        assert 1_900 <= throttle <= 2_100  # the rest of its first window, then 100 kB over at 100 kB/s
        # the response came at once; the channel is muted for the throttle time: the next request waits
        sent = time.monotonic()
        _metadata(w)
        waited = time.monotonic() - sent
        assert throttle / 1000 - 0.2 <= waited <= throttle / 1000 + 2.0
        # from then on the group gets its quota: 100 kB more costs it a second
        assert 800 <= _produce(w, "t", 100_000) <= 1_100
        # a removed quota ends the throttling
        alter_quotas(bootstrap, {"client-id": CLIENT}, {"producer_byte_rate": None})
        assert _produce(w, "t", 200_000) == 0
        w.close()


def _fetch(w: Wire, topic: str, replica_id: int) -> tuple[int, int]:
    body = {
        "replica_id": replica_id,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 10_000_000,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                   "log_start_offset": -1, "partition_max_bytes": 10_000_000}]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }  # fmt: skip
    r = w.call(ApiKey.FETCH, 11, body)
    size = sum(len(p["records"] or b"") for t in r["responses"] for p in t["partitions"])
    return int(r["throttle_time_ms"]), size


def test_a_throttled_fetch_is_answered_empty_and_followers_are_never_throttled(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    w = Wire(bootstrap)
    _create(w, "f")
    for _ in range(5):
        _produce(w, "f", 300_000)
    alter_quotas(bootstrap, {"client-id": None}, {"consumer_byte_rate": 100_000.0})
    # a consumer may take 10 windows' worth (1 MB) at once; the next fetch is over the quota
    throttle, size = _fetch(w, "f", -1)
    assert throttle == 0 and 900_000 < size <= 1_000_000
    time.sleep(0.1)
    w2 = Wire(bootstrap)
    throttle, size = _fetch(w2, "f", -1)
    assert throttle > 0 and size == 0  # answered empty
    follower = Wire(bootstrap)  # the throttled connection is muted; a follower has its own
    for _ in range(3):  # a follower's fetches (replica_id >= 0) are never held to client quotas
        throttle, size = _fetch(follower, "f", 1)
        assert throttle == 0 and size > 1_000_000
    follower.close()
    w.close()
    w2.close()


def _rill(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rill", *args], capture_output=True, text=True, timeout=60)


def test_rill_configs_manages_client_quotas_as_kafka_configs_does(rill_broker) -> None:
    bs = ("--bootstrap-server", rill_broker.bootstrap_servers)
    r = _rill("configs", "--alter", "--entity-type", "clients", "--entity-name", "reporting",
              "--add-config", "producer_byte_rate=5242880,request_percentage=50", *bs)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "Completed updating config for client-id 'reporting'" in r.stdout
    r = _rill("configs", "--alter", "--entity-type", "users", "--entity-default", "--entity-type", "clients",
              "--entity-default", "--add-config", "consumer_byte_rate=1048576", *bs)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = _rill("configs", "--alter", "--entity-type", "users", "--entity-name", "alice",
              "--add-config", "producer_byte_rate=1024", *bs)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = _rill("configs", "--describe", "--entity-type", "clients", *bs)
    assert (
        r.stdout
        == "Quota configs for client-id 'reporting' are producer_byte_rate=5242880.0, request_percentage=50.0\n"
    )
    r = _rill("configs", "--describe", "--entity-type", "users", "--entity-type", "clients", *bs)
    assert r.stdout == (
        "Quota configs for the default user-principal, the default client-id are consumer_byte_rate=1048576.0\n"
    )
    r = _rill("configs", "--describe", "--entity-type", "users", "--entity-name", "alice", *bs)
    assert r.stdout.startswith("Quota configs for user-principal 'alice' are producer_byte_rate=1024.0\n")
    # a refused alteration exits non-zero and changes nothing
    r = _rill("configs", "--alter", "--entity-type", "clients", "--entity-name", "reporting",
              "--add-config", "producer_byte_rate=1.5", *bs)  # fmt: skip
    assert r.returncode != 0 and "INVALID_REQUEST" in r.stderr
    r = _rill("configs", "--alter", "--entity-type", "clients", "--entity-name", "reporting",
              "--delete-config", "request_percentage", *bs)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = _rill("configs", "--describe", "--entity-type", "clients", "--entity-name", "reporting", *bs)
    assert r.stdout == "Quota configs for client-id 'reporting' are producer_byte_rate=5242880.0\n"


def test_quota_group_metrics_have_kafkas_names() -> None:
    import socket

    from rill import testing

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with testing.broker({"metrics.port": str(port)}) as b:
        w = Wire(b.bootstrap_servers)
        _create(w, "m")
        alter_quotas(b.bootstrap_servers, {"client-id": CLIENT}, {"producer_byte_rate": 10_000.0})
        throttle = _produce(w, "m", 200_000)
        assert throttle > 0
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        w.close()
    lines = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith("kafka_server_produce_")
    }
    key = 'kafka_server_produce_byte_rate{client_id="wire-test",user=""}'
    assert key in lines and 15_000 < lines[key] < 25_000  # 200 kB over 10 s
    assert lines['kafka_server_produce_throttle_time{client_id="wire-test",user=""}'] == throttle


def test_a_fetch_throttled_by_its_request_time_is_answered_empty_too(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    w = Wire(bootstrap)
    _create(w, "rt")
    _produce(w, "rt", 1000)
    alter_quotas(bootstrap, {"client-id": CLIENT}, {"request_percentage": 0.001})
    for _ in range(100):  # until the first throttle (a throttled response mutes the connection)
        throttle, size = _fetch(w, "rt", -1)
        if throttle:
            break
        assert size > 0
    assert throttle > 0 and size == 0
    w.close()
