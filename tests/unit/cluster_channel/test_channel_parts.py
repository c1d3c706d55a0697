"""The client's pieces that need no broker: backoff values, config checks, what the module imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rill.cluster.channel import NetworkClientConfig
from rill.cluster.network_client import ExponentialBackoff


def test_backoff_doubles_per_attempt_with_jitter_and_is_capped() -> None:
    backoff = ExponentialBackoff(50, 2, 1000, 0.2)
    for attempts, nominal in [(0, 50), (1, 100), (2, 200), (3, 400), (4, 800)]:
        samples = [backoff.backoff_ms(attempts) for _ in range(200)]
        assert nominal * 0.8 <= min(samples) and max(samples) <= nominal * 1.2
        assert max(samples) - min(samples) > nominal * 0.1  # jittered, not fixed
    for attempts in (5, 6, 30):
        assert all(800 <= backoff.backoff_ms(attempts) <= 1000 for _ in range(200))


def test_backoff_without_room_to_grow_is_the_initial_value() -> None:
    assert {ExponentialBackoff(500, 2, 100, 0.2).backoff_ms(n) for n in range(5)} == {500}
    assert {ExponentialBackoff(100, 2, 400, 0.0).backoff_ms(n) for n in range(5)} == {100, 200, 400}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("reconnect_backoff_ms", -1),
        ("request_timeout_ms", 0),
        ("max_in_flight_requests_per_connection", 0),
        ("socket_connection_setup_timeout_ms", 0),
    ],
)
def test_config_refuses_values_out_of_range_by_kafka_name(name: str, value: int) -> None:
    with pytest.raises(ValueError, match=name.replace("_", ".")):
        NetworkClientConfig(**{name: value})


def test_the_client_imports_neither_handlers_nor_the_broker() -> None:
    code = (
        "import sys, rill.cluster.channel, rill.cluster.network_client\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[:2] in (['rill', 'api'], ['rill', 'broker']))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
