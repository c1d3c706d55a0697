"""``rill produce`` and ``rill consume`` against a real broker, through subprocesses."""

from __future__ import annotations

import json
import time

import pytest
from cli_helpers import CliBroker, assert_one_line_error, lines, new_topic_name, require_rill, run_cli

pytestmark = pytest.mark.timeout(180)


def _bs(broker: CliBroker) -> list[str]:
    return ["--bootstrap-server", broker.bootstrap]


def _topic(broker: CliBroker, partitions: int = 1) -> str:
    topic = new_topic_name("pc")
    created = run_cli("topics", "create", topic, "--partitions", str(partitions), *_bs(broker))
    assert created.returncode == 0, created.stderr
    return topic


def _consume(broker: CliBroker, topic: str, *args: str) -> list[str]:
    proc = run_cli("consume", topic, "--exit-at-end", *args, *_bs(broker))
    assert proc.returncode == 0, proc.stderr
    return lines(proc)


def test_lines_round_trip_with_keys_headers_and_format(cli_broker: CliBroker) -> None:
    topic = _topic(cli_broker)
    before_ms = int(time.time() * 1000) - 1
    data = b"k1\tone\nk2\ttwo words\r\nk3\t\n"
    produced = run_cli(
        "produce",
        topic,
        "--parse-key",
        "--header",
        "source=cli",
        "--header",
        "n=1",
        *_bs(cli_broker),
        stdin=data,
    )
    assert produced.returncode == 0, produced.stderr
    assert produced.stdout == b""

    out = _consume(cli_broker, topic, "--from-beginning", "--format", "%t|%p|%o|%k|%s|%h|%S|%K\\n")
    assert out == [
        f"{topic}|0|0|k1|one|source=cli,n=1|3|2",
        f"{topic}|0|1|k2|two words|source=cli,n=1|9|2",
        f"{topic}|0|2|k3||source=cli,n=1|0|2",
    ]
    records = [json.loads(line) for line in _consume(cli_broker, topic, "--from-beginning", "--json")]
    assert [(r["offset"], r["key"], r["value"]) for r in records] == [
        (0, "k1", "one"),
        (1, "k2", "two words"),
        (2, "k3", ""),
    ]
    assert records[0]["headers"] == {"source": "cli", "n": "1"}
    assert all(r["timestamp"] >= before_ms for r in records)
    stamps = _consume(cli_broker, topic, "--from-beginning", "--format", "%T\\n")
    assert [int(s) for s in stamps] == [r["timestamp"] for r in records]


def test_json_keeps_bytes_that_are_not_utf8(cli_broker: CliBroker) -> None:
    """Binary keys, values and header values (Avro, say) come out of --json in base64 under their own names,
    byte for byte (they were decoded with replacement characters); text stays text, null stays null."""
    import base64

    from confluent_kafka import Producer

    topic = _topic(cli_broker)
    producer = Producer({"bootstrap.servers": cli_broker.bootstrap})
    producer.produce(topic, value=b"\x00\x02\xfe\xff", key=b"\xc3\x28", headers=[("bin", b"\x80"), ("txt", b"ok")])
    producer.produce(topic, value=None, key="plain")
    assert producer.flush(10) == 0
    first, second = (json.loads(line) for line in _consume(cli_broker, topic, "--from-beginning", "--json"))
    assert "key" not in first and "value" not in first
    assert base64.b64decode(first["key_base64"]) == b"\xc3\x28"
    assert base64.b64decode(first["value_base64"]) == b"\x00\x02\xfe\xff"
    assert first["headers"] == {"txt": "ok"}
    assert {k: base64.b64decode(v) for k, v in first["headers_base64"].items()} == {"bin": b"\x80"}
    assert (second["key"], second["value"], second["headers"]) == ("plain", None, {})
    assert "headers_base64" not in second and "value_base64" not in second


def test_default_output_is_values_and_total_goes_to_stderr(cli_broker: CliBroker) -> None:
    topic = _topic(cli_broker)
    assert run_cli("produce", topic, *_bs(cli_broker), stdin=b"a\nb\nc").returncode == 0
    proc = run_cli("consume", topic, "--from-beginning", "--exit-at-end", *_bs(cli_broker))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"a\nb\nc\n"
    assert proc.stderr.decode().strip() == "Processed a total of 3 messages"
    quiet = run_cli("consume", topic, "--from-beginning", "--exit-at-end", "-q", *_bs(cli_broker))
    assert quiet.stderr == b""


