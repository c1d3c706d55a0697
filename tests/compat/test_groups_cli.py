"""``rill groups`` against a running broker: list, describe (members, offsets, lag), reset, delete, errors."""

from __future__ import annotations

import json

import confluent_kafka as ck
import pytest
from tests.compat._groups import BROKER_CONFIGS, consumer_config, create_topic, partitions_cover, poll_all, produce

import rill.testing
from rill.cli.groups import main


@pytest.mark.timeout(60)
def test_list_describe_reset_delete(capsys) -> None:
    with rill.testing.broker(BROKER_CONFIGS) as b:
        bs = b.bootstrap_servers
        create_topic(bs, "clicks", 2)
        produce(bs, "clicks", 20, 2)
        consumer = ck.Consumer(consumer_config(bs, "cli-group", client_id="cli-test"))
        consumer.subscribe(["clicks"])
        got: list[ck.Message] = []
        assert poll_all(
            [consumer], lambda: len(got) >= 20 and partitions_cover([consumer], 2), 20, lambda _c, m: got.append(m)
        )
        consumer.commit(
            offsets=[ck.TopicPartition("clicks", 0, 4), ck.TopicPartition("clicks", 1, 10)], asynchronous=False
        )
        capsys.readouterr()

        assert main(["list", "--bootstrap-server", bs, "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert {"group": "cli-group", "state": "Stable"} in listed

        assert main(["describe", "cli-group", "--bootstrap-server", bs, "--json"]) == 0
        described = json.loads(capsys.readouterr().out)
        assert described["state"] == "Stable"
        assert [m["client_id"] for m in described["members"]] == ["cli-test"]
        rows = {r["partition"]: r for r in described["partitions"]}
        assert (rows[0]["committed_offset"], rows[0]["log_end_offset"], rows[0]["lag"]) == (4, 10, 6)
        assert (rows[1]["committed_offset"], rows[1]["log_end_offset"], rows[1]["lag"]) == (10, 10, 0)
        assert rows[0]["client_id"] == "cli-test"

        assert main(["describe", "cli-group", "--bootstrap-server", bs]) == 0
        table = capsys.readouterr().out
        assert "LOG-END-OFFSET" in table and "cli-test" in table

        # A group with members can be neither deleted nor reset (the reset used to print its table and exit 0,
        # the broker having refused every partition); once empty it can, and then it is gone.
        assert main(["delete", "cli-group", "--bootstrap-server", bs]) == 1
        assert "NON_EMPTY_GROUP" in capsys.readouterr().err
        assert main(["reset", "cli-group", "--topic", "clicks", "--to-earliest", "--bootstrap-server", bs]) == 1
        err = capsys.readouterr().err
        assert "can only be reset if the group 'cli-group' is inactive, but the current state is Stable" in err
        consumer.close()
        # As kafka-consumer-groups.sh: an offset past either end of a partition is kept inside it, with a warning.
        assert main(["reset", "cli-group", "--topic", "clicks", "--to-offset", "100", "--execute", "--bootstrap-server", bs]) == 0
        warning = "New offset (100) is higher than latest offset for topic partition clicks-0. Value will be set to 10"
        assert warning in capsys.readouterr().err
        assert main(["describe", "cli-group", "--bootstrap-server", bs, "--json"]) == 0
        assert {r["partition"]: r["lag"] for r in json.loads(capsys.readouterr().out)["partitions"]} == {0: 0, 1: 0}
        assert main(["reset", "cli-group", "--topic", "clicks", "--to-earliest", "--execute", "--bootstrap-server", bs]) == 0
        capsys.readouterr()
        assert main(["describe", "cli-group", "--bootstrap-server", bs, "--json"]) == 0
        after = json.loads(capsys.readouterr().out)
        assert after["state"] == "Empty"
        assert {r["partition"]: r["lag"] for r in after["partitions"]} == {0: 10, 1: 10}
        assert main(["delete", "cli-group", "--bootstrap-server", bs]) == 0
        capsys.readouterr()
        assert main(["describe", "cli-group", "--bootstrap-server", bs]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "does not exist" in err


def test_unreachable_broker_is_one_line(capsys) -> None:
    assert main(["list", "--bootstrap-server", "127.0.0.1:1", "--timeout", "0.5"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot reach broker") and err.count("\n") == 1
