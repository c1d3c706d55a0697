"""``rill topics``: list, describe, create, delete topics and alter their configs (Kafka's ``kafka-topics``).

    rill topics list [--exclude-internal]
    rill topics describe [TOPIC] [--under-replicated-partitions | --unavailable-partitions]
    rill topics create TOPIC [--partitions N] [--replication-factor R] [--config k=v ...] [--if-not-exists]
    rill topics delete TOPIC [--if-exists]
    rill topics alter-config TOPIC [--add-config k=v[,k=v]] [--delete-config k[,k]]

Kafka's own form works too: ``rill topics --create --topic T --partitions 3``, ``--list``, ``--describe``,
``--delete``. Partitions and replication factor left out take the broker's defaults (``num.partitions``,
``default.replication.factor``). ``describe`` shows each partition's leader, replicas and ISR; as with
kafka-topics, ``--under-replicated-partitions`` lists only the partitions whose ISR is smaller than their
replica set, ``--unavailable-partitions`` only those without a live leader.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from rill.cli._common import (
    EXIT_USAGE,
    CliError,
    Table,
    add_connection_options,
    add_subparsers,
    describe_kafka_exception,
    kafka_error_name,
    kafka_tool_form,
    new_parser,
    parse_config_list,
    print_json,
    print_table,
    run_main,
    run_subcommand,
    wait_future,
)
from rill.cli.configs import (
    admin_client,
    alter_configs,
    check_alterations,
    describe_config_rows,
    fetch_metadata,
    overrides,
    parse_delete_list,
    require_topic,
)


def _is_internal(name: str) -> bool:
    return name.startswith("__")


def _list(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    md = fetch_metadata(admin, args.timeout)
    names = sorted(n for n in md.topics if not (args.exclude_internal and _is_internal(n)))
    if args.json:
        print_json(
            [{"topic": n, "partitions": len(md.topics[n].partitions), "internal": _is_internal(n)} for n in names]
        )
    else:
        for n in names:
            sys.stdout.write(n + "\n")
    return 0


def _partition_rows(tm: Any) -> list[dict[str, Any]]:
    rows = []
    for pid in sorted(tm.partitions):
        p = tm.partitions[pid]
        rows.append(
            {
                "partition": pid,
                "leader": p.leader if p.leader >= 0 else None,
                "replicas": list(p.replicas),
                "isr": list(p.isrs),
                "error": p.error.name() if p.error is not None else None,
            }
        )
    return rows


def _leader(p: dict[str, Any]) -> object:
    return "none" if p["leader"] is None else p["leader"]


def _under_replicated(p: dict[str, Any], live: set[int]) -> bool:
    return len(p["isr"]) < len(p["replicas"])


def _unavailable(p: dict[str, Any], live: set[int]) -> bool:
    return p["leader"] is None or p["leader"] not in live


def _describe(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    md = fetch_metadata(admin, args.timeout)
    if args.under_replicated_partitions or args.unavailable_partitions:
        return _describe_filtered(args, md)
    if args.topic:
        names = [args.topic]
        require_topic(md, args.topic)
    else:
        names = sorted(n for n in md.topics if not (args.exclude_internal and _is_internal(n)))
    described = []
    for name in names:
        tm = md.topics[name]
        parts = _partition_rows(tm)
        try:
            configs = {r.name: r.value for r in overrides(describe_config_rows(admin, "topics", name, args.timeout))}
        except CliError:
            if args.topic:
                raise
            configs = {}
        replication = max((len(p["replicas"]) for p in parts), default=0)
        described.append(
            {
                "topic": name,
                "partition_count": len(parts),
                "replication_factor": replication,
                "configs": configs,
                "partitions": parts,
            }
        )
    if args.json:
        print_json(described[0] if args.topic else described)
        return 0
    for i, d in enumerate(described):
        if i:
            sys.stdout.write("\n")
        cfg = ",".join(f"{k}={v}" for k, v in d["configs"].items()) or "-"
        sys.stdout.write(
            f"Topic: {d['topic']}\tPartitionCount: {d['partition_count']}\t"
            f"ReplicationFactor: {d['replication_factor']}\tConfigs: {cfg}\n"
        )
        table = Table(
            ("PARTITION", "LEADER", "REPLICAS", "ISR"),
            [(p["partition"], _leader(p), p["replicas"], p["isr"]) for p in d["partitions"]],
        )
        print_table(table)
    return 0


def _describe_filtered(args: argparse.Namespace, md: Any) -> int:
    """Only the partitions that match the filter, one line each (kafka-topics' form): no configs, no topic lines."""
    if args.topic:
        require_topic(md, args.topic)
        names = [args.topic]
    else:
        names = sorted(n for n in md.topics if not (args.exclude_internal and _is_internal(n)))
    live = set(md.brokers)
    wanted = _under_replicated if args.under_replicated_partitions else _unavailable
    rows = [{"topic": n, **p} for n in names for p in _partition_rows(md.topics[n]) if wanted(p, live)]
    if args.json:
        print_json(rows)
        return 0
    if rows:
        cells = [(r["topic"], r["partition"], _leader(r), r["replicas"], r["isr"]) for r in rows]
        print_table(Table(("TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"), cells))
    return 0


def _create(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    if args.partitions is not None and args.partitions < 1:
        raise CliError(f"invalid --partitions {args.partitions}: must be at least 1", EXIT_USAGE)
    if args.replication_factor is not None and args.replication_factor < 1:
        raise CliError(f"invalid --replication-factor {args.replication_factor}: must be at least 1", EXIT_USAGE)
    configs = parse_config_list(args.config)
    admin = admin_client(args)
    new = NewTopic(
        args.topic,
        num_partitions=-1 if args.partitions is None else args.partitions,
        replication_factor=-1 if args.replication_factor is None else args.replication_factor,
        config=configs,
    )
    futures = admin.create_topics([new], request_timeout=args.timeout, validate_only=args.dry_run)
    for fut in futures.values():
        try:
            wait_future(fut, args.timeout + 1.0, "create the topic")
        except CliError:
            raise
        except Exception as e:
            if kafka_error_name(e) == "TOPIC_ALREADY_EXISTS" and args.if_not_exists:
                return 0
            raise CliError(f"cannot create topic '{args.topic}': {describe_kafka_exception(e)}") from None
    verb = "Validated" if args.dry_run else "Created"
    sys.stdout.write(f"{verb} topic {args.topic}.\n")
    return 0


def _delete(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    md = fetch_metadata(admin, args.timeout)
    if args.topic not in md.topics:
        if args.if_exists:
            return 0
        raise CliError(f"unknown topic '{args.topic}' (UNKNOWN_TOPIC_OR_PARTITION)")
    futures = admin.delete_topics([args.topic], request_timeout=args.timeout)
    for fut in futures.values():
        try:
            wait_future(fut, args.timeout + 1.0, "delete the topic")
        except CliError:
            raise
        except Exception as e:
            if kafka_error_name(e) == "UNKNOWN_TOPIC_OR_PART" and args.if_exists:
                return 0
            raise CliError(f"cannot delete topic '{args.topic}': {describe_kafka_exception(e)}") from None
    sys.stdout.write(f"Deleted topic {args.topic}.\n")
    return 0


def _alter_config(args: argparse.Namespace) -> int:
    set_configs = parse_config_list(args.add_config)
    delete_configs = parse_delete_list(args.delete_config)
    check_alterations(set_configs, delete_configs)
    admin = admin_client(args)
    require_topic(fetch_metadata(admin, args.timeout), args.topic)
    alter_configs(admin, "topics", args.topic, set_configs, delete_configs, args.timeout)
    sys.stdout.write(f"Completed updating config for topic '{args.topic}'.\n")
    return 0


def _build_parser() -> argparse.ArgumentParser:
    parser = new_parser("rill topics", "Create, list, describe and delete topics.")
    sub = add_subparsers(parser)

    p = sub.add_parser("list", help="list topic names")
    p.add_argument("--exclude-internal", action="store_true", help="hide internal topics (names starting with __)")
    add_connection_options(p)
    p.set_defaults(run=_list)

    p = sub.add_parser("describe", help="show partitions, leaders, replicas and config overrides")
    p.add_argument("topic", nargs="?", metavar="TOPIC", help="topic to describe (default: all)")
    p.add_argument("--exclude-internal", action="store_true", help="hide internal topics when describing all")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--under-replicated-partitions", action="store_true",
                      help="only the partitions whose ISR is smaller than their replicas")  # fmt: skip
    only.add_argument("--unavailable-partitions", action="store_true",
                      help="only the partitions without a live leader")  # fmt: skip
    add_connection_options(p)
    p.set_defaults(run=_describe)

    p = sub.add_parser("create", help="create a topic")
    p.add_argument("topic", metavar="TOPIC", help="topic to create")
    p.add_argument("--partitions", type=int, metavar="N", help="number of partitions (default: broker's)")
    p.add_argument("--replication-factor", type=int, metavar="R", help="replicas per partition (default: broker's)")
    p.add_argument("--config", action="append", metavar="K=V", help="topic config override (repeatable)")
    p.add_argument("--if-not-exists", action="store_true", help="succeed if the topic already exists")
    p.add_argument("--dry-run", action="store_true", help="let the broker validate the request without creating")
    add_connection_options(p, json_output=False)
    p.set_defaults(run=_create)

    p = sub.add_parser("delete", help="delete a topic")
    p.add_argument("topic", metavar="TOPIC", help="topic to delete")
    p.add_argument("--if-exists", action="store_true", help="succeed if the topic does not exist")
    add_connection_options(p, json_output=False)
    p.set_defaults(run=_delete)

    p = sub.add_parser("alter-config", help="set or delete topic config overrides")
    p.add_argument("topic", metavar="TOPIC", help="topic whose configs to change")
    p.add_argument("--add-config", action="append", metavar="K=V[,K=V]", help="configs to set (repeatable)")
    p.add_argument("--delete-config", action="append", metavar="K[,K]", help="configs to remove (repeatable)")
    add_connection_options(p, json_output=False)
    p.set_defaults(run=_alter_config)
    return parser


KAFKA_ACTIONS = {"--list": "list", "--describe": "describe", "--create": "create", "--delete": "delete"}
"""kafka-topics.sh's action flags, and the subcommand each one is."""


def _body(argv: list[str]) -> int:
    return run_subcommand(_build_parser(), kafka_tool_form(argv, KAFKA_ACTIONS, "--topic"))


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_body, argv)


if __name__ == "__main__":
    sys.exit(main())
