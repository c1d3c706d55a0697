"""Thread-mode brokers give back everything they take: files and locks after a kill or a failed
start, the listening sockets in processes forked from the test process, the soft limit on open
files; a kill is quiet in the logs, and a start that times out says so."""

from __future__ import annotations

import logging
import multiprocessing
import os
import resource
import socket
import time
from pathlib import Path

import pytest
from harness_helpers import consume_all, produce, refused

import rill.testing
from rill.testing import BrokerStartError

pytestmark = pytest.mark.timeout(120)


def open_files_under(path: Path) -> list[str]:
    """This process's descriptors on files under ``path`` (deleted ones included)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)):
            found.append(target)
    return found


def test_kill_closes_every_file_and_the_restart_recovers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="rill")
    with rill.testing.broker(data_dir=tmp_path, num_partitions=1) as b:
        for topic in ("a", "b", "c"):
            produce(b.bootstrap_servers, topic, [b"1", b"2"])
        assert open_files_under(tmp_path)  # segments and indexes are open
        client = socket.create_connection((b.host, b.port))  # a connection the kill drops
        time.sleep(0.1)
        caplog.clear()
        b.kill()
        client.close()
        assert open_files_under(tmp_path) == []  # each kill used to leave 3 per partition open
        assert not (tmp_path / "logs" / ".kafka_cleanshutdown").exists()
        # a kill is abrupt by request: nothing about it is worth a warning
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
        b.start()
        assert any("unclean shutdown" in r.getMessage() for r in caplog.records)
        assert consume_all(b.bootstrap_servers, "a", 2) == [b"1", b"2"]


@pytest.mark.parametrize("which", ["listener", "metrics"])
def test_failed_start_releases_the_data_dir(tmp_path: Path, busy_port: int, which: str) -> None:
    taken = {"listeners": f"PLAINTEXT://127.0.0.1:{busy_port}"} if which == "listener" else {"metrics.port": busy_port}
    for _ in range(2):
        with pytest.raises(BrokerStartError, match="in use"), rill.testing.broker(taken, data_dir=tmp_path):
            pass
        assert open_files_under(tmp_path) == []
    with rill.testing.broker(data_dir=tmp_path) as b:  # used to fail: the log dir's lock was still held
        produce(b.bootstrap_servers, "t", [b"x"])


def test_start_timeout_says_what_timed_out(tmp_path: Path) -> None:
    with pytest.raises(BrokerStartError) as failed, rill.testing.broker(data_dir=tmp_path, startup_timeout=0.001):
        pass
    message = str(failed.value)
    assert "within 0.001s" in message and "startup_timeout" in message and "it was still" in message, message
    assert open_files_under(tmp_path) == []
    with rill.testing.broker(data_dir=tmp_path) as b:  # nothing of the timed-out start is left
        produce(b.bootstrap_servers, "t", [b"x"])


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def test_forked_process_keeps_no_socket_or_lock_of_the_broker() -> None:
    fork = multiprocessing.get_context("fork")
    with rill.testing.broker(num_partitions=1) as b:
        port = b.port
        client = socket.create_connection(("127.0.0.1", port))
        time.sleep(0.1)
        worker = fork.Process(target=_sleep, args=(30,))
        worker.start()
        try:
            b.restart()  # used to fail: the worker's copy of the lock file kept the log dir locked
            produce(b.bootstrap_servers, "t", [b"x"])
            b.stop()
            assert refused(port)  # used to hang: the worker's copy of the listening socket accepted
            client.settimeout(5)
            assert client.recv(1) == b""  # the connection the worker also had a copy of is closed
        finally:
            client.close()
            worker.terminate()
            worker.join(10)


def test_open_files_limit_is_put_back() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = 1024
    if hard != resource.RLIM_INFINITY and hard <= low:
        pytest.fail(f"this test needs a hard limit on open files above {low}, not {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:
        with rill.testing.broker() as b:
            assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] > low  # raised while brokers run
            with rill.testing.broker():
                pass
            assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] > low  # the first one still runs
            b.restart(kill=True)
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == low
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
