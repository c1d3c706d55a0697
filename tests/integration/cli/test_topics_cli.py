"""``rill topics`` and ``rill configs`` against a real broker, through subprocesses."""

from __future__ import annotations

import json
import time

import pytest
from cli_helpers import CliBroker, assert_one_line_error, lines, new_topic_name, require_rill, run_cli

pytestmark = pytest.mark.timeout(120)


def _bs(broker: CliBroker) -> list[str]:
    return ["--bootstrap-server", broker.bootstrap]


def test_create_list_describe_delete(cli_broker: CliBroker) -> None:
    topic = new_topic_name()
    created = run_cli("topics", "create", topic, "--partitions", "3", "--replication-factor", "1", *_bs(cli_broker))
    assert created.returncode == 0, created.stderr
    assert lines(created) == [f"Created topic {topic}."]

    listed = run_cli("topics", "list", *_bs(cli_broker))
    assert listed.returncode == 0, listed.stderr
    assert topic in lines(listed)

    listed_json = run_cli("topics", "list", "--json", *_bs(cli_broker))
    entries = {e["topic"]: e for e in json.loads(listed_json.stdout)}
    assert entries[topic]["partitions"] == 3

    described = run_cli("topics", "describe", topic, *_bs(cli_broker))
    assert described.returncode == 0, described.stderr
    out = lines(described)
    assert out[0].startswith(f"Topic: {topic}\tPartitionCount: 3\tReplicationFactor: 1")
    assert out[1].split() == ["PARTITION", "LEADER", "REPLICAS", "ISR"]
    assert [row.split()[0] for row in out[2:]] == ["0", "1", "2"]

    as_json = json.loads(run_cli("topics", "describe", topic, "--json", *_bs(cli_broker)).stdout)
    assert as_json["topic"] == topic
    assert as_json["partition_count"] == 3
    assert [p["partition"] for p in as_json["partitions"]] == [0, 1, 2]
    assert all(p["leader"] is not None and p["isr"] for p in as_json["partitions"])

    deleted = run_cli("topics", "delete", topic, *_bs(cli_broker))
    assert deleted.returncode == 0, deleted.stderr
    assert lines(deleted) == [f"Deleted topic {topic}."]
    assert topic not in lines(run_cli("topics", "list", *_bs(cli_broker)))


def test_create_existing_topic_fails_unless_if_not_exists(cli_broker: CliBroker) -> None:
    topic = new_topic_name()
    assert run_cli("topics", "create", topic, "--partitions", "1", *_bs(cli_broker)).returncode == 0
    again = run_cli("topics", "create", topic, "--partitions", "1", *_bs(cli_broker))
    assert_one_line_error(again, "TOPIC_ALREADY_EXISTS", topic, code=1)
    tolerant = run_cli("topics", "create", topic, "--if-not-exists", *_bs(cli_broker))
    assert tolerant.returncode == 0, tolerant.stderr


def test_unknown_topic_is_one_clear_line(cli_broker: CliBroker) -> None:
    missing = new_topic_name("missing")
    for args in (
        ("describe", missing),
        ("delete", missing),
        ("alter-config", missing, "--add-config", "retention.ms=1000"),
    ):
        proc = run_cli("topics", *args, *_bs(cli_broker))
        assert_one_line_error(proc, "unknown topic", missing, code=1)
    assert run_cli("topics", "delete", missing, "--if-exists", *_bs(cli_broker)).returncode == 0
    proc = run_cli("configs", "describe", "--entity-type", "topics", "--entity-name", missing, *_bs(cli_broker))
    assert_one_line_error(proc, "unknown topic", missing, code=1)


