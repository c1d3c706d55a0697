"""pytest plugin (registered through the ``pytest11`` entry point): a ``rill_broker`` fixture.

    def test_my_app(rill_broker):
        producer = confluent_kafka.Producer({"bootstrap.servers": rill_broker.bootstrap_servers})

Each test that asks for ``rill_broker`` gets its own broker on a free 127.0.0.1 port with a
temporary data directory, stopped when the test ends. Broker configs can be set per test with
``@pytest.mark.rill_broker_config(**{"num.partitions": "3"})``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from rill.testing import TestBroker


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "rill_broker_config(**configs): broker configs for the rill_broker fixture"
    )


@pytest.fixture
def rill_broker(request: pytest.FixtureRequest) -> Iterator[TestBroker]:
    """A running Rill broker for this test; ``.bootstrap_servers`` is what clients connect to."""
    from rill.testing import broker

    overrides: dict[str, str] = {}
    marker = request.node.get_closest_marker("rill_broker_config")
    if marker is not None:
        overrides = {str(k): str(v) for k, v in marker.kwargs.items()}
    with broker(overrides) as running:
        yield running
