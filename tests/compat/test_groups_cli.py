"""``rill groups`` against a running broker: list, describe (offsets and lag, members, state), reset (every spec and
scope, dry run or execute), delete, delete-offsets, Kafka's own forms of them, and errors."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient
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
        assert {"group": "cli-group", "state": "Stable", "type": "classic"} in listed

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
        reset = ["reset", "cli-group", "--topic", "clicks", "--execute", "--bootstrap-server", bs]
        assert main([*reset, "--to-offset", "100"]) == 0
        warning = "New offset (100) is higher than latest offset for topic partition clicks-0. Value will be set to 10"
        assert warning in capsys.readouterr().err
        assert main(["describe", "cli-group", "--bootstrap-server", bs, "--json"]) == 0
        assert {r["partition"]: r["lag"] for r in json.loads(capsys.readouterr().out)["partitions"]} == {0: 0, 1: 0}
        assert main([*reset, "--to-earliest"]) == 0
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


# ------------------------------------------------------------------ kafka-consumer-groups.sh's actions and options


@pytest.fixture(scope="module")
def bs() -> Iterator[str]:
    with rill.testing.broker(BROKER_CONFIGS) as b:
        yield b.bootstrap_servers


def _topic(bs: str, partitions: int = 2, per_partition: int = 10, timestamps: list[int] | None = None) -> str:
    """A new topic with ``per_partition`` records in each partition (record i stamped ``timestamps[i]``)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(bs, name, partitions)
    producer = ck.Producer({"bootstrap.servers": bs})
    for p in range(partitions):
        for i in range(per_partition):
            extra = {"timestamp": timestamps[i]} if timestamps is not None else {}
            producer.produce(name, f"{p}-{i}".encode(), partition=p, **extra)
    assert producer.flush(15) == 0
    return name


