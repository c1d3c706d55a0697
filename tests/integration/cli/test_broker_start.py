"""``rill broker`` as a process: what it says about unknown configs, and a start that fails says why in one
line, exits non-zero and leaves no data directory it made behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

TIMEOUT_S = 60.0


def rill_broker(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rill", "broker", "--log-level", "WARNING", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def start_failure(proc: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of a failed start."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("rill broker: cannot start: "), lines[0]
    return lines[0]


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_unknown_config_names_the_nearest_and_is_not_listed_as_set(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rill", "broker", "--stop-on-stdin-eof", "--override", "num.partiton=3",
         "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'data'}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()  # the broker still starts: Kafka starts with names it does not know
        assert ready.startswith("rill broker ready on 127.0.0.1:"), ready
        _, err = proc.communicate(timeout=TIMEOUT_S)  # closes stdin: the broker stops
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, err
    assert "Ignoring unknown config num.partiton (did you mean num.partitions?)" in err, err
    set_lines = [line for line in err.splitlines() if "Configs set:" in line]
    assert len(set_lines) == 1 and "listeners=" in set_lines[0], err
    assert "num.partiton" not in set_lines[0], set_lines[0]


def test_unknown_config_far_from_any_known_one_gets_no_guess(tmp_path: Path) -> None:
    from rill.config import closest_broker_config

    assert closest_broker_config("num.partiton") == "num.partitions"
    assert closest_broker_config("log.retention.hour") == "log.retention.hours"
    assert closest_broker_config("my.plugin.setting") is None


def test_a_failed_start_removes_the_default_data_dir_it_created(tmp_path: Path, taken_port: int) -> None:
    line = start_failure(rill_broker("--override", f"listeners=PLAINTEXT://127.0.0.1:{taken_port}", cwd=tmp_path))
    assert "address already in use" in line
    assert not (tmp_path / "rill-data").exists()
    assert list(tmp_path.iterdir()) == []


def test_a_failed_start_removes_only_what_it_created(tmp_path: Path, taken_port: int) -> None:
    existing = tmp_path / "rill-data"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    nested = tmp_path / "new" / "deeper" / "data"
    listeners = f"listeners=PLAINTEXT://127.0.0.1:{taken_port}"
    start_failure(rill_broker("--override", listeners, cwd=tmp_path))
    assert (existing / "keep.txt").read_text() == "mine"
    start_failure(rill_broker("--override", listeners, "--override", f"log.dirs={existing},{nested}", cwd=tmp_path))
    assert (existing / "keep.txt").read_text() == "mine"
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"version=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qg\nnode.id=x1\n", "node.id='x1'"),
        (b"version=7\ncluster.id=MkU3OEVBNTcwNTJENDM2Qg\nnode.id=0\n", "version='7'"),
        (bytes(range(128, 256)), "not a text file"),
    ],
    ids=["node-id", "version", "binary"],
)
def test_a_corrupt_meta_properties_is_named(tmp_path: Path, content: bytes, problem: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.properties").write_bytes(content)
    line = start_failure(
        rill_broker("--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={data}", cwd=tmp_path)
    )
    assert f"{data / 'meta.properties'} is corrupt: {problem}" in line, line
    assert (data / "meta.properties").read_bytes() == content  # left as found, for its owner to look at


def test_an_unresolvable_listener_host_is_named(tmp_path: Path) -> None:
    started = time.monotonic()
    line = start_failure(rill_broker("--override", "listeners=PLAINTEXT://no-such-host.invalid:9092", cwd=tmp_path))
    assert "cannot resolve the listener host 'no-such-host.invalid'" in line, line
    assert list(tmp_path.iterdir()) == [], os.listdir(tmp_path)
    assert time.monotonic() - started < TIMEOUT_S


def test_a_corrupt_metadata_snapshot_stops_the_start_naming_the_file(tmp_path: Path) -> None:
    from rill.metadata.journal import SNAPSHOT_FILE

    data = tmp_path / "data"
    data.mkdir()
    (data / SNAPSHOT_FILE).write_text("{not json")
    line = start_failure(
        rill_broker("--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={data}", cwd=tmp_path)
    )
    assert line.startswith(f"rill broker: cannot start: {data / SNAPSHOT_FILE} is corrupt: "), line


def test_a_data_dir_another_broker_took_meanwhile_is_not_removed(tmp_path: Path) -> None:
    """Two brokers started at once on a new directory: the one that made it and then failed does not
    remove it from under the one that runs on it."""
    import rill.testing
    from rill.cli.broker import claim_missing_data_dirs, remove_claimed_data_dirs
    from rill.config import BrokerConfig

    data = tmp_path / "new" / "data"
    config = BrokerConfig.from_properties({"log.dirs": str(data), "listeners": "PLAINTEXT://127.0.0.1:0"})
    claimed = claim_missing_data_dirs(config)
    assert claimed == [tmp_path / "new"] and data.is_dir()
    assert claim_missing_data_dirs(config) == []  # made already: not claimed twice
    with rill.testing.broker({"log.dirs": str(data)}, subprocess=True) as running:
        remove_claimed_data_dirs(claimed, config)
        assert data.is_dir() and running.bootstrap_servers
    remove_claimed_data_dirs(claimed, config)
    assert not (tmp_path / "new").exists()
