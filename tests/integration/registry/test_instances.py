"""Several registries on one ``_schemas`` topic: one leader writes, the others forward; all agree;
a restarted registry rebuilds everything from the topic; ``rill registry`` runs as a command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from rill.registry.election import CLIENT_ID_PREFIX
from rill.testing import TestBroker
from rill.testing.registry import registry


def schema(i: int) -> Schema:
    fields = [{"name": f"f{i}", "type": "int"}]
    return Schema(json.dumps({"type": "record", "name": f"R{i}", "fields": fields}), "AVRO")


def test_two_instances_agree_on_ids_and_a_restart_keeps_everything(broker: TestBroker) -> None:
    topic, group = "_schemas_pair", "registry-pair"
    with (
        registry(broker.bootstrap_servers, topic=topic, group=group) as a,
        registry(broker.bootstrap_servers, topic=topic, group=group) as b,
    ):
        leaders = {r.url for r in (a, b) if r.registry.election and r.registry.election.is_leader}
        deadline = time.monotonic() + 30
        while len(leaders) != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
            leaders = {r.url for r in (a, b) if r.registry.election and r.registry.election.is_leader}
        assert len(leaders) == 1

        def register(i: int) -> tuple[int, int]:
            via = (a, b)[i % 2]
            subject = f"pair-{i % 5}"  # several schemas per subject and one schema under many subjects
            sr = SchemaRegistryClient({"url": via.url})
            sr.set_compatibility(subject, "NONE")
            return i, sr.register_schema(subject, schema(i % 7))

        with ThreadPoolExecutor(8) as pool:
            ids = dict(pool.map(register, range(40)))
        by_schema: dict[int, set[int]] = {}
        for i, schema_id in ids.items():
            by_schema.setdefault(i % 7, set()).add(schema_id)
        assert all(len(found) == 1 for found in by_schema.values()), by_schema  # one id per schema text
        assert len({next(iter(found)) for found in by_schema.values()}) == 7  # and no id for two texts

        views = []
        for r in (a, b):
            sr = SchemaRegistryClient({"url": r.url})
            view = {s: [(v, sr.get_version(s, v).schema_id) for v in sr.get_versions(s)] for s in sr.get_subjects()}
            views.append(view)
        assert views[0] == views[1]
        assert sum(len(v) for v in views[0].values()) == len({(i % 5, i % 7) for i in range(40)})
        for schema_no, found in by_schema.items():
            text = SchemaRegistryClient({"url": b.url}).get_schema(next(iter(found))).schema_str
            assert json.loads(text) == json.loads(schema(schema_no).schema_str)
        before = views[0]

        # The leader leaves: the other instance takes over and accepts writes.
        leader, follower = (a, b) if a.url in leaders else (b, a)
        leader.stop()
        late = SchemaRegistryClient({"url": follower.url}).register_schema("after-failover", schema(99))
        assert late not in {next(iter(f)) for f in by_schema.values()}

    # A new registry on the same topic reads everything back.
    with registry(broker.bootstrap_servers, topic=topic, group=group) as c:
        sr = SchemaRegistryClient({"url": c.url})
        view = {s: [(v, sr.get_version(s, v).schema_id) for v in sr.get_versions(s)] for s in sr.get_subjects()}
        assert view == {**before, "after-failover": [(1, late)]}
        assert sr.get_compatibility("pair-0") == "NONE"
        # ids continue after the highest one stored
        assert sr.register_schema("after-restart", schema(100)) == late + 1


def test_rill_registry_command(broker: TestBroker) -> None:
    proc, url = start_command(broker, "_schemas_cli", "registry-cli")
    try:
        sr = SchemaRegistryClient({"url": url})
        schema_id = sr.register_schema("cli-value", schema(1))
        assert sr.get_latest_version("cli-value").schema_id == schema_id
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def start_command(broker: TestBroker, topic: str, group: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rill", "registry", "--bootstrap-server", broker.bootstrap_servers,
         "--listen", "127.0.0.1:0", "--topic", topic, "--group", group],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("rill registry ready on http://127.0.0.1:"), line
    return proc, line.strip().rsplit(" ", 1)[1]


def leader_of(broker: TestBroker, group: str) -> str | None:
    """The URL of the registry holding the group's partition, as DescribeGroups shows it."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    description = admin.describe_consumer_groups([group])[group].result(timeout=10)
    for member in description.members:
        if member.assignment is not None and member.assignment.topic_partitions:
            return str(member.client_id).removeprefix(CLIENT_ID_PREFIX)
    return None


@pytest.mark.slow
def test_a_killed_leader_is_replaced(broker: TestBroker) -> None:
    topic, group = "_schemas_kill", "registry-kill"
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        for _ in range(2):
            proc, url = start_command(broker, topic, group)
            procs[url] = proc
        urls = list(procs)
        one = SchemaRegistryClient({"url": urls[0]}).register_schema("kill-value", schema(1))
        two = SchemaRegistryClient({"url": urls[1]}).register_schema("kill-value-2", schema(2))
        assert two == one + 1
        leader = leader_of(broker, group)
        assert leader in procs
        (survivor,) = (u for u in urls if u != leader)
        procs[leader].send_signal(signal.SIGKILL)
        procs[leader].wait(10)
        started = time.monotonic()
        # Forwarded to the dead leader (refused) until its session times out and the survivor is elected.
        three = SchemaRegistryClient({"url": survivor}).register_schema("kill-value-3", schema(3))
        took = time.monotonic() - started
        assert three == two + 1
        assert 5 < took < 30  # the session timeout (10 s) and a rebalance
        assert leader_of(broker, group) == survivor
        sr = SchemaRegistryClient({"url": survivor})
        assert [sr.get_latest_version(s).schema_id for s in ("kill-value", "kill-value-2")] == [one, two]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait(10)


def test_a_broker_serves_a_registry_beside_it(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rill", "broker", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
         "--override", f"log.dirs={tmp_path}", "--override", "group.initial.rebalance.delay.ms=0",
         "--schema-registry", "127.0.0.1:0", "--stop-on-stdin-eof"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("rill broker ready on 127.0.0.1:")
        line = proc.stdout.readline()
        assert line.startswith("rill registry ready on http://127.0.0.1:"), line
        sr = SchemaRegistryClient({"url": line.strip().rsplit(" ", 1)[1]})
        schema_id = sr.register_schema("embedded-value", schema(1))
        assert sr.get_schema(schema_id).schema_str == schema(1).schema_str.replace(" ", "")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