def _commit(bs: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit offsets for ``group`` without joining it: the group exists and is Empty."""
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        tps = [ck.TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        consumer.commit(offsets=tps, asynchronous=False)
    finally:
        consumer.close()


def _committed(bs: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bs})
    found = admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group)])[group].result(15)
    return {(tp.topic, tp.partition): tp.offset for tp in found.topic_partitions if tp.offset >= 0}


def _group() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _plan_rows(out: str) -> list[list[str]]:
    lines = out.strip().splitlines()
    assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], out
    return [line.split() for line in lines[1:]]


@pytest.mark.timeout(60)
def test_kafkas_own_reset_form_executes(bs: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--reset-offsets ... --execute`` as in kafka-consumer-groups.sh (it was refused as an invalid choice)."""
    topic, group = _topic(bs), _group()
    _commit(bs, group, {(topic, 0): 7, (topic, 1): 8})
    code, out, err = _run(
        capsys, "--bootstrap-server", bs, "--group", group, "--reset-offsets", "--to-earliest", "--topic", topic,
        "--execute",
    )  # fmt: skip
    assert code == 0, err
    assert _plan_rows(out) == [[group, topic, "0", "0"], [group, topic, "1", "0"]]
    assert _committed(bs, group) == {(topic, 0): 0, (topic, 1): 0}
    # The other actions in Kafka's form.
    code, out, _ = _run(capsys, "--bootstrap-server", bs, "--list")
    assert code == 0 and group in out.split()
    code, out, _ = _run(capsys, "--bootstrap-server", bs, "--describe", "--group", group)
    assert code == 0 and out.split()[:9] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                                             "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]  # fmt: skip
    code, out, _ = _run(capsys, "--bootstrap-server", bs, "--delete-offsets", "--group", group, "--topic", f"{topic}:1")
    assert code == 0 and _committed(bs, group) == {(topic, 0): 0}
    code, out, _ = _run(capsys, "--bootstrap-server", bs, "--delete", "--group", group)
    assert code == 0 and f"'{group}'" in out
    code, _, err = _run(capsys, "--bootstrap-server", bs, "--list", "--describe")
    assert code == 2 and "give one action" in err


@pytest.mark.timeout(60)
def test_reset_is_a_dry_run_unless_execute(bs: str, capsys: pytest.CaptureFixture[str]) -> None:
    topic, group = _topic(bs), _group()
    _commit(bs, group, {(topic, 0): 3, (topic, 1): 4})
    code, out, err = _run(capsys, "reset", group, "--topic", topic, "--to-latest", "--bootstrap-server", bs)
    assert code == 0
    assert _plan_rows(out) == [[group, topic, "0", "10"], [group, topic, "1", "10"]]
    assert "--execute" in err  # the warning that nothing was written
    assert _committed(bs, group) == {(topic, 0): 3, (topic, 1): 4}
    code, out, err = _run(capsys, "reset", group, "--topic", topic, "--to-latest", "--dry-run", "--bootstrap-server",
                          bs)  # fmt: skip
    assert code == 0 and err == "" and len(_plan_rows(out)) == 2
    assert _committed(bs, group) == {(topic, 0): 3, (topic, 1): 4}
    code, _, err = _run(capsys, "reset", group, "--topic", topic, "--to-latest", "--dry-run", "--execute",
                        "--bootstrap-server", bs)  # fmt: skip
    assert code == 2 and "not allowed with" in err


@pytest.mark.timeout(90)
def test_reset_specs_and_scopes(bs: str, capsys: pytest.CaptureFixture[str]) -> None:
    now = int(time.time() * 1000)
    hour = 3_600_000
    # Records i = 0..9 stamped 10 h, 9 h, ... 1 h ago.
    stamps = [now - (10 - i) * hour for i in range(10)]
    topic, other, group = _topic(bs, timestamps=stamps), _topic(bs, partitions=1), _group()
    _commit(bs, group, {(topic, 0): 5, (topic, 1): 6, (other, 0): 2})

    def reset(*spec: str) -> list[list[str]]:
        code, out, err = _run(capsys, "reset", group, *spec, "--execute", "--bootstrap-server", bs)
        assert code == 0, err
        return _plan_rows(out)

    # --shift-by moves from the committed offset, kept inside the log with a warning.
    assert reset("--topic", topic, "--shift-by", "-2") == [[group, topic, "0", "3"], [group, topic, "1", "4"]]
    assert reset("--topic", topic, "--shift-by", "8")[0][3] == "10"
    assert _committed(bs, group)[(topic, 0)] == 10
    # --to-datetime: the first record at or after that time (a zone-less time is local, as in Kafka).
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime((stamps[4] - 1000) / 1000)) + ".000"
    assert reset("--topic", topic, "--to-datetime", at) == [[group, topic, "0", "4"], [group, topic, "1", "4"]]
    utc = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((stamps[7] - 1000) / 1000)) + ".000Z"
    assert [r[3] for r in reset("--topic", topic, "--to-datetime", utc)] == ["7", "7"]
    # --by-duration: now minus the duration (3.5 h ago: records 7..9 are newer).
    assert [r[3] for r in reset("--topic", topic, "--by-duration", "PT3H30M")] == ["7", "7"]
    assert [r[3] for r in reset("--topic", topic, "--by-duration", "P1D")] == ["0", "0"]
    # --topic T:1 resets that partition only; --to-current keeps the committed offset.
    assert reset("--topic", f"{topic}:1", "--to-offset", "2") == [[group, topic, "1", "2"]]
    assert _committed(bs, group) == {(topic, 0): 0, (topic, 1): 2, (other, 0): 2}
    assert reset("--topic", f"{topic}:0,1", "--to-current") == [[group, topic, "0", "0"], [group, topic, "1", "2"]]
    # --all-topics: every partition the group has an offset for.
    rows = reset("--all-topics", "--to-latest")
    expected = [(topic, "0", "10"), (topic, "1", "10"), (other, "0", "10")]
    assert sorted((r[1], r[2], r[3]) for r in rows) == sorted(expected)
    # --all-groups resets every (inactive) group.
    second = _group()
    _commit(bs, second, {(other, 0): 1})
    code, out, err = _run(capsys, "reset", "--all-groups", "--topic", other, "--to-earliest", "--execute",
                          "--bootstrap-server", bs)  # fmt: skip
    assert code == 0, err
    assert {(r[0], r[3]) for r in _plan_rows(out)} >= {(group, "0"), (second, "0")}
    assert _committed(bs, second) == {(other, 0): 0}


@pytest.mark.timeout(60)
def test_bad_reset_input_changes_nothing(bs: str, capsys: pytest.CaptureFixture[str]) -> None:
    topic, group = _topic(bs), _group()
    _commit(bs, group, {(topic, 0): 3})
    for spec, needle in [
        (["--topic", topic, "--to-datetime", "yesterday"], "invalid --to-datetime 'yesterday'"),
        (["--topic", topic, "--by-duration", "1h"], "invalid --by-duration '1h'"),
        (["--topic", f"{topic}:x", "--to-earliest"], "invalid partition 'x'"),
        (["--topic", f"{topic}:0,9", "--to-earliest"], f"{topic}-9 do not exist"),
        (["--topic", "no-such-topic", "--to-earliest"], "'no-such-topic' does not exist"),
        (["--topic", topic, "--shift-by", "1"], f"cannot shift the offset of {topic}-1"),
        (["--topic", topic], "one of the arguments --to-earliest"),
    ]:
        code, out, err = _run(capsys, "reset", group, *spec, "--execute", "--bootstrap-server", bs)
        assert code in (1, 2) and out == "", (spec, out, err)
        assert err.count("\n") == 1 and err.startswith("error: ") and needle in err, (spec, err)
    assert _committed(bs, group) == {(topic, 0): 3}


