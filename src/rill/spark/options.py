"""Options of the ``rill`` data source (the names of Spark's Kafka source), checked as Spark checks them.
An option the source does not take is refused (``rill.spark.option_names``), never ignored.

Offsets travel as Spark's Kafka source writes them: ``{"topic": {"0": 23, "1": -2}}`` where -2 means
earliest and -1 latest. ``rill.spark.offsets`` resolves everything symbolic to concrete offsets on the
driver, before Spark pickles the reader, so every task reads a fixed range ``[start, until)`` and a retried
task reads the same records again.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from rill.client.client import KafkaClient
from rill.client.security import ClientSecurity
from rill.common import TopicPartition
from rill.spark.option_names import check_option_names, client_security
from rill.spark.typed import TypedError, TypedOptions, parse_typed

EARLIEST = -2
LATEST = -1

DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000
DEFAULT_POLL_TIMEOUT_MS = 60_000
DEFAULT_OFFSET_FETCH_ATTEMPTS = 3
DEFAULT_OFFSET_FETCH_INTERVAL_MS = 1000
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Spark's default maxTriggerDelay, 15m
DEFAULT_REQUEST_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000  # Kafka's producer transaction.timeout.ms


class OptionError(ValueError):
    """An option is missing or malformed (the message names it)."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records ``start <= offset < until`` of one topic-partition: what one Spark partition reads."""

    topic: str
    partition: int
    start: int
    until: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return max(self.until - self.start, 0)


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name} must be true or false, got {raw!r}")


def _int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name.lower())
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise OptionError(f"option {name} must be an integer, got {raw!r}") from None


def _positive(options: Mapping[str, str], name: str) -> int | None:
    value = _int(options, name)
    if value is not None and value <= 0:
        raise OptionError(f"option {name} must be positive, got {value}")
    return value


def _timestamp(options: Mapping[str, str], name: str) -> int | None:
    value = _int(options, name)
    if value is not None and value < 0:
        raise OptionError(f"option {name} must be a timestamp in ms since the epoch (>= 0), got {value}")
    return value


_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(options: Mapping[str, str], name: str, default: int) -> int:
    """A duration as Spark writes them: ``500ms``, ``10s``, ``15m``, ``1h``; a bare number is milliseconds."""
    raw = options.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    m = re.fullmatch(r"(\d+)\s*([a-z]*)", raw.strip().lower())
    if m is None or m.group(2) not in ("", *_TIME_UNITS_MS):
        raise OptionError(f"option {name} must be a duration such as 500ms, 10s, 15m or 1h, got {raw!r}")
    return int(int(m.group(1)) * _TIME_UNITS_MS.get(m.group(2) or "ms", 1))


def _transactional_id_prefix(options: Mapping[str, str]) -> str | None:
    """``transactionalIdPrefix``, else one derived from the query's checkpoint location (stable across restarts
    of the query, distinct between queries)."""
    given = options.get("transactionalidprefix")
    if given is not None:
        if not given.strip():
            raise OptionError("option transactionalIdPrefix must not be empty")
        return given.strip()
    checkpoint = options.get("checkpointlocation")
    if checkpoint:
        return "rill-spark-" + hashlib.sha256(checkpoint.encode()).hexdigest()[:16]
    return None


def include_headers(raw: Mapping[str, str]) -> bool:
    """The ``includeHeaders`` option alone (it decides the schema before the other options are checked)."""
    return _bool({k.lower(): v for k, v in raw.items()}, "includeHeaders", False)


def _topics(raw: str) -> tuple[str, ...]:
    """``subscribe``: a set of topics (a topic named twice is read once), in the order given."""
    return tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))


def _assigned(raw: str) -> tuple[TopicPartition, ...]:
    """``assign``: a set of topic-partitions (a partition named twice is read once), in the order given."""
    try:
        parsed = json.loads(raw)
        return tuple(dict.fromkeys(TopicPartition(str(t), int(p)) for t, ps in parsed.items() for p in ps))
    except (ValueError, AttributeError, TypeError):
        raise OptionError(f'option assign must be JSON like {{"topic": [0, 1]}}, got {raw!r}') from None


