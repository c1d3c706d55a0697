"""``rill consume --group`` stopped by SIGINT or SIGTERM: it exits at once, commits what it printed and leaves
its group, so the group is Empty as soon as the process is gone (not Stable until the session times out)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from cli_helpers import CliBroker, new_topic_name, require_rill, run_cli

pytestmark = pytest.mark.timeout(240)

ROUNDS = 3  # per signal; each round is a fresh group


def _group_state(bootstrap: str, group: str) -> tuple[str, int, dict[int, int]]:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    committed = {tp.partition: tp.offset for tp in offsets.topic_partitions if tp.offset >= 0}
    return described.state.name, len(described.members), committed


def _consume_then_signal(cli_broker: CliBroker, sig: signal.Signals) -> None:
    require_rill(cli_broker, "the group's state after a member leaves")
    bs = ["--bootstrap-server", cli_broker.bootstrap]
    topic = new_topic_name("sig")
    group = new_topic_name("sig-group")
    assert run_cli("topics", "create", topic, "--partitions", "2", *bs).returncode == 0
    assert run_cli("produce", topic, *bs, stdin=b"a\nb\nc\nd\n").returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "rill.cli.consume", topic, "--group", group, "--from-beginning", *bs],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        got = sorted(proc.stdout.readline() for _ in range(4))
        assert got == [b"a\n", b"b\n", b"c\n", b"d\n"]
        sent = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    assert took < 3.0, f"{sig.name}: exited {took:.2f} s after the signal"
    assert err.decode().strip().endswith("Processed a total of 4 messages"), err
    # It left the group on the way out and committed the position of what it printed.
    state, members, committed = _group_state(cli_broker.bootstrap, group)
    assert (state, members) == ("EMPTY", 0), f"{sig.name}: group {state} with {members} member(s) after exit"
    assert sum(committed.values()) == 4, committed


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signalled_group_consumer_exits_at_once_and_leaves_its_group(
    cli_broker: CliBroker, sig: signal.Signals
) -> None:
    for _ in range(ROUNDS):
        _consume_then_signal(cli_broker, sig)


@pytest.mark.parametrize("group", [True, False], ids=["group", "no-group"])
def test_a_consumer_whose_broker_went_away_still_stops_on_a_signal(group: bool) -> None:
    """Ctrl-C after the broker has gone: the command still exits 130 with its total, within ``--timeout``.

    It used to lose the KeyboardInterrupt inside the client's consume call (exit 1, "SystemError: ... returned
    NULL without setting an exception"), and a group member then waited in close() for the session timeout
    (45 s) to give up on leaving a group whose coordinator no longer answered."""
    from rill.testing import broker

    with broker({}) as running:
        bs = ["--bootstrap-server", running.bootstrap_servers]
        topic = new_topic_name("gone")
        assert run_cli("topics", "create", topic, "--partitions", "2", *bs).returncode == 0
        assert run_cli("produce", topic, *bs, stdin=b"a\nb\nc\n").returncode == 0
        extra = ["--group", new_topic_name("gone-group")] if group else []
        proc = subprocess.Popen(
            [sys.executable, "-m", "rill.cli.consume", topic, "--from-beginning", "--timeout", "2", *extra, *bs],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            assert sorted(proc.stdout.readline() for _ in range(3)) == [b"a\n", b"b\n", b"c\n"]
            running.stop()
            time.sleep(1.0)  # the client notices the lost connection
            sent = time.monotonic()
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
            took = time.monotonic() - sent
        finally:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert took < 2.0 + 3.0, f"exited {took:.2f} s after the signal"
    assert "Processed a total of 3 messages" in err.decode(), err
    assert "Traceback" not in err.decode() and "SystemError" not in err.decode(), err
