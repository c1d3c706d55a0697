"""Subprocess-mode brokers never outlive the test process, and a start that fails says how it failed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness_helpers import refused

import rill.testing
from rill.testing import BrokerStartError

pytestmark = pytest.mark.timeout(120)

# A test process: starts a subprocess broker (from a thread that ends, as in a larger application,
# when asked), prints the broker's pid, port and data directory, and waits to be killed.
TEST_PROCESS = r"""
import os, sys, threading, time
import rill.testing

def broker_pids():
    pids = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                pids += f.read().split()
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return [p for p in pids if b"rill\0broker" in open(f"/proc/{p}/cmdline", "rb").read()]

brokers = []

def start():
    b = rill.testing.TestBroker({}, subprocess=True)
    b.start()
    brokers.append(b)
    (pid,) = broker_pids()
    print(pid, b.port, b.data_dir, flush=True)

if sys.argv[1] == "thread":
    t = threading.Thread(target=start)
    t.start()
    t.join()
else:
    start()
time.sleep(120)
"""

# The same under pytest-timeout's thread method, which ends the process with os._exit.
TIMED_OUT_TEST = r"""
import os, time
import rill.testing

def test_hangs():
    with rill.testing.broker(subprocess=True) as b:
        pids = []
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/children") as f:
                    pids += f.read().split()
            except FileNotFoundError:  # a thread that ended meanwhile
                pass
        (pid,) = [p for p in pids if b"rill\0broker" in open(f"/proc/{p}/cmdline", "rb").read()]
        print("BROKER", pid, b.port, b.data_dir, flush=True)
        time.sleep(60)
"""


def exited(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" in f.read()  # a zombie has exited; its new parent may not reap it
    except FileNotFoundError:
        return True


def assert_broker_gone(pid: int, port: int, data_dir: Path) -> None:
    deadline = time.monotonic() + 20
    try:
        while not exited(pid):
            assert time.monotonic() < deadline, "the broker outlived the test process"
            time.sleep(0.05)
    finally:
        if not exited(pid):
            os.kill(pid, signal.SIGKILL)  # the broker this test started, left behind
    assert refused(port)
    assert not data_dir.exists()


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@pytest.mark.parametrize(
    ("started_from", "sig"),
    [("main", signal.SIGKILL), ("main", signal.SIGTERM), ("thread", signal.SIGKILL)],
    ids=["sigkill", "sigterm", "started-from-an-ended-thread"],
)
def test_broker_stops_when_the_test_process_dies(
    processes: list[subprocess.Popen[str]], started_from: str, sig: signal.Signals
) -> None:
    proc = subprocess.Popen([sys.executable, "-c", TEST_PROCESS, started_from], stdout=subprocess.PIPE, text=True)
    processes.append(proc)
    assert proc.stdout is not None
    pid, port, data_dir = proc.stdout.readline().split()
    time.sleep(0.5)
    # The thread that started it has ended, the process has not: the broker serves on.
    assert not exited(int(pid)) and not refused(int(port))
    os.kill(proc.pid, sig)
    proc.wait(10)
    assert_broker_gone(int(pid), int(port), Path(data_dir))


def test_broker_stops_when_pytest_timeout_ends_the_process(tmp_path: Path) -> None:
    test_file = tmp_path / "test_hangs.py"
    test_file.write_text(TIMED_OUT_TEST)
    pytest_args = ["-s", "-p", "no:cacheprovider", "--timeout=3", "--timeout-method=thread", str(test_file)]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *pytest_args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = re.search(r"BROKER (\d+) (\d+) (\S+)", run.stdout)
    assert found is not None, run.stdout + run.stderr
    assert "Timeout" in run.stdout
    pid, port, data_dir = found.groups()
    assert_broker_gone(int(pid), int(port), Path(data_dir))


def test_start_failure_says_the_broker_exited(busy_port: int) -> None:
    started = time.monotonic()
    with (
        pytest.raises(BrokerStartError) as failed,
        rill.testing.broker(subprocess=True, listeners=f"PLAINTEXT://127.0.0.1:{busy_port}"),
    ):
        pass
    assert time.monotonic() - started < 15  # not the 30 s startup_timeout
    message = str(failed.value)
    assert "exited with code 1" in message and "did not announce" not in message, message
    assert "cannot start" in message and "address already in use" in message  # the log's tail


def test_start_failure_names_the_log_dir(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    log_dir = not_a_dir / "logs"
    for subprocess_mode in (False, True):
        with (
            pytest.raises(BrokerStartError) as failed,
            rill.testing.broker(subprocess=subprocess_mode, log_dirs=log_dir),
        ):
            pass
        assert str(not_a_dir) in str(failed.value).splitlines()[-1], (subprocess_mode, str(failed.value))
