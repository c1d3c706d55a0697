"""The coordinators' broker configs (Kafka's names and defaults): the group coordinator and `__consumer_offsets`
(``group.*``, ``offsets.*``), the transaction coordinator and `__transaction_state` (``transaction.*``,
``transactional.id.expiration.ms``), producer ids. Defined into ``BROKER_CONFIGS`` beside the others."""

from __future__ import annotations

from rill.config.config_def import (
    HIGH,
    INT,
    INT_MAX,
    LONG,
    LOW,
    LST,
    MEDIUM,
    SHORT,
    B,
    S,
    at_least,
    one_of,
)
from rill.config.definitions import BROKER_CONFIGS

_nonneg = at_least(0)
_dyn = {"dynamic": True}

for _args, _opts in [
    (("offsets.topic.num.partitions", INT, 50, "Partitions of __consumer_offsets.", at_least(1), HIGH), {}),
    (
        (
            "offsets.topic.replication.factor",
            SHORT,
            1,
            "Replication factor of __consumer_offsets.",
            at_least(1),
            HIGH,
        ),
        {},
    ),
    (
        (
            "offsets.topic.segment.bytes",
            INT,
            104857600,
            "Segment size of __consumer_offsets.",
            at_least(1),
            HIGH,
        ),
        {},
    ),
    (
        (
            "offsets.retention.minutes",
            INT,
            10080,
            "Committed offsets of empty groups expire after this.",
            at_least(1),
            HIGH,
        ),
        {},
    ),
    (
        (
            "offsets.retention.check.interval.ms",
            LONG,
            600000,
            "How often stale offsets are removed.",
            at_least(1),
            HIGH,
        ),
        {},
    ),
    (
        (
            "offsets.commit.timeout.ms",
            INT,
            5000,
            "Wait for an offset commit to be replicated.",
            at_least(1),
            HIGH,
        ),
        {},
    ),
    (("offset.metadata.max.bytes", INT, 4096, "Largest commit metadata string.", None, HIGH), {}),
    (
        (
            "group.initial.rebalance.delay.ms",
            INT,
            3000,
            "Wait for more members before the first rebalance.",
            None,
            MEDIUM,
        ),
        {},
    ),
    (
        (
            "group.min.session.timeout.ms",
            INT,
            6000,
            "Smallest session timeout a member may ask for.",
            None,
            MEDIUM,
        ),
        {},
    ),
    (
        (
            "group.max.session.timeout.ms",
            INT,
            1800000,
            "Largest session timeout a member may ask for.",
            None,
            MEDIUM,
        ),
        {},
    ),
    (("group.max.size", INT, INT_MAX, "Most members in one group.", at_least(1), MEDIUM), {}),
    # The consumer group protocol of KIP-848 (docs/OPERATIONS.md "Consumer groups").
    (("group.consumer.assignors", LST, "uniform,range", "Server-side assignors of consumer groups; the first is "
      "the default.", None, MEDIUM), {}),
    (("group.consumer.heartbeat.interval.ms", INT, 5000, "Heartbeat interval of consumer group members.",
      at_least(1), MEDIUM), {}),
    (("group.consumer.min.heartbeat.interval.ms", INT, 5000, "Smallest heartbeat interval of a consumer group.",
      at_least(1), MEDIUM), {}),
    (("group.consumer.max.heartbeat.interval.ms", INT, 15000, "Largest heartbeat interval of a consumer group.",
      at_least(1), MEDIUM), {}),
    (("group.consumer.session.timeout.ms", INT, 45000, "Session timeout of consumer group members.",
      at_least(1), MEDIUM), {}),
    (("group.consumer.min.session.timeout.ms", INT, 45000, "Smallest session timeout of a consumer group.",
      at_least(1), MEDIUM), {}),
    (("group.consumer.max.session.timeout.ms", INT, 60000, "Largest session timeout of a consumer group.",
      at_least(1), MEDIUM), {}),
    (("group.consumer.max.size", INT, INT_MAX, "Most members in one consumer group.", at_least(1), MEDIUM), {}),
    (("group.consumer.migration.policy", S, "bidirectional",
      "Whether a live group moves between the classic and the consumer protocol: bidirectional, upgrade (classic "
      "to consumer only), downgrade (consumer to classic only) or disabled.",
      one_of("DISABLED", "DOWNGRADE", "UPGRADE", "BIDIRECTIONAL", ignore_case=True), MEDIUM), {}),
    (
        (
            "transaction.state.log.num.partitions",
            INT,
            50,
            "Partitions of __transaction_state.",
            at_least(1),
            HIGH,
        ),
        {},
    ),
    (
        (
            "transaction.state.log.replication.factor",
            SHORT,
            1,
            "Replication factor of __transaction_state.",
            at_least(1),
            HIGH,
        ),
        {},
    ),
    (
        (
            "transaction.state.log.min.isr",
            INT,
            1,
            "min.insync.replicas of __transaction_state.",
            at_least(1),
            HIGH,
        ),
        {},
    ),
    (
        (
            "transaction.state.log.segment.bytes",
            INT,
            104857600,
            "Segment size of __transaction_state.",
            at_least(1),
            HIGH,
        ),
        {},
    ),
    (
        (
            "transactional.id.expiration.ms",
            INT,
            604800000,
            "Idle transactional ids expire after this.",
            at_least(1),
            HIGH,
        ),
        {},
    ),
    (("transaction.max.timeout.ms", INT, 900000, "Largest transaction timeout.", at_least(1), HIGH), {}),
    (
        (
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            INT,
            10000,
            "How often transactions past their timeout are aborted.",
            at_least(1),
            LOW,
        ),
        {},
    ),
    (
        (
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            INT,
            3600000,
            "How often expired transactional ids are removed.",
            at_least(1),
            LOW,
        ),
        {},
    ),
    (
        (
            "transaction.partition.verification.enable",
            B,
            "true",
            "Check with the coordinator that a partition is in the transaction before a transactional write.",
            None,
            LOW,
        ),
        _dyn,
    ),
    (
        (
            "producer.id.expiration.ms",
            INT,
            86400000,
            "Idle producer ids expire after this.",
            at_least(1),
            LOW,
        ),
        _dyn,
    ),
    (
        (
            "producer.id.expiration.check.interval.ms",
            INT,
            600000,
            "How often producer ids idle for producer.id.expiration.ms are removed.",
            at_least(1),
            LOW,
        ),
        {},
    ),
]:
    _n, _k, _d, _doc, _v, _imp = _args
    BROKER_CONFIGS.define(_n, _k, _d, _doc, _v, _imp, **_opts)
