"""``rill groups`` with classic and consumer (KIP-848) groups side by side: types in the list, and for the
consumer group its epochs and each member's epoch and target assignment."""

from __future__ import annotations

import json
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from rill.cli.groups import main

CONFIGS = {"group.consumer.heartbeat.interval.ms": "300", "group.consumer.min.heartbeat.interval.ms": "100",
           "group.initial.rebalance.delay.ms": "0"}  # fmt: skip


def _consumer(bootstrap: str, group: str, protocol: str) -> confluent_kafka.Consumer:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                                  "client.id": f"{protocol}-client", "auto.offset.reset": "earliest"})  # fmt: skip
    c.subscribe(["cli-types"])
    return c


@pytest.mark.rill_broker_config(**CONFIGS)
def test_list_and_describe_both_kinds(rill_broker, capsys: pytest.CaptureFixture[str]) -> None:
    bs = rill_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic("cli-types", 2, 1)])["cli-types"].result(30)
    consumers = [_consumer(bs, "new-group", "consumer"), _consumer(bs, "old-group", "classic")]
    try:
        deadline = time.monotonic() + 30
        while not all(c.assignment() for c in consumers):
            assert time.monotonic() < deadline, "the consumers got no partitions"
            for c in consumers:
                c.poll(0.1)
        capsys.readouterr()
        assert main(["list", "--bootstrap-server", bs, "--json"]) == 0
        listed = {g["group"]: g for g in json.loads(capsys.readouterr().out)}
        assert listed["new-group"] == {"group": "new-group", "state": "Stable", "type": "consumer"}
        assert listed["old-group"]["type"] == "classic"
        assert main(["list", "--bootstrap-server", bs, "--type", "consumer"]) == 0
        table = capsys.readouterr().out
        assert "new-group" in table and "old-group" not in table and "TYPE" in table

        assert main(["describe", "new-group", "--bootstrap-server", bs, "--members", "--json"]) == 0
        described = json.loads(capsys.readouterr().out)
        assert (described["type"], described["group_epoch"], described["assignment_epoch"]) == ("consumer", 1, 1)
        [member] = described["members"]
        assert member["member_epoch"] == 1 and member["protocol"] == "consumer"
        assert member["target_assignment"] == ["cli-types-0", "cli-types-1"] == member["assignment"]

        assert main(["describe", "new-group", "--bootstrap-server", bs, "--members", "--verbose"]) == 0
        table = capsys.readouterr().out
        assert "CURRENT-EPOCH" in table and "TARGET-ASSIGNMENT" in table and "cli-types:0,1" in table
        assert main(["describe", "new-group", "--bootstrap-server", bs]) == 0  # the offsets view
        assert "CURRENT-OFFSET" in capsys.readouterr().out
        assert main(["describe", "new-group", "old-group", "--bootstrap-server", bs, "--state"]) == 0
        table = capsys.readouterr().out
        assert "GROUP-EPOCH" in table and "consumer" in table and "classic" in table
    finally:
        for c in consumers:
            c.close()


@pytest.mark.rill_broker_config(**CONFIGS)
def test_describe_shows_the_protocol_of_each_member_of_a_migrated_group(
    rill_broker, capsys: pytest.CaptureFixture[str]
) -> None:
    bs = rill_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic("cli-types", 2, 1)])["cli-types"].result(30)
    consumers = [_consumer(bs, "mixed-group", "classic")]
    try:
        deadline = time.monotonic() + 30
        while not consumers[0].assignment():
            assert time.monotonic() < deadline, "the classic consumer got no partitions"
            consumers[0].poll(0.1)
        consumers.append(_consumer(bs, "mixed-group", "consumer"))  # the group becomes a consumer group
        while True:
            for c in consumers:
                c.poll(0.1)
            capsys.readouterr()
            assert main(["describe", "mixed-group", "--bootstrap-server", bs, "--members", "--json"]) == 0
            described = json.loads(capsys.readouterr().out)
            if described["type"] == "consumer" and len(described["members"]) == 2:
                break
            assert time.monotonic() < deadline, f"the group did not become a consumer group: {described}"
        by_client = {m["client_id"]: m["protocol"] for m in described["members"]}
        assert by_client == {"classic-client": "classic", "consumer-client": "consumer"}
        assert main(["describe", "mixed-group", "--bootstrap-server", bs, "--members"]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert lines[0].split()[-1] == "PROTOCOL"
        assert sorted(line.split()[-1] for line in lines[1:]) == ["classic", "consumer"]
    finally:
        for c in consumers:
            c.close()
