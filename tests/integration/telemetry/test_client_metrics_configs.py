"""Client metrics subscriptions as CLIENT_METRICS config resources: Kafka's checks (a refused change changes
nothing), DescribeConfigs, ListConfigResources v0 and v1, kept across a restart, and ``rill configs
--entity-type client-metrics``."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from tests.integration.broker._wire import Wire
from tests.integration.telemetry._telemetry import CLIENT_METRICS, alter, describe, list_resources

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey

pytestmark = pytest.mark.timeout(120)

TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
IR, IC = ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_CONFIG


@pytest.mark.parametrize(("name", "configs", "code"), [
    ("s", {"metric": "x"}, IR),  # unknown config
    ("s", {"interval.ms": "99"}, IR),
    ("s", {"interval.ms": "3600001"}, IR),
    ("s", {"interval.ms": "often"}, IC),
    ("s", {"metrics": "a,,b"}, IC),
    ("s", {"metrics": "a,a"}, IC),
    ("s", {"match": "client_id"}, IC),  # no '='
    ("s", {"match": "client_rack=a"}, IC),  # not a selector
    ("s", {"match": "client_id=("}, IC),  # not a regex
    ("", {"metrics": "*"}, IR),
])  # fmt: skip
def test_bad_subscriptions_are_refused_and_change_nothing(name: str, configs: dict[str, str], code: int) -> None:
    with rill.testing.broker() as b:
        wire = Wire(b.bootstrap_servers)
        try:
            assert alter(wire, "kept", {"metrics": "org.", "interval.ms": "1000"})[0] == 0
            name = name and "kept"
            for validate_only in (True, False):
                got, message = alter(wire, name or "", configs, validate_only)
                assert (got, bool(message)) == (code, True)
            assert list_resources(wire, 0) == (0, [("kept", CLIENT_METRICS)])
            assert describe(wire, "kept") == {"metrics": ("org.", 7), "interval.ms": ("1000", 7), "match": ("", 5)}
        finally:
            wire.close()


def test_subscriptions_listed_described_and_kept_across_a_restart() -> None:
    with rill.testing.broker() as b:
        wire = Wire(b.bootstrap_servers)
        assert alter(wire, "producers", {"metrics": "org.apache.kafka.producer.", "interval.ms": "5000",
                                         "match": "client_software_name=librdkafka"}) == (0, "")  # fmt: skip
        assert alter(wire, "gone", {"metrics": "*"})[0] == 0
        assert alter(wire, "gone", {"metrics": None})[0] == 0  # its last config deleted: the subscription goes
        wire.call(ApiKey.CREATE_TOPICS, 5, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                                        "assignments": [], "configs": []}],
                                            "timeout_ms": 10000, "validate_only": False})  # fmt: skip
        wire.close()
        b.restart()
        wire = Wire(b.bootstrap_servers)
        try:
            assert describe(wire, "producers") == {
                "metrics": ("org.apache.kafka.producer.", 7), "interval.ms": ("5000", 7),
                "match": ("client_software_name=librdkafka", 7)}  # fmt: skip
            assert describe(wire, "none") == {"metrics": ("", 5), "interval.ms": ("300000", 5), "match": ("", 5)}
            assert list_resources(wire, 0) == (0, [("producers", CLIENT_METRICS)])
            assert list_resources(wire, 1, [CLIENT_METRICS]) == (0, [("producers", CLIENT_METRICS)])
            node = str(b.broker.node_id)
            assert list_resources(wire, 1) == (0, sorted([("producers", CLIENT_METRICS), ("t", TOPIC),
                                                          (node, BROKER), (node, BROKER_LOGGER)]))  # fmt: skip
            assert list_resources(wire, 1, [TOPIC, GROUP]) == (0, [("t", TOPIC)])
            for unsupported in ([3], [0], [CLIENT_METRICS, 99]):
                assert list_resources(wire, 1, unsupported) == (ErrorCode.UNSUPPORTED_VERSION, [])
        finally:
            wire.close()


def _rill(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rill", *args], capture_output=True, text=True, timeout=60)


def test_rill_configs_client_metrics() -> None:
    with rill.testing.broker() as b:
        bs = b.bootstrap_servers
        base = ["configs", "--bootstrap-server", bs, "--entity-type", "client-metrics"]
        r = _rill(*base, "--alter", "--entity-name", "lib",
                  "--add-config", "metrics=[org.apache.kafka.producer.,org.apache.kafka.consumer.],interval.ms=2000,"
                                  "match=[client_software_name=librdkafka,client_id=app-.*]")  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "Completed updating config for client-metric lib." in r.stdout
        r = _rill(*base, "--alter", "--entity-name", "lib", "--add-config", "interval.ms=10")
        assert r.returncode != 0 and "INVALID_REQUEST" in r.stderr
        r = _rill(*base, "--describe", "--json")
        assert r.returncode == 0, r.stderr
        (sub,) = json.loads(r.stdout)["subscriptions"]
        assert sub["entity_name"] == "lib"
        assert {c["name"]: c["value"] for c in sub["configs"]} == {
            "metrics": "org.apache.kafka.producer.,org.apache.kafka.consumer.", "interval.ms": "2000",
            "match": "client_software_name=librdkafka,client_id=app-.*"}  # fmt: skip
        r = _rill(*base, "--alter", "--entity-name", "lib", "--delete-config", "metrics,interval.ms,match")
        assert r.returncode == 0, r.stderr
        r = _rill(*base, "--describe")
        assert r.returncode == 0 and "No client metrics subscriptions." in r.stdout


def test_stored_subscriptions_another_tool_wrote_never_stop_the_broker(tmp_path: Path) -> None:
    """A journal line holding a number where a string goes, or a subscription this version refuses (a regex that
    does not compile): the broker starts, describes the first as text and offers neither a broken subscription
    nor a failure to the clients."""
    with rill.testing.broker(data_dir=tmp_path) as b:
        wire = Wire(b.bootstrap_servers)
        assert alter(wire, "seed", {"metrics": "a."})[0] == 0
        wire.close()
        b.stop()
        journal = tmp_path / "logs" / "rill-metadata.log"
        offset = max(json.loads(line)["offset"] for line in journal.read_text().splitlines())
        with open(journal, "a") as f:
            written = [("numbers", {"metrics": "b.", "interval.ms": 1000}),
                       ("broken", {"metrics": "c.", "match": "client_id=("})]  # fmt: skip
            for i, (name, configs) in enumerate(written, 1):
                f.write(json.dumps({"offset": offset + i, "type": "client_metrics", "name": name,
                                    "configs": configs}) + "\n")  # fmt: skip
        b.start()
        wire = Wire(b.bootstrap_servers)
        try:
            assert describe(wire, "numbers")["interval.ms"] == ("1000", 7)
            got = wire.call(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, {"client_instance_id": uuid.UUID(int=0)})
            assert (got["error_code"], got["requested_metrics"], got["push_interval_ms"]) == (0, ["a.", "b."], 1000)
        finally:
            wire.close()
