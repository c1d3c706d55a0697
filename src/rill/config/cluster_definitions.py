"""The replicated cluster's broker configs (Kafka's names and defaults): ZooKeeper, controlled shutdown, replica
fetching and the ISR, leader election and balance, replication factor and rack. Defined into ``BROKER_CONFIGS``
beside the others."""

from __future__ import annotations

from rill.config.config_def import (
    HIGH,
    INT,
    LONG,
    MEDIUM,
    B,
    S,
    at_least,
    one_of,
)
from rill.config.definitions import BROKER_CONFIGS

# Kafka's ReplicaSelector implementations, the values replica.selector.class takes (rill.replica.read_replica).
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
REPLICA_SELECTOR_CLASSES = (LEADER_SELECTOR, RACK_AWARE_REPLICA_SELECTOR)

_nonneg = at_least(0)
_dyn = {"dynamic": True}

for _args, _opts in [
    (("zookeeper.connect", S, None, "ZooKeeper connection string for cluster metadata.", None, HIGH), {}),
    (("zookeeper.session.timeout.ms", INT, 18000, "ZooKeeper session timeout.", at_least(1), HIGH), {}),
    (
        (
            "leader.imbalance.per.broker.percentage",
            INT,
            10,
            "Share of a broker's preferred partitions led elsewhere that starts a preferred leader election.",
            _nonneg,
            HIGH,
        ),
        {},
    ),
    (
        (
            "leader.imbalance.check.interval.seconds",
            LONG,
            300,
            "How often the controller checks the leader imbalance.",
            at_least(1),
            HIGH,
        ),
        {},
    ),
    (("replica.fetch.wait.max.ms", INT, 500, "Longest a follower's fetch waits at the leader.", _nonneg, MEDIUM), {}),
    (("replica.fetch.backoff.ms", INT, 1000, "Wait after a failed follower fetch.", _nonneg, MEDIUM), {}),
    (
        (
            "zookeeper.connection.timeout.ms",
            INT,
            None,
            "How long a start waits to reach ZooKeeper (default: zookeeper.session.timeout.ms).",
            None,
            HIGH,
        ),
        {},
    ),
    (("broker.rack", S, None, "The rack of this broker (replica placement, fetch from follower).", None, MEDIUM), {}),
    (
        (
            "replica.selector.class",
            S,
            None,
            "Which replica a consumer reads from (KIP-392): unset or org.apache.kafka.common.replica.LeaderSelector, "
            "the leader; org.apache.kafka.common.replica.RackAwareReplicaSelector, an in-sync replica in the "
            "consumer's rack (client.rack) when the leader is not in it.",
            one_of("", *REPLICA_SELECTOR_CLASSES),
            MEDIUM,
        ),
        {},
    ),
    (("controlled.shutdown.enable", B, "true", "Move leadership off a stopping broker first.", None, MEDIUM), {}),
    (
        (
            "controlled.shutdown.max.retries",
            INT,
            3,
            "Tries of a controlled shutdown before the broker stops anyway.",
            None,
            MEDIUM,
        ),
        {},
    ),
    (
        (
            "controlled.shutdown.retry.backoff.ms",
            LONG,
            5000,
            "Wait between tries of a controlled shutdown.",
            None,
            MEDIUM,
        ),
        {},
    ),
    (
        (
            "default.replication.factor",
            INT,
            1,
            "Replication factor of an auto-created topic.",
            at_least(1),
            MEDIUM,
        ),
        {},
    ),
    (
        (
            "auto.leader.rebalance.enable",
            B,
            "true",
            "Move leadership back to preferred replicas.",
            None,
            HIGH,
        ),
        {},
    ),
    (
        ("replica.fetch.max.bytes", INT, 1048576, "Bytes per partition a follower fetches.", _nonneg, MEDIUM),
        {},
    ),
    (("replica.lag.time.max.ms", LONG, 30000, "A follower this far behind leaves the ISR.", None, HIGH), {}),
    (("unclean.leader.election.enable", B, "false", "Allow out-of-sync leaders.", None, HIGH), _dyn),
    (
        (
            "replica.alter.log.dirs.io.max.bytes.per.second",
            LONG,
            9223372036854775807,
            "Bytes per second the moves of replicas between this broker's log dirs copy, at most.",
            at_least(1),
            MEDIUM,
        ),
        _dyn,
    ),
]:
    _n, _k, _d, _doc, _v, _imp = _args
    BROKER_CONFIGS.define(_n, _k, _d, _doc, _v, _imp, **_opts)
