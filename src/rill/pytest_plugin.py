"""pytest plugin (registered through the ``pytest11`` entry point): ``rill_broker`` and ``zookeeper`` fixtures.

    def test_my_app(rill_broker):
        producer = confluent_kafka.Producer({"bootstrap.servers": rill_broker.bootstrap_servers})

Each test that asks for ``rill_broker`` gets its own broker on a free 127.0.0.1 port with a
temporary data directory, stopped when the test ends. The ``rill_broker_config`` marker takes what
``rill.testing.broker`` takes: a dict of configs, keyword configs (``num_partitions=3`` stands for
``num.partitions``) and the options ``subprocess``, ``startup_timeout`` and ``data_dir``. Markers on
the module, the class and the test add up, the closest winning. A name that is not a broker config
fails the test's setup. When a test fails, the end of a subprocess broker's log is added to its report.

``zookeeper`` is a standalone ZooKeeper server for the test (``rill.testing.zookeeper``); clients
connect to ``zookeeper.connect_string``.

``rill_cluster`` is a cluster for the test (``rill.testing.cluster.TestCluster``): a ZooKeeper server and three
``rill broker`` processes. The ``rill_cluster_config`` marker takes ``brokers=N`` and broker configs given to every
broker (``min_insync_replicas=2`` stands for ``min.insync.replicas``), the closest marker winning.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from rill.testing import TestBroker
    from rill.testing.cluster import TestCluster
    from rill.testing.zookeeper import ZooKeeperEnsemble

MARKER = "rill_broker_config"
CLUSTER_MARKER = "rill_cluster_config"
LOG_LINES = 300
_BROKER = pytest.StashKey["TestBroker"]()
_CLUSTER = pytest.StashKey["TestCluster"]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}([dict], **configs): broker configs for the rill_broker fixture (keywords: _ for .), and the "
        "options subprocess, startup_timeout, data_dir",
    )
    config.addinivalue_line(
        "markers",
        f"{CLUSTER_MARKER}(brokers=3, **configs): the rill_cluster fixture's size and broker configs (_ for .)",
    )


def marker_arguments(item: pytest.Item) -> tuple[dict[str, str], dict[str, Any]]:
    """The configs and options of ``item``'s ``rill_broker_config`` markers, the closest winning."""
    from rill.testing import OPTIONS, broker_configs

    configs: dict[str, str] = {}
    options: dict[str, Any] = {}
    for marker in reversed(list(item.iter_markers(MARKER))):
        if len(marker.args) > 1 or (marker.args and not isinstance(marker.args[0], Mapping)):
            raise TypeError(f"{MARKER} takes one dict of configs and keyword configs, not {marker.args!r}")
        kwargs = dict(marker.kwargs)
        for name in OPTIONS:
            if name in kwargs:
                options[name] = kwargs.pop(name)
        configs.update(broker_configs(marker.args[0] if marker.args else None, **kwargs))
    return configs, options


@pytest.fixture
def rill_broker(request: pytest.FixtureRequest) -> Iterator[TestBroker]:
    """A running Rill broker for this test; ``.bootstrap_servers`` is what clients connect to."""
    from rill.testing import broker

    configs, options = marker_arguments(request.node)
    with broker(configs, **options) as running:
        request.node.stash[_BROKER] = running
        try:
            yield running
        finally:
            del request.node.stash[_BROKER]


@pytest.fixture
def zookeeper() -> Iterator[ZooKeeperEnsemble]:
    """A running standalone ZooKeeper server for this test, removed with its data afterwards."""
    from rill.testing.zookeeper import ZooKeeperEnsemble

    with ZooKeeperEnsemble(1) as running:
        yield running


@pytest.fixture
def rill_cluster(request: pytest.FixtureRequest) -> Iterator[TestCluster]:
    """A running cluster for this test (ZooKeeper and, by default, three brokers); ``.bootstrap_servers`` names
    every broker. Stopped, and its data removed, when the test ends."""
    from rill.testing.cluster import cluster

    configs: dict[str, Any] = {}
    for marker in reversed(list(request.node.iter_markers(CLUSTER_MARKER))):
        if marker.args:
            raise TypeError(f"{CLUSTER_MARKER} takes keyword arguments only, not {marker.args!r}")
        configs.update(marker.kwargs)
    brokers = int(configs.pop("brokers", 3))
    with cluster(brokers, **configs) as running:
        request.node.stash[_CLUSTER] = running
        try:
            yield running
        finally:
            del request.node.stash[_CLUSTER]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    # Before the report is made, while the broker (and its data directory) is still there.
    running = item.stash.get(_BROKER, None)
    if running is not None and call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception):
        tail = running.log_tail(LOG_LINES)
        if tail:
            item.add_report_section(call.when, "rill broker log", tail)
    members = item.stash.get(_CLUSTER, None)
    if members is not None and call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception):
        for broker_id in members.brokers:
            tail = members.broker(broker_id).log_tail(LOG_LINES // 3)
            if tail:
                item.add_report_section(call.when, f"rill broker {broker_id} log", tail)
    yield
