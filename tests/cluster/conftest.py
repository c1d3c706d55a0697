"""A 3-broker cluster (ZooKeeper and three ``rill broker`` processes) shared by the tests of a module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rill.testing.cluster import TestCluster, cluster

MIN_ISR = 2


@pytest.fixture(scope="module")
def rill3() -> Iterator[TestCluster]:
    """Three brokers; topics default to replication factor 3 and min.insync.replicas=2."""
    with cluster(brokers=3, min_insync_replicas=MIN_ISR, num_partitions=3) as c:
        yield c
