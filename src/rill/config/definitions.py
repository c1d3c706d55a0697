"""Kafka's broker and topic configs: names, types, defaults, validators, dynamic flags, synonyms.

Names and defaults are Kafka's. Rill's embedded defaults differ in three places, so that
``rill broker`` with no arguments is a working single node: ``listeners`` is
``PLAINTEXT://127.0.0.1:9092``, ``log.dir`` is ``./rill-data``, and the internal topics'
replication factors (and ``transaction.state.log.min.isr``) are 1.
"""

from __future__ import annotations

from rill.config.config_def import (
    HIGH,
    INT,
    INT_MAX,
    LONG,
    LONG_MAX,
    LOW,
    LST,
    MEDIUM,
    B,
    ConfigDef,
    D,
    S,
    all_of,
    at_least,
    between,
    one_of,
)

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")
_nonneg = at_least(0)


def split_per_ip_overrides(text: str) -> dict[str, int]:
    """``host:count,host:count`` (``max.connections.per.ip.overrides``) to ``{host: count}``;
    ValueError names a bad entry."""
    out: dict[str, int] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"entry {entry!r} is not host:count")
        out[host] = int(count)
    return out


def _per_ip_overrides(value: str) -> str | None:
    try:
        split_per_ip_overrides(value)
    except ValueError as e:
        return str(e)
    return None


# ---------------------------------------------------------------------------------------------- topic configs
# Broker configs Rill takes (a server.properties written for Kafka starts) but whose feature is not built
# yet, or does not apply to its design; a broker warns at start about each one that is set (docs/OPERATIONS.md
# lists them).
NOT_YET_USED = frozenset({
    "log.local.retention.ms",
    "log.local.retention.bytes", "num.network.threads", "num.io.threads",
    "num.recovery.threads.per.data.dir", "log.preallocate",
})  # fmt: skip

TOPIC_CONFIGS = ConfigDef()
for _name, _kind, _default, _validator, _doc in [
    (
        "cleanup.policy",
        LST,
        "delete",
        all_of(*CLEANUP_POLICIES),
        "Delete old segments, compact by key, or both.",
    ),
    (
        "compression.type",
        S,
        "producer",
        one_of(*COMPRESSION_TYPES),
        "Codec for stored batches; producer keeps theirs.",
    ),
    (
        "compression.gzip.level",
        INT,
        -1,
        lambda v: None if v == -1 or 1 <= v <= 9 else "must be -1 or 1..9",
        "Gzip level used when recompressing.",
    ),
    ("compression.lz4.level", INT, 9, between(1, 17), "LZ4 level used when recompressing."),
    ("compression.zstd.level", INT, 3, between(-131072, 22), "Zstd level used when recompressing."),
    ("delete.retention.ms", LONG, 86400000, _nonneg, "How long delete tombstones stay in a compacted log."),
    ("file.delete.delay.ms", LONG, 60000, _nonneg, "Wait before a deleted segment's files are removed."),
    ("flush.messages", LONG, LONG_MAX, at_least(1), "Force an fsync after this many messages."),
    ("flush.ms", LONG, LONG_MAX, _nonneg, "Force an fsync when data is older than this."),
    ("follower.replication.throttled.replicas", LST, "", None, "Replicas throttled on the follower side."),
    ("index.interval.bytes", INT, 4096, _nonneg, "Bytes between offset index entries."),
    ("leader.replication.throttled.replicas", LST, "", None, "Replicas throttled on the leader side."),
    (
        "local.retention.bytes",
        LONG,
        -2,
        at_least(-2),
        "Local bytes kept with tiered storage (-2: retention.bytes).",
    ),
    ("local.retention.ms", LONG, -2, at_least(-2), "Local time kept with tiered storage (-2: retention.ms)."),
    ("max.compaction.lag.ms", LONG, LONG_MAX, at_least(1), "Longest a message may stay uncompacted."),
    ("max.message.bytes", INT, 1048588, _nonneg, "Largest record batch the topic accepts."),
    ("message.downconversion.enable", B, "true", None, "Whether old fetch versions get down-converted data."),
    ("message.timestamp.after.max.ms", LONG, LONG_MAX, _nonneg, "How far in the future a CreateTime may be."),
    ("message.timestamp.before.max.ms", LONG, LONG_MAX, _nonneg, "How far in the past a CreateTime may be."),
    ("message.timestamp.difference.max.ms", LONG, LONG_MAX, _nonneg, "Largest CreateTime skew accepted."),
    (
        "message.timestamp.type",
        S,
        "CreateTime",
        one_of(*TIMESTAMP_TYPES),
        "Keep the producer's time or stamp.",
    ),
    ("min.cleanable.dirty.ratio", D, 0.5, between(0, 1), "Dirty share of the log that triggers compaction."),
    ("min.compaction.lag.ms", LONG, 0, _nonneg, "Shortest a message stays uncompacted."),
    ("min.insync.replicas", INT, 1, at_least(1), "Replicas that must acknowledge an acks=all write."),
    ("preallocate", B, "false", None, "Preallocate segment files."),
    ("remote.storage.enable", B, "false", None, "Tiered storage for this topic."),
    ("retention.bytes", LONG, -1, None, "Largest size of a partition before old segments go (-1: no limit)."),
    ("retention.ms", LONG, 604800000, at_least(-1), "Age after which segments are deleted (-1: no limit)."),
    ("segment.bytes", INT, 1073741824, at_least(14), "Size of one log segment file."),
    ("segment.index.bytes", INT, 10485760, at_least(4), "Size of a segment's offset and time indexes."),
    ("segment.jitter.ms", LONG, 0, _nonneg, "Random jitter subtracted from segment.ms."),
    ("segment.ms", LONG, 604800000, at_least(1), "Roll a new segment after this time."),
    ("unclean.leader.election.enable", B, "false", None, "Allow an out-of-sync replica to become leader."),
]:
    TOPIC_CONFIGS.define(_name, _kind, _default, _doc, _validator, MEDIUM, dynamic=True)

