"""A broker that cannot join its cluster says why in one line and exits non-zero: ZooKeeper unreachable at
start, or its broker.id held by another live broker."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rill.testing.cluster import cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _rill_broker(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "rill", "broker", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
            "--override", f"log.dirs={tmp_path / 'data'}"]  # fmt: skip
    for o in overrides:
        args += ["--override", o]
    return subprocess.run(args, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_an_unreachable_zookeeper_is_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    start = time.monotonic()
    proc = _rill_broker(tmp_path, f"zookeeper.connect=127.0.0.1:{port}/rill", "zookeeper.connection.timeout.ms=2000")
    assert proc.returncode != 0
    assert time.monotonic() - start < 30
    last = proc.stderr.strip().splitlines()[-1]
    assert f"cannot reach ZooKeeper at 127.0.0.1:{port}/rill within 2 s" in last, proc.stderr


def test_a_broker_id_held_by_a_live_broker_is_refused(tmp_path: Path) -> None:
    with cluster(1) as c:
        connect = c.zookeeper.connect_string + c.chroot
        proc = _rill_broker(tmp_path, f"zookeeper.connect={connect}", "node.id=0")
        assert proc.returncode != 0
        last = proc.stderr.strip().splitlines()[-1]
        assert "broker.id 0 is already registered" in last and "by a live broker" in last, proc.stderr
