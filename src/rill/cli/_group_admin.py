"""What ``rill groups`` asks the broker, through confluent-kafka's AdminClient: group listings and
descriptions, committed offsets, log offsets (earliest, latest, by timestamp), and topic partitions named
as kafka-consumer-groups.sh names them (``topic`` or ``topic:0,1,2``)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from rill.cli._common import EXIT_USAGE, CliError, describe_kafka_exception, wait_future
from rill.cli.configs import fetch_metadata

TP = tuple[str, int]

STATE_NAMES = {
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "EMPTY": "Empty",
    "DEAD": "Dead",
    "UNKNOWN": "Unknown",
}
"""Kafka's spelling of each group state, by confluent-kafka's enum name."""

CONSUMER_GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling", "Stable", "Dead",
                         "Empty")  # fmt: skip


def state_name(state: Any) -> str:
    name = str(getattr(state, "name", state))
    return STATE_NAMES.get(name, name.title())


def parse_states(text: str) -> set[str]:
    """``--state Stable,empty``: Kafka's state names, in any case."""
    by_lower = {s.lower(): s for s in CONSUMER_GROUP_STATES}
    wanted = {by_lower.get(part.strip().lower(), "") for part in text.split(",")}
    if "" in wanted:
        valid = ", ".join(CONSUMER_GROUP_STATES)
        raise CliError(f"invalid state list '{text}': valid states are {valid}", EXIT_USAGE)
    return wanted


def result(future: Any, timeout_s: float, what: str) -> Any:
    """A future's result, or one line saying what could not be done and why."""
    try:
        return wait_future(future, timeout_s, what)
    except CliError:
        raise
    except Exception as e:
        raise CliError(f"cannot {what}: {describe_kafka_exception(e)}") from None


def list_groups(admin: Any, timeout_s: float, *, with_types: bool = False) -> list[Any]:
    """(group id, state) of every consumer group, sorted by id; (group id, state, type) ``with_types``."""
    listed = result(admin.list_consumer_groups(request_timeout=timeout_s), timeout_s, "list groups")
    if listed.errors:
        raise CliError(f"some brokers could not list their groups: {listed.errors[0]}")
    if with_types:
        kinds = {g.group_id: str(getattr(getattr(g, "type", None), "name", "unknown")).lower() for g in listed.valid}
        return sorted((g.group_id, state_name(g.state), kinds[g.group_id]) for g in listed.valid)
    return sorted((g.group_id, state_name(g.state)) for g in listed.valid)


def target_groups(admin: Any, args: argparse.Namespace) -> list[str]:
    """The groups named on the command line, or every group with ``--all-groups``."""
    if args.all_groups:
        if args.groups:
            raise CliError("give either group names or --all-groups, not both", EXIT_USAGE)
        return [g for g, _ in list_groups(admin, args.timeout)]
    if not args.groups:
        raise CliError("give a group (--group G) or --all-groups", EXIT_USAGE)
    return list(dict.fromkeys(args.groups))


def describe_groups(admin: Any, groups: list[str], timeout_s: float) -> dict[str, Any]:
    if not groups:
        return {}
    futures = admin.describe_consumer_groups(groups, request_timeout=timeout_s)
    return {g: result(futures[g], timeout_s, f"describe group {g}") for g in groups}


def exists(described: Any) -> bool:
    return state_name(described.state) not in ("Dead", "Unknown") or bool(described.members)


def committed_offsets(admin: Any, group: str, timeout_s: float) -> dict[TP, Any]:
    """The group's committed offsets (confluent-kafka ``TopicPartition``s: offset, leader_epoch)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s)
    found = result(future[group], timeout_s, f"read the offsets of group {group}")
    return {(tp.topic, tp.partition): tp for tp in found.topic_partitions if tp.offset >= 0}


def log_offsets(admin: Any, tps: Iterable[TP], spec: str | int, timeout_s: float) -> dict[TP, int]:
    """ListOffsets for each partition: ``spec`` is ``"earliest"``, ``"latest"`` or a timestamp in ms.
    For a timestamp, a partition with no record at or after it maps to -1."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin._listoffsets import OffsetSpec

    wanted = sorted(set(tps))
    if not wanted:
        return {}
    offset_spec: Any
    if spec == "earliest":
        offset_spec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    elif spec == "latest":
        offset_spec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    else:
        offset_spec = OffsetSpec.for_timestamp(int(spec))
    request = {TopicPartition(t, p): offset_spec for t, p in wanted}
    futures = admin.list_offsets(request, request_timeout=timeout_s)
    out: dict[TP, int] = {}
    for tp, future in futures.items():
        info = result(future, timeout_s, f"read the offsets of {tp.topic}-{tp.partition}")
        out[(tp.topic, tp.partition)] = int(info.offset)
    return out


def topic_partitions(admin: Any, specs: list[str], timeout_s: float) -> list[TP]:
    """``--topic`` values as kafka-consumer-groups.sh reads them: ``T`` (every partition of T) or
    ``T:0,2`` (those partitions). Unknown topics and partitions are refused before anything is done."""
    wanted: dict[str, list[int] | None] = {}
    for spec in specs:
        topic, sep, parts = spec.partition(":")
        if not topic or (sep and not parts):
            raise CliError(f"invalid topic '{spec}': expected a topic name and partitions (T or T:0,1)", EXIT_USAGE)
        if not sep:
            wanted[topic] = None
            continue
        numbers: list[int] = []
        for part in parts.split(","):
            try:
                numbers.append(int(part))
            except ValueError:
                raise CliError(f"invalid partition '{part}' in topic '{spec}'", EXIT_USAGE) from None
        if topic not in wanted or wanted[topic] is not None:
            wanted[topic] = sorted(set((wanted.get(topic) or []) + numbers))
    md = fetch_metadata(admin, timeout_s)
    out: list[TP] = []
    missing: list[str] = []
    for topic, parts_wanted in wanted.items():
        tm = md.topics.get(topic)
        if tm is None or (tm.error is not None and tm.error.name() == "UNKNOWN_TOPIC_OR_PART") or not tm.partitions:
            raise CliError(f"topic '{topic}' does not exist (UNKNOWN_TOPIC_OR_PARTITION)")
        have = sorted(tm.partitions)
        for p in have if parts_wanted is None else parts_wanted:
            if p in tm.partitions:
                out.append((topic, p))
            else:
                missing.append(f"{topic}-{p}")
    if missing:
        raise CliError(f"the partitions {','.join(missing)} do not exist (UNKNOWN_TOPIC_OR_PARTITION)")
    return out