def test_an_interrupted_consumer_reports_what_it_printed(cli_broker: CliBroker) -> None:
    """Ctrl-C on a running ``rill consume``: the total of the records it printed (it said 0), and exit 130."""
    import os
    import signal
    import subprocess
    import sys

    topic = _topic(cli_broker)
    assert run_cli("produce", topic, *_bs(cli_broker), stdin=b"a\nb\nc\n").returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "rill.cli.consume", topic, "--from-beginning", *_bs(cli_broker)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        got = [proc.stdout.readline() for _ in range(3)]
        assert got == [b"a\n", b"b\n", b"c\n"]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err.decode().strip().endswith("Processed a total of 3 messages")


def test_key_separator_file_and_partition(cli_broker: CliBroker, tmp_path: pytest.TempPathFactory) -> None:
    topic = _topic(cli_broker, partitions=3)
    path = tmp_path / "input.txt"  # type: ignore[operator]
    path.write_bytes(b"".join(b"key%d:value %d\n" % (i, i) for i in range(30)))
    proc = run_cli("produce", topic, "--file", str(path), "--key-separator", ":", "--partition", "2", *_bs(cli_broker))
    assert proc.returncode == 0, proc.stderr
    assert _consume(cli_broker, topic, "--from-beginning", "--partition", "0") == []
    out = _consume(cli_broker, topic, "--from-beginning", "--partition", "2", "--format", "%p %o %k=%s\\n")
    assert out == [f"2 {i} key{i}=value {i}" for i in range(30)]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_and_acks(cli_broker: CliBroker, codec: str) -> None:
    topic = _topic(cli_broker)
    data = b"".join(b"record number %d with some repeated text text text\n" % i for i in range(500))
    proc = run_cli("produce", topic, "--compression", codec, "--acks", "1", *_bs(cli_broker), stdin=data)
    assert proc.returncode == 0, proc.stderr
    out = _consume(cli_broker, topic, "--from-beginning")
    assert out == data.decode().splitlines()


def test_acks_zero(cli_broker: CliBroker) -> None:
    topic = _topic(cli_broker)
    proc = run_cli("produce", topic, "--acks", "0", *_bs(cli_broker), stdin=b"x\ny\n")
    assert proc.returncode == 0, proc.stderr
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _consume(cli_broker, topic, "--from-beginning") == ["x", "y"]:
            return
        time.sleep(0.2)
    raise AssertionError("acks=0 records never became readable")


def test_start_positions_and_count(cli_broker: CliBroker) -> None:
    topic = _topic(cli_broker)
    first = run_cli("produce", topic, *_bs(cli_broker), stdin=b"".join(b"v%d\n" % i for i in range(10)))
    assert first.returncode == 0, first.stderr
    time.sleep(0.05)
    middle_ms = int(time.time() * 1000)
    time.sleep(0.05)
    second = run_cli("produce", topic, *_bs(cli_broker), stdin=b"".join(b"v%d\n" % i for i in range(10, 15)))
    assert second.returncode == 0, second.stderr

    assert _consume(cli_broker, topic, "--offset", "earliest") == [f"v{i}" for i in range(15)]
    assert _consume(cli_broker, topic, "--offset", "7") == [f"v{i}" for i in range(7, 15)]
    counted = run_cli("consume", topic, "--from-beginning", "--count", "4", *_bs(cli_broker))
    assert counted.returncode == 0, counted.stderr
    assert lines(counted) == ["v0", "v1", "v2", "v3"]
    idle = run_cli("consume", topic, "--offset", "15", "--timeout-ms", "500", *_bs(cli_broker))
    assert idle.returncode == 0 and idle.stdout == b"", idle.stderr

    require_rill(cli_broker, "its high watermark counts batches, not records")
    assert _consume(cli_broker, topic, "--offset", "-3") == ["v12", "v13", "v14"]
    assert _consume(cli_broker, topic, "--offset", "latest") == []
    assert _consume(cli_broker, topic) == []
    assert _consume(cli_broker, topic, "--timestamp", str(middle_ms)) == [f"v{i}" for i in range(10, 15)]


def test_group_commits_its_position(cli_broker: CliBroker) -> None:
    topic = _topic(cli_broker, partitions=2)
    group = new_topic_name("group")
    assert run_cli("produce", topic, *_bs(cli_broker), stdin=b"a\nb\nc\nd\n").returncode == 0
    first = run_cli("consume", topic, "--group", group, "--from-beginning", "--count", "4", *_bs(cli_broker))
    assert first.returncode == 0, first.stderr
    assert sorted(lines(first)) == ["a", "b", "c", "d"]
    assert run_cli("produce", topic, *_bs(cli_broker), stdin=b"e\n").returncode == 0
    second = run_cli("consume", topic, "--group", group, "--from-beginning", "--exit-at-end", *_bs(cli_broker))
    assert second.returncode == 0, second.stderr
    assert lines(second) == ["e"]


