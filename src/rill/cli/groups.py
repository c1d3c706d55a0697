"""``rill groups``: list, describe and delete consumer groups, and reset their offsets (Kafka's
``kafka-consumer-groups``). Works against any Kafka-protocol broker.

    rill groups list
    rill groups describe GROUP          members, assignments, committed offset, log end offset and lag
    rill groups delete GROUP
    rill groups reset GROUP --topic T (--to-earliest | --to-latest | --to-offset N)

Kafka's own form works too for ``--list``, ``--describe --group G`` and ``--delete --group G``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from rill.cli._common import (
    CliError,
    Table,
    add_connection_options,
    add_subparsers,
    client_config,
    describe_kafka_exception,
    kafka_tool_form,
    new_parser,
    print_json,
    print_table,
    run_main,
    run_subcommand,
    wait_future,
)
from rill.cli.configs import admin_client, fetch_metadata

_STATE_NAMES = {
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "EMPTY": "Empty",
    "DEAD": "Dead",
    "UNKNOWN": "Unknown",
}


def _state_name(state: Any) -> str:
    """Kafka's spelling of a group state (confluent-kafka's enum names differ)."""
    name = str(getattr(state, "name", state))
    return _STATE_NAMES.get(name, name.title())


def _list(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    result = wait_future(admin.list_consumer_groups(request_timeout=args.timeout), args.timeout, "list groups")
    groups = sorted(result.valid, key=lambda g: g.group_id)
    if args.json:
        print_json([{"group": g.group_id, "state": _state_name(g.state)} for g in groups])
    else:
        print_table(Table(("GROUP", "STATE"), [(g.group_id, _state_name(g.state)) for g in groups]))
    if result.errors:
        raise CliError(f"some brokers could not list their groups: {result.errors[0]}")
    return 0


def _describe_one(admin: Any, group: str, timeout: float) -> Any:
    future = admin.describe_consumer_groups([group], request_timeout=timeout)[group]
    try:
        described = wait_future(future, timeout, f"describe group {group}")
    except CliError:
        raise
    except Exception as e:
        raise CliError(f"cannot describe group {group}: {describe_kafka_exception(e)}") from None
    if _state_name(described.state) in ("Dead", "Unknown") and not described.members:
        raise CliError(f"consumer group '{group}' does not exist")
    return described


def _committed(admin: Any, group: str, timeout: float) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout)[group]
    try:
        result = wait_future(future, timeout, f"read the offsets of group {group}")
    except CliError:
        raise
    except Exception as e:
        raise CliError(f"cannot read the offsets of group {group}: {describe_kafka_exception(e)}") from None
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def _log_end_offsets(args: argparse.Namespace, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    if not tps:
        return {}
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(client_config(args, {"group.id": "rill-groups-cli", "enable.auto.commit": False}))
    try:
        out = {}
        for topic, partition in tps:
            try:
                _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=args.timeout)
            except Exception as e:
                raise CliError(f"cannot read the end of {topic}-{partition}: {describe_kafka_exception(e)}") from None
            out[(topic, partition)] = high
        return out
    finally:
        consumer.close()


def _describe(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    described = _describe_one(admin, args.group, args.timeout)
    committed = _committed(admin, args.group, args.timeout)
    owner: dict[tuple[str, int], Any] = {}
    members = []
    for m in described.members:
        tps = [(tp.topic, tp.partition) for tp in (m.assignment.topic_partitions if m.assignment else [])]
        for tp in tps:
            owner[tp] = m
        members.append(
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": [f"{t}-{p}" for t, p in sorted(tps)],
            }
        )
    partitions = sorted(set(committed) | set(owner))
    ends = _log_end_offsets(args, partitions)
    rows = []
    for tp in partitions:
        current = committed.get(tp)
        end = ends.get(tp)
        lag = end - current if current is not None and end is not None and end >= 0 else None
        m = owner.get(tp)
        rows.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "committed_offset": current,
                "log_end_offset": end,
                "lag": lag,
                "member_id": m.member_id if m is not None else None,
                "client_id": m.client_id if m is not None else None,
                "host": m.host if m is not None else None,
            }
        )
    state = _state_name(described.state)
    assignor = getattr(described, "partition_assignor", "") or ""
    if args.json:
        print_json({"group": args.group, "state": state, "assignor": assignor, "members": members, "partitions": rows})
        return 0
    sys.stdout.write(f"Group {args.group}: {state}, {len(members)} member(s), assignor {assignor or '-'}\n\n")
    print_table(
        Table(
            ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER-ID", "CLIENT-ID", "HOST"),
            [tuple(r.values()) for r in rows],
        )
    )
    if members:
        sys.stdout.write("\n")
        print_table(
            Table(
                ("MEMBER-ID", "GROUP-INSTANCE-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"),
                [(m["member_id"], m["group_instance_id"], m["client_id"], m["host"], m["assignment"]) for m in members],
            )
        )
    return 0


def _delete(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    future = admin.delete_consumer_groups([args.group], request_timeout=args.timeout)[args.group]
    try:
        wait_future(future, args.timeout, f"delete group {args.group}")
    except CliError:
        raise
    except Exception as e:
        raise CliError(f"cannot delete group {args.group}: {describe_kafka_exception(e)}") from None
    sys.stdout.write(f"Deleted consumer group {args.group}\n")
    return 0


def _reset(args: argparse.Namespace) -> int:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition

    admin = admin_client(args)
    md = fetch_metadata(admin, args.timeout)
    if args.topic not in md.topics or md.topics[args.topic].error is not None:
        raise CliError(f"topic '{args.topic}' does not exist")
    # As kafka-consumer-groups.sh: only a group without members (or a new one) can be reset.
    future = admin.describe_consumer_groups([args.group], request_timeout=args.timeout)[args.group]
    try:
        state = _state_name(wait_future(future, args.timeout, f"describe group {args.group}").state)
    except CliError:
        raise
    except Exception as e:
        raise CliError(f"cannot describe group {args.group}: {describe_kafka_exception(e)}") from None
    if state not in ("Empty", "Dead", "Unknown"):
        raise CliError(
            f"Assignments can only be reset if the group '{args.group}' is inactive, but the current state is {state}."
        )
    parts = sorted(md.topics[args.topic].partitions)
    consumer = Consumer(client_config(args, {"group.id": "rill-groups-cli", "enable.auto.commit": False}))
    try:
        marks = {p: consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=args.timeout) for p in parts}
    finally:
        consumer.close()
    targets: dict[int, int] = {}
    for p, (low, high) in marks.items():
        if args.to_offset is None:
            targets[p] = low if args.to_earliest else high
        elif args.to_offset > high:  # kafka-consumer-groups.sh keeps the offset inside the log, saying so
            print(f"New offset ({args.to_offset}) is higher than latest offset for topic partition "
                  f"{args.topic}-{p}. Value will be set to {high}", file=sys.stderr)  # fmt: skip
            targets[p] = high
        elif args.to_offset < low:
            print(f"New offset ({args.to_offset}) is lower than earliest offset for topic partition "
                  f"{args.topic}-{p}. Value will be set to {low}", file=sys.stderr)  # fmt: skip
            targets[p] = low
        else:
            targets[p] = args.to_offset
    request = ConsumerGroupTopicPartitions(args.group, [TopicPartition(args.topic, p, o) for p, o in targets.items()])
    future = admin.alter_consumer_group_offsets([request], request_timeout=args.timeout)[args.group]
    try:
        result = wait_future(future, args.timeout, f"reset the offsets of group {args.group}")
    except CliError:
        raise
    except Exception as e:
        raise CliError(f"cannot reset group {args.group}: {describe_kafka_exception(e)}") from None
    failed = [tp for tp in result.topic_partitions if tp.error is not None]
    if failed:
        tp = failed[0]
        problem = f"{tp.topic}-{tp.partition}: {tp.error.name()}: {tp.error.str()}"
        raise CliError(f"cannot reset group {args.group}: {problem}")
    print_table(Table(("TOPIC", "PARTITION", "NEW-OFFSET"), [(args.topic, p, o) for p, o in targets.items()]))
    return 0


def _build_parser() -> argparse.ArgumentParser:
    parser = new_parser("rill groups", "List, describe, delete consumer groups and reset their offsets.")
    sub = add_subparsers(parser)

    p = sub.add_parser("list", help="list consumer groups")
    add_connection_options(p)
    p.set_defaults(run=_list)

    p = sub.add_parser("describe", help="members, assignments, offsets and lag of a group")
    p.add_argument("group", metavar="GROUP", help="consumer group id")
    add_connection_options(p)
    p.set_defaults(run=_describe)

    p = sub.add_parser("delete", help="delete an empty group and its committed offsets")
    p.add_argument("group", metavar="GROUP", help="consumer group id")
    add_connection_options(p, json_output=False)
    p.set_defaults(run=_delete)

    p = sub.add_parser("reset", help="set a group's committed offsets for a topic (the group must be empty)")
    p.add_argument("group", metavar="GROUP", help="consumer group id")
    p.add_argument("--topic", required=True, metavar="TOPIC", help="topic whose offsets to reset")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the first offset still in the log")
    target.add_argument("--to-latest", action="store_true", help="the log end offset (skip everything)")
    target.add_argument("--to-offset", type=int, metavar="N", help="this offset in every partition")
    add_connection_options(p, json_output=False)
    p.set_defaults(run=_reset)
    return parser


KAFKA_ACTIONS = {"--list": "list", "--describe": "describe", "--delete": "delete"}
"""kafka-consumer-groups.sh's action flags, and the subcommand each one is (its ``--reset-offsets`` is a dry
run without ``--execute``, where ``rill groups reset`` applies at once, so it is not taken as ``reset``)."""


def _body(argv: list[str]) -> int:
    return run_subcommand(_build_parser(), kafka_tool_form(argv, KAFKA_ACTIONS, "--group"))


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_body, argv)


if __name__ == "__main__":
    sys.exit(main())
