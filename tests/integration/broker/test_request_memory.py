"""Memory for request frames is taken as their bytes arrive, not at the size they declare: clients that
declare huge frames and send a few bytes cost the broker next to nothing, other clients are served
meanwhile, and the idle timeout closes them (as Kafka's connections.max.idle.ms does)."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from tests.integration.broker._wire import Wire

from rill.protocol import ApiKey
from rill.testing import TestBroker, broker

pytestmark = pytest.mark.timeout(120)

MIB = 1024 * 1024


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS line")


def _broker_pid(b: TestBroker) -> int:
    proc = b._runner._proc  # type: ignore[union-attr]
    assert proc is not None
    return int(proc.pid)


@pytest.mark.parametrize(
    "configs",
    [{}, {"queued.max.request.bytes": str(200 * MIB)}],
    ids=["unbounded", "bounded"],
)
def test_declared_frame_sizes_do_not_take_memory(configs: dict[str, str]) -> None:
    with broker({"connections.max.idle.ms": "4000", **configs}, subprocess=True) as b:
        pid = _broker_pid(b)
        other = Wire(b.bootstrap_servers)
        assert other.call(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        before = _rss_mib(pid)

        hogs = [Wire(b.bootstrap_servers) for _ in range(10)]
        for i, hog in enumerate(hogs):
            # A Produce frame header declaring 100 MiB, then a few bytes of it (every other one
            # sends nothing after the size).
            hog.send_raw(struct.pack(">i", 100 * MIB) + (b"\x00\x00\x00\x09" + b"x" * 100 if i % 2 else b""))
        opened = time.monotonic()

        # Other clients are served promptly the whole time.
        worst = 0.0
        while time.monotonic() - opened < 2.0:
            started = time.monotonic()
            assert other.call(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
            worst = max(worst, time.monotonic() - started)
            time.sleep(0.05)
        assert worst < 1.0, f"an ApiVersions call took {worst:.2f}s"
        grown = _rss_mib(pid) - before
        assert grown < 64, f"the broker's RSS grew by {grown:.0f} MiB for 10 frames of 100 MiB declared"

        # The idle timeout closes the connections that stopped sending (4 s, swept every 0.4 s).
        for hog in hogs:
            assert hog.is_closed_by_peer(timeout=10.0)
        assert time.monotonic() - opened >= 3.5
        # The client that keeps talking is still served.
        assert other.call(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        other.close()
        for hog in hogs:
            hog.close()