def test_missing_key_separator_keeps_earlier_records(cli_broker: CliBroker) -> None:
    topic = _topic(cli_broker)
    proc = run_cli("produce", topic, "--parse-key", *_bs(cli_broker), stdin=b"k\tv\nno separator here\nk\tw\n")
    assert_one_line_error(proc, "no key separator found on line 2", code=1)
    assert _consume(cli_broker, topic, "--from-beginning", "--format", "%k=%s\\n") == ["k=v"]


def test_errors_are_one_line(cli_broker: CliBroker) -> None:
    topic = _topic(cli_broker, partitions=2)
    missing = new_topic_name("missing")
    assert_one_line_error(run_cli("consume", missing, *_bs(cli_broker)), "unknown topic", missing, code=1)
    proc = run_cli("consume", topic, "--partition", "7", *_bs(cli_broker))
    assert_one_line_error(proc, "no partition 7", code=1)
    proc = run_cli("consume", topic, "--format", "%q", *_bs(cli_broker))
    assert_one_line_error(proc, "%q", code=2)  # a usage error
    proc = run_cli("consume", topic, "--offset", "soon", *_bs(cli_broker))
    assert_one_line_error(proc, "--offset", code=2)
    proc = run_cli("consume", topic, "--group", "g", "--partition", "0", *_bs(cli_broker))
    assert_one_line_error(proc, "--group", code=2)
    proc = run_cli("produce", topic, "--partition", "9", *_bs(cli_broker), stdin=b"x\n")
    assert_one_line_error(proc, "no partition 9", code=1)
    proc = run_cli("produce", topic, "--file", "/nonexistent/input.txt", *_bs(cli_broker))
    assert_one_line_error(proc, "cannot read", code=1)
    proc = run_cli("produce", topic, "--compression", "brotli", *_bs(cli_broker))
    assert_one_line_error(proc, "invalid choice", code=2)


def test_unreachable_broker_is_one_line_and_bounded() -> None:
    dead = "127.0.0.1:1"
    started = time.monotonic()
    for command, args in (
        ("topics", ["list"]),
        ("topics", ["create", "t"]),
        ("configs", ["describe", "--entity-type", "topics", "--entity-name", "t"]),
        ("produce", ["t"]),
        ("consume", ["t"]),
    ):
        proc = run_cli(command, *args, "--bootstrap-server", dead, "--timeout", "1", stdin=b"x\n")
        assert_one_line_error(proc, f"cannot reach broker at {dead}", code=1)
    assert time.monotonic() - started < 30


def test_producer_says_at_once_when_the_broker_goes_away() -> None:
    """The broker stops under a running ``rill produce``: a warning on stderr within seconds (it stayed
    silent until its records timed out), then the unacknowledged record fails the command."""
    import os
    import select
    import subprocess
    import sys

    from rill.testing import broker

    with broker(num_partitions=1) as b:
        topic = new_topic_name("gone")
        assert run_cli("topics", "create", topic, "--bootstrap-server", b.bootstrap_servers).returncode == 0
        proc = subprocess.Popen(
            [sys.executable, "-m", "rill.cli.produce", topic, "--bootstrap-server", b.bootstrap_servers,
             "--timeout", "1", "--linger-ms", "0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )  # fmt: skip
        try:
            assert proc.stdin is not None and proc.stderr is not None
            proc.stdin.write(b"before\n")
            proc.stdin.flush()
            deadline = time.monotonic() + 30
            bs = ["--bootstrap-server", b.bootstrap_servers]
            while lines(run_cli("consume", topic, "--from-beginning", "--exit-at-end", *bs)) != ["before"]:
                assert time.monotonic() < deadline, "the first record never arrived"
            b.stop()
            proc.stdin.write(b"after\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stderr], [], [], 15)
            assert ready, "no warning within 15 s of the broker stopping"
            warning = proc.stderr.readline().decode()
            assert warning.startswith("warning: lost the connection to the broker at "), warning
            proc.stdin.close()
            proc.wait(timeout=60)
            rest = proc.stderr.read().decode()
        finally:
            proc.kill()
    assert proc.returncode == 1, rest
    assert "1 of 2 record(s) failed" in rest, rest
    assert "Traceback" not in rest, rest
