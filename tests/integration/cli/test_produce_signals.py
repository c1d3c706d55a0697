"""``rill produce`` stopped by SIGINT or SIGTERM while its input is still open: the records it has read are
delivered before it exits (they sit in the producer's queue, here for a long linger), it prints how many,
and it exits with 128 + the signal's number."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from cli_helpers import CliBroker, new_topic_name, run_cli

pytestmark = pytest.mark.timeout(120)

RECORDS = 500


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signalled_producer_delivers_what_it_read(cli_broker: CliBroker, sig: signal.Signals) -> None:
    bs = ["--bootstrap-server", cli_broker.bootstrap]
    topic = new_topic_name("psig")
    assert run_cli("topics", "create", topic, "--partitions", "1", *bs).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "rill.cli.produce", topic, "--linger-ms", "30000", "--timeout", "10", *bs],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )  # fmt: skip
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"".join(b"v%d\n" % n for n in range(RECORDS)))
        proc.stdin.flush()  # the pipe stays open: the command is waiting for more input when the signal comes
        time.sleep(2.0)  # time to start and read the lines; the long linger keeps them queued
        sent = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    assert err.decode().strip().endswith(f"Interrupted: {RECORDS} records sent to {topic}"), err
    assert took < 10.0, f"exited {took:.2f} s after the signal"
    got = run_cli("consume", topic, "--from-beginning", "--max-messages", str(RECORDS), "--timeout", "20", *bs)
    assert got.stdout.decode().split() == [f"v{n}" for n in range(RECORDS)], got.stderr


def test_a_signal_while_the_producer_starts_ends_it_cleanly() -> None:
    """A SIGTERM that comes while the command is still starting (here: waiting for a broker that accepts
    connections and never answers) ends it as one coming later does: nothing was handed to the producer yet,
    so it says that none was sent and exits with 128 + 15, instead of dying by the signal."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-m", "rill", "produce", "never", "--timeout", "5",
             "--bootstrap-server", f"127.0.0.1:{port}"],
            stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )  # fmt: skip
        accepted = []
        try:
            assert proc.stdin is not None
            proc.stdin.write(b"a\nb\n")
            proc.stdin.flush()
            silent.settimeout(30)
            while len(accepted) < 2:  # the reachability check, then librdkafka's connection for the metadata
                accepted.append(silent.accept()[0])
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
            proc.wait()
            for conn in accepted:
                conn.close()
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, err)
    assert err.decode().strip().endswith("Interrupted: 0 records sent to never"), err