@dataclass(frozen=True, slots=True)
class SourceOptions:
    bootstrap_servers: str
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: tuple[TopicPartition, ...] | None
    starting: str | None
    ending: str | None
    starting_timestamp: int | None
    starting_by_timestamp: str | None
    by_timestamp_strategy: str
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    max_records_per_partition: int
    fail_on_data_loss: bool
    include_headers: bool
    push_filters: bool
    topic: str | None  # the default topic of the writer
    compression: int
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS  # how long a task waits for records it knows exist
    ending_timestamp: int | None = None
    ending_by_timestamp: str | None = None
    # fetchOffset.numRetries / fetchOffset.retryIntervalMs: how often a stream asks again for latest offsets
    # that are below the offsets it already reached, before it reports data loss.
    offset_fetch_attempts: int = DEFAULT_OFFSET_FETCH_ATTEMPTS
    offset_fetch_interval_ms: int = DEFAULT_OFFSET_FETCH_INTERVAL_MS
    # minOffsetsPerTrigger / maxTriggerDelay: a stream waits for this many new offsets, at most this long.
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    # kafka.client.id (else the group id given by kafka.group.id or groupIdPrefix), kafka.request.timeout.ms
    client_id: str | None = None
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    # The writer's exactlyOnce mode (rill.spark.exactly_once): transactional ids start with the prefix.
    exactly_once: bool = False
    transactional_id_prefix: str | None = None
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    # valueFormat / keyFormat=avro: decode through the schema registry (rill.spark.typed); the reader
    # schemas are filled in on the driver (SourceOptions.resolve_typed) before Spark pickles the reader.
    typed: TypedOptions | None = None
    # kafka.security.protocol, kafka.sasl.*, kafka.ssl.*: TLS and SASL of every connection (rill.client.security)
    security: ClientSecurity | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, str], *, for_write: bool = False) -> SourceOptions:
        options = {k.lower(): v for k, v in raw.items()}
        check_option_names(options, "write" if for_write else "read")
        bootstrap = options.get("kafka.bootstrap.servers") or options.get("rill.bootstrap.servers")
        if not bootstrap:
            raise OptionError("option kafka.bootstrap.servers (or rill.bootstrap.servers) is required")
        subscribe = options.get("subscribe")
        pattern = options.get("subscribepattern")
        assign = options.get("assign")
        given = [n for n, v in (("subscribe", subscribe), ("subscribePattern", pattern), ("assign", assign)) if v]
        if not for_write and len(given) != 1:
            raise OptionError("exactly one of subscribe, subscribePattern, assign must be given, got " + str(given))
        if pattern:
            try:
                re.compile(pattern)
            except re.error as e:
                raise OptionError(f"option subscribePattern is not a regular expression: {e}") from None
        strategy = options.get("startingoffsetsbytimestampstrategy", "error").lower()
        if strategy not in ("error", "latest"):
            raise OptionError("option startingOffsetsByTimestampStrategy must be error or latest")
        codec = options.get("compression.type", options.get("kafka.compression.type", "none")).lower()
        codecs = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
        if codec not in codecs:
            raise OptionError(f"option compression.type must be one of {sorted(codecs)}, got {codec!r}")
        attempts = _int(options, "fetchOffset.numRetries")
        if attempts is not None and attempts < 1:
            raise OptionError(f"option fetchOffset.numRetries must be at least 1, got {attempts}")
        interval = _int(options, "fetchOffset.retryIntervalMs")
        if interval is not None and interval < 0:
            raise OptionError(f"option fetchOffset.retryIntervalMs must not be negative, got {interval}")
        max_offsets = _positive(options, "maxOffsetsPerTrigger")
        min_offsets = _positive(options, "minOffsetsPerTrigger")
        if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
            raise OptionError(
                f"option minOffsetsPerTrigger ({min_offsets}) is higher than maxOffsetsPerTrigger ({max_offsets})"
            )
        group = options.get("kafka.group.id") or options.get("groupidprefix")
        try:
            typed = None if for_write else parse_typed(options)
        except TypedError as e:
            raise OptionError(str(e)) from None
        opts = cls(
            bootstrap_servers=bootstrap,
            subscribe=_topics(subscribe) if subscribe else None,
            subscribe_pattern=pattern,
            assign=_assigned(assign) if assign else None,
            starting=options.get("startingoffsets"),
            ending=options.get("endingoffsets"),
            starting_timestamp=_timestamp(options, "startingTimestamp"),
            starting_by_timestamp=options.get("startingoffsetsbytimestamp"),
            by_timestamp_strategy=strategy,
            max_offsets_per_trigger=max_offsets,
            min_partitions=_positive(options, "minPartitions"),
            max_records_per_partition=_positive(options, "maxRecordsPerPartition") or DEFAULT_MAX_RECORDS_PER_PARTITION,
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            include_headers=_bool(options, "includeHeaders", False),
            push_filters=_bool(options, "pushFilters", False),
            topic=options.get("topic"),
            compression=codecs[codec],
            poll_timeout_ms=_positive(options, "kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS,
            ending_timestamp=_timestamp(options, "endingTimestamp"),
            ending_by_timestamp=options.get("endingoffsetsbytimestamp"),
            offset_fetch_attempts=DEFAULT_OFFSET_FETCH_ATTEMPTS if attempts is None else attempts,
            offset_fetch_interval_ms=DEFAULT_OFFSET_FETCH_INTERVAL_MS if interval is None else interval,
            min_offsets_per_trigger=min_offsets,
            max_trigger_delay_ms=_duration_ms(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
            client_id=options.get("kafka.client.id") or group or None,
            request_timeout_ms=_positive(options, "kafka.request.timeout.ms") or DEFAULT_REQUEST_TIMEOUT_MS,
            exactly_once=_bool(options, "exactlyOnce", False),
            transactional_id_prefix=_transactional_id_prefix(options),
            transaction_timeout_ms=_positive(options, "kafka.transaction.timeout.ms") or DEFAULT_TRANSACTION_TIMEOUT_MS,
            typed=typed,
            security=client_security(options),
        )
        if not for_write:
            opts._check_offset_options()
        return opts

    def _check_offset_options(self) -> None:
        """Malformed offsets and timestamps are refused when the source is made, not when it resolves them."""
        for option, raw in (("startingOffsets", self.starting), ("endingOffsets", self.ending)):
            if raw is not None and raw.strip().lower() not in ("earliest", "latest"):
                for tp, o in parse_offsets_json(raw, option).items():
                    if o < EARLIEST:
                        raise OptionError(f"option {option}: offset {o} for {tp} is not valid (-2 earliest, -1 latest)")
        for option, raw in (
            ("startingOffsetsByTimestamp", self.starting_by_timestamp),
            ("endingOffsetsByTimestamp", self.ending_by_timestamp),
        ):
            if raw is not None:
                for tp, ts in parse_timestamps_json(raw, option).items():
                    if ts < 0:
                        raise OptionError(f"option {option}: timestamp {ts} for {tp} is not valid (must be >= 0)")

    def check_batch(self) -> None:
        """What Spark's Kafka source refuses in a batch query: starting at latest, ending at earliest."""
        if self.starting_timestamp is None and self.starting_by_timestamp is None and self.starting is not None:
            if self.starting.strip().lower() == "latest":
                raise OptionError("option startingOffsets cannot be latest for a batch query")
            if self.starting.strip().lower() != "earliest":
                for tp, o in parse_offsets_json(self.starting, "startingOffsets").items():
                    if o == LATEST:
                        raise OptionError(f"option startingOffsets: {tp} cannot start at -1 (latest) in a batch query")
        if self.ending_timestamp is None and self.ending_by_timestamp is None and self.ending is not None:
            if self.ending.strip().lower() == "earliest":
                raise OptionError("option endingOffsets cannot be earliest for a batch query")
            if self.ending.strip().lower() != "latest":
                for tp, o in parse_offsets_json(self.ending, "endingOffsets").items():
                    if o == EARLIEST:
                        raise OptionError(f"option endingOffsets: {tp} cannot end at -2 (earliest) in a batch query")

    def check_stream(self) -> None:
        """A stream has no end: Spark's Kafka source refuses ending offsets in streaming queries."""
        for option, value in (
            ("endingOffsets", self.ending),
            ("endingOffsetsByTimestamp", self.ending_by_timestamp),
            ("endingTimestamp", self.ending_timestamp),
        ):
            if value is not None:
                raise OptionError(f"option {option} is not valid in streaming queries (a stream has no end)")

    def client(self, client_id: str = "rill-spark") -> KafkaClient:
        """A client named by ``kafka.client.id`` (else the group id option, else ``client_id``)."""
        return KafkaClient(
            self.bootstrap_servers,
            client_id=self.client_id or client_id,
            timeout_s=self.request_timeout_ms / 1000,
            security=self.security,
        )

    def named_topics(self) -> list[str]:
        """The topics the options name (none for subscribePattern)."""
        if self.assign is not None:
            return list(dict.fromkeys(tp.topic for tp in self.assign))
        return list(self.subscribe or ())

    def resolve_typed(self) -> SourceOptions:
        """These options with the typed columns' reader schemas fetched from the registry (driver side)."""
        if self.typed is None or self.typed.resolved:
            return self
        from rill.spark.typed import resolve

        try:
            return replace(self, typed=resolve(self.typed, self.named_topics()))
        except TypedError as e:
            raise OptionError(str(e)) from None

    def topic_partitions(self, client: KafkaClient) -> list[TopicPartition]:
        """The partitions this source reads now (subscriptions are re-evaluated on every call)."""
        if self.assign is not None:
            return sorted(self.assign, key=lambda tp: (tp.topic, tp.partition))
        if self.subscribe is not None:
            topics = list(self.subscribe)
        else:
            assert self.subscribe_pattern is not None
            rx = re.compile(self.subscribe_pattern)
            topics = [t for t in client.list_topics() if rx.fullmatch(t) and not t.startswith("__")]
        out: list[TopicPartition] = []
        for t in topics:
            out.extend(client.partitions_for(t))
        return out


def _partition_map(raw: str) -> dict[TopicPartition, int]:
    parsed = json.loads(raw)
    return {TopicPartition(str(t), int(p)): int(o) for t, ps in parsed.items() for p, o in ps.items()}


def parse_offsets_json(raw: str, option: str) -> dict[TopicPartition, int]:
    try:
        return _partition_map(raw)
    except (ValueError, AttributeError, TypeError):
        raise OptionError(
            f'option {option} must be earliest, latest or JSON like {{"topic": {{"0": 23}}}}, got {raw!r}'
        ) from None


def parse_timestamps_json(raw: str, option: str) -> dict[TopicPartition, int]:
    try:
        return _partition_map(raw)
    except (ValueError, AttributeError, TypeError):
        raise OptionError(
            f'option {option} must be JSON like {{"topic": {{"0": 1700000000000}}}} (ms per partition), got {raw!r}'
        ) from None


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets, key=lambda t: (t.topic, t.partition)):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def offsets_from_json(obj: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {TopicPartition(t, int(p)): int(o) for t, ps in obj.items() for p, o in ps.items()}


def split_ranges(ranges: list[OffsetRange], *, min_partitions: int | None, max_records: int) -> list[OffsetRange]:
    """One range per topic-partition, split so that no piece holds more than ``max_records`` offsets and
    (like Spark's Kafka source) there are at least ``min_partitions`` pieces when the data allows."""
    ranges = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in ranges)
    target = max_records
    if min_partitions and total > 0 and len(ranges) < min_partitions:
        target = min(target, max(1, total // min_partitions))
    out: list[OffsetRange] = []
    for r in ranges:
        pieces = max(1, -(-r.size // target))
        step = -(-r.size // pieces)
        start = r.start
        while start < r.until:
            end = min(start + step, r.until)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out