@pytest.mark.timeout(90)
def test_an_active_group_cannot_be_reset_or_lose_offsets(bs: str, capsys: pytest.CaptureFixture[str]) -> None:
    topic, group = _topic(bs), _group()
    consumer = ck.Consumer(consumer_config(bs, group, client_id="active-member"))
    consumer.subscribe([topic])
    try:
        assert poll_all([consumer], lambda: partitions_cover([consumer], 2), 20)
        consumer.commit(offsets=[ck.TopicPartition(topic, 0, 4), ck.TopicPartition(topic, 1, 5)], asynchronous=False)
        code, out, err = _run(capsys, "reset", group, "--topic", topic, "--to-earliest", "--execute",
                              "--bootstrap-server", bs)  # fmt: skip
        assert code == 1 and out == ""
        assert f"group '{group}' is inactive, but the current state is Stable" in err
        code, out, err = _run(capsys, "delete-offsets", group, "--topic", topic, "--bootstrap-server", bs)
        assert code == 1
        assert out.split()[:3] == ["TOPIC", "PARTITION", "STATUS"] and "Error: GROUP_SUBSCRIBED_TO_TOPIC" in out
        assert "GROUP_SUBSCRIBED_TO_TOPIC" in err and err.count("\n") == 1
        assert _committed(bs, group) == {(topic, 0): 4, (topic, 1): 5}

        # The views of a group with a member.
        code, out, err = _run(capsys, "describe", group, "--members", "--verbose", "--bootstrap-server", bs)
        lines = out.strip().splitlines()
        assert code == 0 and lines[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                                  "ASSIGNMENT"]  # fmt: skip
        row = lines[1].split()
        assert (row[0], row[3], row[4], row[5]) == (group, "active-member", "2", f"{topic}:0,1")
        code, out, _ = _run(capsys, "describe", group, "--state", "--bootstrap-server", bs)
        lines = out.strip().splitlines()
        assert lines[0].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        assert lines[1].split()[0] == group and lines[1].split()[-2:] == ["Stable", "1"]
        code, out, _ = _run(capsys, "describe", group, "--offsets", "--verbose", "--bootstrap-server", bs)
        assert out.split()[:4] == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH"]
        code, out, _ = _run(capsys, "list", "--state", "Stable", "--bootstrap-server", bs)
        assert code == 0 and [group, "Stable"] in [line.split() for line in out.splitlines()]
        code, out, _ = _run(capsys, "list", "--state", "empty", "--bootstrap-server", bs)
        assert group not in out
        code, _, err = _run(capsys, "list", "--state", "Sleeping", "--bootstrap-server", bs)
        assert code == 2 and "invalid state list 'Sleeping'" in err
    finally:
        consumer.close()
    # Once the member has left, the offsets can go, partition by partition.
    code, out, err = _run(capsys, "delete-offsets", group, "--topic", f"{topic}:1", "--bootstrap-server", bs)
    assert code == 0, err
    assert f"Request succeeded for deleting offsets from group {group}." in out
    assert [topic, "1", "Successful"] in [line.split() for line in out.splitlines()]
    assert _committed(bs, group) == {(topic, 0): 4}
    code, out, err = _run(capsys, "describe", group, "--bootstrap-server", bs)
    assert f"Consumer group '{group}' has no active members." in err
    assert [line.split()[:6] for line in out.strip().splitlines()[1:]] == [[group, topic, "0", "4", "10", "6"]]


@pytest.mark.timeout(60)
def test_all_groups_describe_and_delete(capsys: pytest.CaptureFixture[str]) -> None:
    with rill.testing.broker(BROKER_CONFIGS) as b:
        bs = b.bootstrap_servers
        topic = _topic(bs, partitions=1)
        groups = sorted([_group(), _group()])
        for i, g in enumerate(groups):
            _commit(bs, g, {(topic, 0): i + 1})
        code, out, _ = _run(capsys, "list", "--bootstrap-server", bs)
        assert code == 0 and out.split() == groups
        code, out, err = _run(capsys, "describe", "--all-groups", "--bootstrap-server", bs)
        assert code == 0, err
        assert [line.split()[:4] for line in out.strip().splitlines()[1:]] == [
            [groups[0], topic, "0", "1"], [groups[1], topic, "0", "2"]
        ]  # fmt: skip
        code, _, err = _run(capsys, "describe", "--bootstrap-server", bs)
        assert code == 2 and "--all-groups" in err
        code, out, err = _run(capsys, "delete", "--all-groups", "--bootstrap-server", bs)
        assert code == 0, err
        assert out.strip() == f"Deletion of requested consumer groups ('{groups[0]}', '{groups[1]}') was successful."
        code, out, _ = _run(capsys, "list", "--bootstrap-server", bs)
        assert out == ""
