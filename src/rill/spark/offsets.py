"""Starting and ending offsets of the ``rill`` source resolved to concrete offsets, as Spark's Kafka source
resolves them.

Precedence (Spark's): ``startingTimestamp`` > ``startingOffsetsByTimestamp`` > ``startingOffsets``, and
``endingTimestamp`` > ``endingOffsetsByTimestamp`` > ``endingOffsets``. A timestamp selects the first offset
whose record timestamp is >= it. When a partition has none, a start follows
``startingOffsetsByTimestampStrategy`` (``error``, or ``latest``) and an end is the latest offset. JSON
offsets and per-partition timestamps must name exactly the partitions the source reads (use -2 for
earliest, -1 for latest).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rill.client.client import KafkaClient
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.spark.options import (
    EARLIEST,
    LATEST,
    OptionError,
    SourceOptions,
    parse_offsets_json,
    parse_timestamps_json,
)


def _names(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(str(tp) for tp in sorted(tps, key=lambda tp: (tp.topic, tp.partition)))


def check_partitions(given: Iterable[TopicPartition], tps: list[TopicPartition], option: str) -> None:
    """Spark requires JSON offsets for exactly the partitions the query reads: refuse any other set."""
    named, read = set(given), set(tps)
    if named == read:
        return
    problems = []
    if read - named:
        problems.append(f"missing {_names(read - named)}")
    if named - read:
        problems.append(f"not read by this source: {_names(named - read)}")
    raise OptionError(
        f"option {option} must name exactly the partitions the source reads ({'; '.join(problems)}); "
        "use -2 for earliest and -1 for latest"
    )


def _by_timestamp(
    client: KafkaClient,
    wanted: Mapping[TopicPartition, int],
    tps: list[TopicPartition],
    *,
    starting: bool,
    strategy: str,
) -> dict[TopicPartition, int]:
    """The first offset of each partition whose timestamp is >= the wanted one; where there is none, the
    latest offset (for a start only with ``strategy=latest``, else an error, as in Spark)."""
    found = client.list_offsets({tp: wanted[tp] for tp in tps})
    latest = client.latest_offsets(tps)
    out: dict[TopicPartition, int] = {}
    for tp in tps:
        hit = found.get(tp)
        if hit is not None and hit.offset >= 0:
            out[tp] = hit.offset
        elif starting and strategy == "error":
            raise KafkaError(
                ErrorCode.OFFSET_NOT_AVAILABLE,
                f"no offset of {tp} has a timestamp >= {wanted[tp]} "
                "(set startingOffsetsByTimestampStrategy=latest to start at the end instead)",
            )
        else:
            out[tp] = latest[tp]
    return out


def resolve_spec(client: KafkaClient, spec: str, option: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """``earliest`` / ``latest`` / JSON (-2 earliest, -1 latest) -> concrete offsets for ``tps``."""
    spec = spec.strip()
    if spec.lower() == "earliest":
        return client.earliest_offsets(tps)
    if spec.lower() == "latest":
        return client.latest_offsets(tps)
    given = parse_offsets_json(spec, option)
    check_partitions(given, tps, option)
    resolved = {
        **client.earliest_offsets([tp for tp in tps if given[tp] == EARLIEST]),
        **client.latest_offsets([tp for tp in tps if given[tp] == LATEST]),
    }
    return {tp: resolved.get(tp, given[tp]) for tp in tps}


def resolve_starting(
    client: KafkaClient, opts: SourceOptions, tps: list[TopicPartition], *, default: str
) -> dict[TopicPartition, int]:
    """Concrete starting offsets: startingTimestamp, else startingOffsetsByTimestamp, else startingOffsets
    (``default`` when absent)."""
    strategy = opts.by_timestamp_strategy
    if opts.starting_timestamp is not None:
        wanted = dict.fromkeys(tps, opts.starting_timestamp)
        return _by_timestamp(client, wanted, tps, starting=True, strategy=strategy)
    if opts.starting_by_timestamp is not None:
        wanted = parse_timestamps_json(opts.starting_by_timestamp, "startingOffsetsByTimestamp")
        check_partitions(wanted, tps, "startingOffsetsByTimestamp")
        return _by_timestamp(client, wanted, tps, starting=True, strategy=strategy)
    return resolve_spec(client, opts.starting or default, "startingOffsets", tps)


def resolve_ending(client: KafkaClient, opts: SourceOptions, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """Concrete ending offsets (exclusive) of a batch read: endingTimestamp, else endingOffsetsByTimestamp,
    else endingOffsets (latest when absent)."""
    if opts.ending_timestamp is not None:
        wanted = dict.fromkeys(tps, opts.ending_timestamp)
        return _by_timestamp(client, wanted, tps, starting=False, strategy="latest")
    if opts.ending_by_timestamp is not None:
        wanted = parse_timestamps_json(opts.ending_by_timestamp, "endingOffsetsByTimestamp")
        check_partitions(wanted, tps, "endingOffsetsByTimestamp")
        return _by_timestamp(client, wanted, tps, starting=False, strategy="latest")
    return resolve_spec(client, opts.ending or "latest", "endingOffsets", tps)


__all__ = ["check_partitions", "resolve_ending", "resolve_spec", "resolve_starting"]
