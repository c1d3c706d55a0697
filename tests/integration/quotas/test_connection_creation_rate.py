"""``max.connection.creation.rate``: past the rate (measured over the client quota windows, so the first
``quota.window.num - 1`` seconds' worth pass at once), a new connection waits, unread, and the ones after it wait
behind it."""

from __future__ import annotations

import time

import pytest
from tests.integration.broker._wire import Wire

from rill.protocol import ApiKey

pytestmark = [pytest.mark.timing, pytest.mark.timeout(90)]


def _connect_and_ask(bootstrap: str) -> float:
    start = time.monotonic()
    w = Wire(bootstrap, timeout=30)
    assert w.call(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
    w.close()
    return time.monotonic() - start


@pytest.mark.rill_broker_config({"max.connection.creation.rate": "2"})
def test_connections_past_the_creation_rate_wait(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    waits = [_connect_and_ask(bootstrap) for _ in range(26)]
    assert max(waits[:10]) < 0.3  # 2 per second over the 10 s the first windows count: 20 at once
    throttled = [w for w in waits if w >= 0.3]
    assert len(throttled) >= 4, waits  # past 20, each waits about 0.5 s: 2 per second
    assert max(waits) < 10.0  # bounded: the rate comes back to 2/s as the windows move on