# Topic config -> its broker synonyms in priority order; the factor converts a broker unit to the topic's.
HOUR_MS, MINUTE_MS = 3600000, 60000
TOPIC_SYNONYMS: dict[str, tuple[tuple[str, int], ...]] = {
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", HOUR_MS)),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", HOUR_MS)),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "flush.messages": (("log.flush.interval.messages", 1),),
    "flush.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
    "retention.bytes": (("log.retention.bytes", 1),),
    "retention.ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", MINUTE_MS),
        ("log.retention.hours", HOUR_MS),
    ),
    "max.message.bytes": (("message.max.bytes", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "file.delete.delay.ms": (("log.segment.delete.delay.ms", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "unclean.leader.election.enable": (("unclean.leader.election.enable", 1),),
    "min.insync.replicas": (("min.insync.replicas", 1),),
    "compression.type": (("compression.type", 1),),
    "compression.gzip.level": (("compression.gzip.level", 1),),
    "compression.lz4.level": (("compression.lz4.level", 1),),
    "compression.zstd.level": (("compression.zstd.level", 1),),
    "preallocate": (("log.preallocate", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "message.timestamp.difference.max.ms": (("log.message.timestamp.difference.max.ms", 1),),
    "message.timestamp.before.max.ms": (("log.message.timestamp.before.max.ms", 1),),
    "message.timestamp.after.max.ms": (("log.message.timestamp.after.max.ms", 1),),
    "message.downconversion.enable": (("log.message.downconversion.enable", 1),),
    "local.retention.ms": (("log.local.retention.ms", 1),),
    "local.retention.bytes": (("log.local.retention.bytes", 1),),
}

# --------------------------------------------------------------------------------------------- broker configs
BROKER_CONFIGS = ConfigDef()
_dyn = {"dynamic": True}
for _args, _opts in [
    (("node.id", INT, None, "This broker's id (falls back to broker.id, then 0).", at_least(0), HIGH), {}),
    (("broker.id", INT, -1, "Older name of node.id.", at_least(-1), HIGH), {}),
    (
        ("cluster.id", S, None, "Cluster id; generated and kept in meta.properties when absent.", None, HIGH),
        {},
    ),
    (
        (
            "listeners",
            S,
            "PLAINTEXT://127.0.0.1:9092",
            "Comma-separated NAME://host:port to listen on.",
            None,
            HIGH,
        ),
        {},
    ),
    (
        ("advertised.listeners", S, None, "Addresses given to clients (default: the listeners).", None, HIGH),
        {},
    ),
    (
        (
            "listener.security.protocol.map",
            S,
            "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            "Listener name to security protocol.",
            None,
            LOW,
        ),
        {},
    ),
    (("inter.broker.listener.name", S, None, "Listener brokers use between themselves.", None, MEDIUM), {}),
    (("log.dirs", S, None, "Comma-separated data directories (default: log.dir).", None, HIGH), {}),
    (("log.dir", S, "./rill-data", "Data directory used when log.dirs is not set.", None, HIGH), {}),
    (("num.partitions", INT, 1, "Partitions of an auto-created topic.", at_least(1), MEDIUM), {}),
    (
        (
            "auto.create.topics.enable",
            B,
            "true",
            "Create a topic when a client asks for an unknown one.",
            None,
            HIGH,
        ),
        {},
    ),
    (("delete.topic.enable", B, "true", "Allow DeleteTopics.", None, HIGH), {}),
    (("message.max.bytes", INT, 1048588, "Largest record batch accepted.", _nonneg, HIGH), _dyn),
    (("socket.request.max.bytes", INT, 104857600, "Largest request frame accepted.", at_least(1), HIGH), {}),
    (("socket.send.buffer.bytes", INT, 102400, "SO_SNDBUF (-1: OS default).", at_least(-1), HIGH), {}),
    (("socket.receive.buffer.bytes", INT, 102400, "SO_RCVBUF (-1: OS default).", at_least(-1), HIGH), {}),
    (("connections.max.idle.ms", LONG, 600000, "Close connections idle this long.", None, MEDIUM), {}),
    (("max.connections", INT, INT_MAX, "Most connections accepted.", _nonneg, MEDIUM), _dyn),
    (("max.connections.per.ip", INT, INT_MAX, "Most connections per client address.", _nonneg, MEDIUM), _dyn),
    (("max.connection.creation.rate", INT, INT_MAX, "New connections per second, broker-wide.", _nonneg, LOW), _dyn),
    (
        (
            "max.connections.per.ip.overrides",
            S,
            "",
            "Per-address limits, host:count,... (over max.connections.per.ip).",
            _per_ip_overrides,
            MEDIUM,
        ),
        _dyn,
    ),
    (("queued.max.requests", INT, 500, "Requests read ahead before reading pauses.", at_least(1), HIGH), {}),
    (("max.request.partition.size.limit", INT, 2000, "Most partitions one DescribeTopicPartitions answer holds.",
      at_least(1), LOW), {}),
    (("quota.window.num", INT, 11, "Windows a client quota's rate is measured over.", at_least(1), LOW), {}),
    (("quota.window.size.seconds", INT, 1, "Length of each client quota window.", at_least(1), LOW), {}),
    (
        (
            "queued.max.request.bytes",
            LONG,
            -1,
            "Bytes of requests in flight before reading pauses (0 or less: no bound).",
            None,
            MEDIUM,
        ),
        {},
    ),
    (
        (
            "num.io.threads",
            INT,
            8,
            "Accepted for compatibility (Rill uses one event loop).",
            at_least(1),
            HIGH,
        ),
        _dyn,
    ),
    (
        (
            "num.network.threads",
            INT,
            3,
            "Accepted for compatibility (Rill uses one event loop).",
            at_least(1),
            HIGH,
        ),
        _dyn,
    ),
    (
        ("num.recovery.threads.per.data.dir", INT, 2, "Threads recovering logs at start.", at_least(1), HIGH),
        _dyn,
    ),
    (("fetch.max.bytes", INT, 57671680, "Largest Fetch response.", at_least(1024), MEDIUM), {}),
    (
        (
            "max.incremental.fetch.session.cache.slots",
            INT,
            1000,
            "Incremental fetch sessions (KIP-227) the broker keeps at most.",
            _nonneg,
            MEDIUM,
        ),
        {},
    ),
    (("metrics.port", INT, 0, "Port of Rill's Prometheus endpoint (0: off).", between(0, 65535), LOW), {}),
    (("telemetry.max.bytes", INT, 1048576, "Largest metrics payload of a client's PushTelemetry (KIP-714).",
      at_least(1), LOW), {}),
    (("telemetry.max.series.per.client", INT, 1000,
      "Most series of pushed client metrics the Prometheus endpoint holds per client instance.", at_least(1), LOW),
     {}),
    (("log.segment.bytes", INT, 1073741824, "Size of one log segment file.", at_least(14), HIGH), _dyn),
    (("log.roll.ms", LONG, None, "Roll a new segment after this time.", at_least(1), HIGH), _dyn),
    (("log.roll.hours", INT, 168, "Roll a new segment after this many hours.", at_least(1), HIGH), {}),
    (("log.roll.jitter.ms", LONG, None, "Jitter subtracted from the roll time.", None, HIGH), _dyn),
    (("log.roll.jitter.hours", INT, 0, "Jitter subtracted from the roll time, in hours.", _nonneg, HIGH), {}),
    (
        ("log.retention.ms", LONG, None, "Delete segments older than this (-1: keep).", at_least(-1), HIGH),
        _dyn,
    ),
    (
        (
            "log.retention.minutes",
            INT,
            None,
            "Retention in minutes, if log.retention.ms is unset.",
            None,
            HIGH,
        ),
        {},
    ),
    (
        ("log.retention.hours", INT, 168, "Retention in hours, if the finer settings are unset.", None, HIGH),
        {},
    ),
    (("log.retention.bytes", LONG, -1, "Largest partition size before old segments go.", None, HIGH), _dyn),
    (("log.retention.check.interval.ms", LONG, 300000, "How often retention runs.", at_least(1), MEDIUM), {}),
    (("log.index.size.max.bytes", INT, 10485760, "Size of a segment's indexes.", at_least(4), MEDIUM), _dyn),
    (("log.index.interval.bytes", INT, 4096, "Bytes between offset index entries.", _nonneg, MEDIUM), _dyn),
    (
        ("log.flush.interval.messages", LONG, LONG_MAX, "fsync after this many messages.", at_least(1), HIGH),
        _dyn,
    ),
    (("log.flush.interval.ms", LONG, None, "fsync data older than this.", None, HIGH), _dyn),
    (
        ("log.flush.scheduler.interval.ms", LONG, LONG_MAX, "How often the flusher checks logs.", None, HIGH),
        {},
    ),
    (
        (
            "log.flush.offset.checkpoint.interval.ms",
            INT,
            60000,
            "How often recovery points are saved.",
            _nonneg,
            HIGH,
        ),
        {},
    ),
    (
        (
            "log.flush.start.offset.checkpoint.interval.ms",
            INT,
            60000,
            "How often log start offsets are saved.",
            _nonneg,
            HIGH,
        ),
        {},
    ),
    (
        ("log.segment.delete.delay.ms", LONG, 60000, "Wait before deleted segment files go.", _nonneg, HIGH),
        _dyn,
    ),
    (
        (
            "log.message.timestamp.type",
            S,
            "CreateTime",
            "Default message.timestamp.type of topics.",
            one_of(*TIMESTAMP_TYPES),
            MEDIUM,
        ),
        _dyn,
    ),
    (
        (
            "log.message.timestamp.difference.max.ms",
            LONG,
            LONG_MAX,
            "Largest CreateTime skew.",
            _nonneg,
            MEDIUM,
        ),
        _dyn,
    ),
    (
        (
            "log.message.timestamp.before.max.ms",
            LONG,
            LONG_MAX,
            "Oldest CreateTime accepted.",
            _nonneg,
            MEDIUM,
        ),
        _dyn,
    ),
    (
        (
            "log.message.timestamp.after.max.ms",
            LONG,
            LONG_MAX,
            "Newest CreateTime accepted.",
            _nonneg,
            MEDIUM,
        ),
        _dyn,
    ),
    (("log.message.downconversion.enable", B, "true", "Down-convert for old fetchers.", None, LOW), _dyn),
    (
        (
            "log.cleanup.policy",
            LST,
            "delete",
            "Default cleanup.policy of topics.",
            all_of(*CLEANUP_POLICIES),
            MEDIUM,
        ),
        _dyn,
    ),
    (("log.cleaner.enable", B, "true", "Run the log cleaner for compacted topics.", None, MEDIUM), {}),
    (("log.cleaner.threads", INT, 1, "Log cleaner threads.", _nonneg, MEDIUM), _dyn),
    (("log.cleaner.dedupe.buffer.size", LONG, 134217728, "Memory for the cleaners' key maps.", _nonneg, MEDIUM), _dyn),
    (("log.cleaner.io.buffer.load.factor", D, 0.9, "How full a key map may get.", between(0, 1), MEDIUM), _dyn),
    (
        (
            "log.cleaner.io.max.bytes.per.second",
            D,
            1.7976931348623157e308,
            "The cleaners' read and write rate limit.",
            None,
            MEDIUM,
        ),
        _dyn,
    ),
    (
        (
            "log.cleaner.backoff.ms",
            LONG,
            15000,
            "Cleaner sleep when there is nothing to clean.",
            _nonneg,
            MEDIUM,
        ),
        _dyn,
    ),
    (("log.cleaner.delete.retention.ms", LONG, 86400000, "Tombstone lifetime.", _nonneg, MEDIUM), _dyn),
    (("log.cleaner.min.compaction.lag.ms", LONG, 0, "Shortest uncompacted time.", _nonneg, MEDIUM), _dyn),
    (
        (
            "log.cleaner.max.compaction.lag.ms",
            LONG,
            LONG_MAX,
            "Longest uncompacted time.",
            at_least(1),
            MEDIUM,
        ),
        _dyn,
    ),
    (
        (
            "log.cleaner.min.cleanable.ratio",
            D,
            0.5,
            "Dirty ratio that triggers cleaning.",
            between(0, 1),
            MEDIUM,
        ),
        _dyn,
    ),
    (("log.preallocate", B, "false", "Preallocate segment files.", None, MEDIUM), _dyn),
    (
        (
            "log.local.retention.ms",
            LONG,
            -2,
            "Local retention time with tiered storage.",
            at_least(-2),
            MEDIUM,
        ),
        {},
    ),
    (
        (
            "log.local.retention.bytes",
            LONG,
            -2,
            "Local retention size with tiered storage.",
            at_least(-2),
            MEDIUM,
        ),
        {},
    ),
    (
        (
            "compression.type",
            S,
            "producer",
            "Default compression.type of topics.",
            one_of(*COMPRESSION_TYPES),
            HIGH,
        ),
        _dyn,
    ),
    (
        (
            "compression.gzip.level",
            INT,
            -1,
            "Gzip level.",
            lambda v: None if v == -1 or 1 <= v <= 9 else "must be -1 or 1..9",
            MEDIUM,
        ),
        _dyn,
    ),
    (("compression.lz4.level", INT, 9, "LZ4 level.", between(1, 17), MEDIUM), _dyn),
    (("compression.zstd.level", INT, 3, "Zstd level.", between(-131072, 22), MEDIUM), _dyn),
    (("min.insync.replicas", INT, 1, "Replicas that must acknowledge acks=all.", at_least(1), HIGH), _dyn),
]:
    _n, _k, _d, _doc, _v, _imp = _args
    BROKER_CONFIGS.define(_n, _k, _d, _doc, _v, _imp, **_opts)

_BROKER_GROUPS = [
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("node.id", "broker.id"),
    ("log.dirs", "log.dir"),
]
BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {n: g for g in _BROKER_GROUPS for n in g}
"""Broker config -> the names that set the same thing, in priority order."""

from rill.config import cluster_definitions as _cluster_definitions  # noqa: E402,F401  (replication configs)
from rill.config import coordinator_definitions as _coordinator_definitions  # noqa: E402,F401  (group, txn)
from rill.config import kafka_definitions as _kafka_definitions  # noqa: E402,F401  (Kafka's names Rill does not use; last)
from rill.config import security_definitions as _security_definitions  # noqa: E402,F401  (defines the ssl/sasl configs)
