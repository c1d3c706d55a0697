"""The broker for the CLI tests: Rill when this build has ``rill.testing``, otherwise Tansu.

``RILL_CLI_TEST_BROKER=tansu`` forces Tansu. Every broker listens on 127.0.0.1 and is stopped by the fixture.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from cli_helpers import CliBroker, free_port, rill_available, tansu_binary, wait_listening


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliBroker]:
    if rill_available():
        from rill.testing import broker

        with broker({}) as running:
            yield CliBroker(running.bootstrap_servers, "rill")
        return
    binary = tansu_binary()
    if binary is None:
        pytest.skip("neither rill.testing nor the Tansu binary is available")
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_listening(port, proc)
        yield CliBroker(f"127.0.0.1:{port}", "tansu")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