def test_create_with_configs_and_alter_them(cli_broker: CliBroker) -> None:
    require_rill(cli_broker, "reports every topic config with source DEFAULT")
    topic = new_topic_name()
    created = run_cli(
        "topics", "create", topic, "--partitions", "1",
        "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact",
        *_bs(cli_broker),
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    described = lines(run_cli("topics", "describe", topic, *_bs(cli_broker)))
    assert "cleanup.policy=compact" in described[0] and "retention.ms=3600000" in described[0]

    altered = run_cli(
        "topics", "alter-config", topic, "--add-config", "retention.ms=60000,segment.bytes=1048576",
        "--delete-config", "cleanup.policy", *_bs(cli_broker),
    )  # fmt: skip
    assert altered.returncode == 0, altered.stderr
    cfg = json.loads(
        run_cli(
            "configs",
            "describe",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--json",
            *_bs(cli_broker),
        ).stdout
    )
    overrides = {c["name"]: (c["value"], c["source"]) for c in cfg["configs"]}
    assert overrides == {
        "retention.ms": ("60000", "dynamic-topic"),
        "segment.bytes": ("1048576", "dynamic-topic"),
    }
    full = json.loads(
        run_cli(
            "configs", "describe", "--entity-type", "topics", "--entity-name", topic, "--all", "--json",
            *_bs(cli_broker),
        ).stdout
    )  # fmt: skip
    by_name = {c["name"]: c for c in full["configs"]}
    assert by_name["cleanup.policy"]["value"] == "delete"
    assert by_name["cleanup.policy"]["source"] in ("default", "static")
    table = run_cli("configs", "describe", "--entity-type", "topics", "--entity-name", topic, *_bs(cli_broker))
    out = lines(table)
    assert out[0] == f"Dynamic configs for topic {topic}:"
    assert out[1].split() == ["NAME", "VALUE", "SOURCE", "READ-ONLY"]
    assert any(row.split()[:3] == ["retention.ms", "60000", "dynamic-topic"] for row in out[2:])


def test_bad_config_value_is_rejected(cli_broker: CliBroker) -> None:
    require_rill(cli_broker, "accepts any config value")
    topic = new_topic_name()
    proc = run_cli("topics", "create", topic, "--config", "retention.ms=soon", *_bs(cli_broker))
    assert_one_line_error(proc, "INVALID_CONFIG", code=1)
    assert topic not in lines(run_cli("topics", "list", *_bs(cli_broker)))

    assert run_cli("topics", "create", topic, "--partitions", "1", *_bs(cli_broker)).returncode == 0
    proc = run_cli("topics", "alter-config", topic, "--add-config", "cleanup.policy=sometimes", *_bs(cli_broker))
    assert_one_line_error(proc, "INVALID_CONFIG", code=1)
    proc = run_cli("topics", "alter-config", topic, "--add-config", "no.such.config=1", *_bs(cli_broker))
    assert_one_line_error(proc, code=1)


def test_broker_configs_show_sources(cli_broker: CliBroker) -> None:
    require_rill(cli_broker, "does not describe broker configs")
    full = json.loads(
        run_cli("configs", "describe", "--entity-type", "brokers", "--all", "--json", *_bs(cli_broker)).stdout
    )
    sources = {c["source"] for c in full["configs"]}
    assert "default" in sources
    names = {c["name"] for c in full["configs"]}
    assert "log.retention.hours" in names or "log.retention.ms" in names

    broker_id = full["entity_name"]
    assert broker_id.isdigit()
    altered = run_cli(
        "configs", "alter", "--entity-type", "brokers", "--entity-name", broker_id,
        "--add-config", "log.retention.ms=7200000", *_bs(cli_broker),
    )  # fmt: skip
    assert altered.returncode == 0, altered.stderr
    assert lines(altered) == [f"Completed updating config for broker {broker_id}."]
    after = json.loads(run_cli("configs", "describe", "--entity-type", "brokers", "--json", *_bs(cli_broker)).stdout)
    overrides = {c["name"]: (c["value"], c["source"]) for c in after["configs"]}
    assert overrides.get("log.retention.ms") == ("7200000", "dynamic-broker")
    # As kafka-configs: without --all, only what was set at run time (static rows used to be listed under the
    # "Dynamic configs" header).
    assert {source for _, source in overrides.values()} == {"dynamic-broker"}
    removed = run_cli(
        "configs", "alter", "--entity-type", "brokers", "--entity-name", broker_id,
        "--delete-config", "log.retention.ms", *_bs(cli_broker),
    )  # fmt: skip
    assert removed.returncode == 0, removed.stderr
    after = json.loads(run_cli("configs", "describe", "--entity-type", "brokers", "--json", *_bs(cli_broker)).stdout)
    assert "log.retention.ms" not in {c["name"] for c in after["configs"]}
    proc = run_cli("configs", "alter", "--entity-type", "brokers", "--entity-name", "x", *_bs(cli_broker))
    assert_one_line_error(proc, "broker id", code=2)  # a malformed argument: a usage error
    # A broker id the cluster does not have is named at once (the describe used to wait out its timeout).
    started = time.monotonic()
    proc = run_cli("configs", "describe", "--entity-type", "brokers", "--entity-name", "57", *_bs(cli_broker))
    assert_one_line_error(proc, "no broker with id 57", code=1)
    assert time.monotonic() - started < 5


def test_usage_errors_exit_2_with_one_line(cli_broker: CliBroker) -> None:
    assert_one_line_error(run_cli("topics", "frobnicate"), "invalid choice", code=2)
    assert_one_line_error(run_cli("topics", "create", "t", "--partitions", "many"), "--partitions", code=2)
    proc = run_cli("topics", "create", new_topic_name(), "--config", "novalue", *_bs(cli_broker))
    assert_one_line_error(proc, "key=value", code=2)
    assert_one_line_error(run_cli("configs", "describe", "--entity-type", "bogus"), "invalid choice", code=2)
    proc = run_cli("configs", "alter", "--entity-type", "topics", "--entity-name", "x", *_bs(cli_broker))
    assert_one_line_error(proc, "nothing to alter", code=2)


def test_kafka_tools_own_form(cli_broker: CliBroker) -> None:
    """What a Kafka user types (``kafka-topics.sh --create --topic T``, ``kafka-configs.sh --describe``,
    ``kafka-consumer-groups.sh --list``) does what the subcommand does; it used to be 'invalid choice'."""
    topic = new_topic_name("kform")
    created = run_cli("topics", "--create", "--topic", topic, "--partitions", "2", *_bs(cli_broker))
    assert created.returncode == 0, created.stderr
    assert lines(created) == [f"Created topic {topic}."]
    assert topic in lines(run_cli("topics", *_bs(cli_broker), "--list"))
    described = run_cli("topics", "--describe", f"--topic={topic}", *_bs(cli_broker))
    assert described.returncode == 0, described.stderr
    assert lines(described)[0].startswith(f"Topic: {topic}\tPartitionCount: 2")
    configs = run_cli("configs", "--describe", "--entity-type", "topics", "--entity-name", topic, *_bs(cli_broker))
    assert configs.returncode == 0, configs.stderr
    assert run_cli("groups", "--list", *_bs(cli_broker)).returncode == 0
    assert_one_line_error(run_cli("topics", "--list", "--create", *_bs(cli_broker)), "one action", code=2)
    assert_one_line_error(run_cli("topics", "--delete", "--topic"), "--topic needs a value", code=2)
    deleted = run_cli("topics", "--delete", "--topic", topic, *_bs(cli_broker))
    assert deleted.returncode == 0, deleted.stderr
    assert topic not in lines(run_cli("topics", "--list", *_bs(cli_broker)))


def test_rill_front_routes_to_the_subcommands(cli_broker: CliBroker) -> None:
    import subprocess
    import sys

    topic = new_topic_name()

    def rill(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "rill", *args], input=stdin, capture_output=True, timeout=60)

    assert rill("topics", "create", topic, "--partitions", "1", *_bs(cli_broker)).returncode == 0
    assert rill("produce", topic, *_bs(cli_broker), stdin=b"via the front\n").returncode == 0
    consumed = rill("consume", topic, "--from-beginning", "--exit-at-end", "-q", *_bs(cli_broker))
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout == b"via the front\n"
    described = rill("configs", "describe", "--entity-type", "topics", "--entity-name", topic, *_bs(cli_broker))
    assert described.returncode == 0, described.stderr
    assert_one_line_error(rill("topics", "describe", new_topic_name("missing"), *_bs(cli_broker)), "unknown topic")


def test_bad_client_configs_are_one_line(cli_broker: CliBroker, tmp_path: object) -> None:
    from pathlib import Path

    props = Path(str(tmp_path)) / "client.properties"
    props.write_text("# client settings\nno.such.property=1\n")
    proc = run_cli("topics", "list", "--command-config", str(props), *_bs(cli_broker))
    assert_one_line_error(proc, "no.such.property", code=1)
    proc = run_cli("topics", "list", "--command-config", str(props) + ".missing", *_bs(cli_broker))
    assert_one_line_error(proc, "cannot read", code=1)
    proc = run_cli("consume", "t", "--consumer-property", "bogus=1", *_bs(cli_broker))
    assert_one_line_error(proc, "bogus", code=1)
