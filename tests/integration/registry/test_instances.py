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

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

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


def test_rill_registry_command(broker: TestBroker, tmp_path: object) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rill",
            "registry",
            "--bootstrap-server",
            broker.bootstrap_servers,
            "--listen",
            "127.0.0.1:0",
            "--topic",
            "_schemas_cli",
            "--group",
            "registry-cli",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("rill registry ready on http://127.0.0.1:"), line
        url = line.strip().rsplit(" ", 1)[1]
        sr = SchemaRegistryClient({"url": url})
        schema_id = sr.register_schema("cli-value", schema(1))
        assert sr.get_latest_version("cli-value").schema_id == schema_id
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
