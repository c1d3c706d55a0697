"""rill.testing, the rill_broker fixture, and the rill command, with real clients and processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from harness_helpers import consume_all, produce

import rill.testing
from rill.cli.main import main as rill_main

pytestmark = pytest.mark.timeout(120)


def test_thread_broker_round_trip_and_restart() -> None:
    with rill.testing.broker(num_partitions=1) as b:
        assert b.bootstrap_servers.startswith("127.0.0.1:") and b.port > 0
        values = [b"v%d" % i for i in range(50)]
        produce(b.bootstrap_servers, "t", values)
        port = b.port
        b.restart()
        assert b.port == port
        assert consume_all(b.bootstrap_servers, "t", 50) == values
        data_dir = b.data_dir
    assert not data_dir.exists()


def test_fixture(rill_broker: rill.testing.TestBroker) -> None:
    produce(rill_broker.bootstrap_servers, "fixture-topic", [b"x"])
    assert consume_all(rill_broker.bootstrap_servers, "fixture-topic", 1) == [b"x"]


@pytest.mark.slow
def test_subprocess_broker_kill_and_restart() -> None:
    with rill.testing.broker(subprocess=True) as b:
        produce(b.bootstrap_servers, "t", [b"a", b"b"])
        b.restart(kill=True)  # SIGKILL, then recovery from an unclean shutdown
        produce(b.bootstrap_servers, "t", [b"c"])
        assert consume_all(b.bootstrap_servers, "t", 3) == [b"a", b"b", b"c"]
        b.stop()
        assert not b.running
        log = (b.data_dir / "broker.log").read_text()
    assert "rill broker ready" not in log  # the ready line goes to stdout, the log to stderr
    assert log.count("Broker stopped cleanly") == 1  # the killed one never said so
    assert "Traceback" not in log


def test_rill_broker_command_sigterm(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("# test\nnum.partitions=2\nlog.dirs=%s\n" % (tmp_path / "data"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rill",
            "broker",
            "--config",
            str(props),
            "--override",
            "listeners=PLAINTEXT://127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("rill broker ready on 127.0.0.1:"), line
        bootstrap = line.rsplit(" ", 1)[1].strip()
        produce(bootstrap, "cmd", [b"1"])
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "num.partitions=2" in err  # effective non-default configs are logged
    assert "Traceback" not in err
    assert (tmp_path / "data" / "cmd-0").is_dir()


def test_rill_broker_bad_config_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert rill_main(["broker", "--override", "num.partitions=zero"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "num.partitions" in err[0]
    assert rill_main(["broker", "--override", "novalue"]) == 2
    assert rill_main(["broker", "--config", "/nonexistent/server.properties"]) == 2


def test_rill_broker_port_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code = subprocess.run(
            [
                sys.executable,
                "-m",
                "rill",
                "broker",
                "--override",
                f"listeners=PLAINTEXT://127.0.0.1:{port}",
                "--override",
                f"log.dirs={Path(os.environ.get('TMPDIR', '/tmp')) / uuid.uuid4().hex}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert code.returncode == 1
    assert "cannot start" in code.stderr and "Traceback" not in code.stderr


def test_rill_front(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert rill_main([]) == 2
    assert rill_main(["no-such-command"]) == 2
    assert "unknown command" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "rill.cli.pipeline", None)  # as if the module were missing
    assert rill_main(["pipeline"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not available" in err[0]
    assert rill_main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("rill ")
