"""``rill groups``: list, describe and delete consumer groups, reset and delete their committed offsets
(Kafka's ``kafka-consumer-groups``). Works against any Kafka-protocol broker.

    rill groups list [--state [STATES]] [--type TYPES]   names; with --state or --type a table (STATE, TYPE)
    rill groups describe (GROUP... | --all-groups) [--members [--verbose] | --state | --offsets]

Groups of both protocols are shown: ``classic`` and ``consumer`` (KIP-848). For consumer groups, ``--state``
gives the group epoch and the target assignment's epoch, and ``--members --verbose`` each member's epoch,
current assignment and target assignment.
    rill groups delete (GROUP... | --all-groups)
    rill groups reset (GROUP... | --all-groups) (--topic T[:P,P] ... | --all-topics) SPEC [--dry-run | --execute]
    rill groups delete-offsets GROUP --topic T[:P,P] ...

``SPEC`` is one of ``--to-earliest``, ``--to-latest``, ``--to-current``, ``--to-offset N``, ``--shift-by N``,
``--to-datetime YYYY-MM-DDTHH:mm:SS.sss`` (local time unless a zone is given), ``--by-duration PnDTnHnMnS``.
As in Kafka, a reset only prints its plan unless ``--execute`` is given, and only an inactive group (Empty,
or unknown) can be reset or lose offsets of a topic it is subscribed to.

Kafka's own form works too: ``--list``, ``--describe``, ``--delete``, ``--reset-offsets`` and
``--delete-offsets`` with ``--group G`` (repeatable), e.g. ``rill groups --bootstrap-server B --group G
--reset-offsets --to-earliest --topic T --execute``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from rill.cli import groups_reset
from rill.cli._common import (
    CliError,
    Table,
    add_connection_options,
    add_subparsers,
    kafka_tool_form,
    new_parser,
    print_json,
    print_table,
    run_main,
    run_subcommand,
)
from rill.cli._consumer_group_admin import consumer_group_epochs, group_type
from rill.cli._group_admin import (
    TP,
    committed_offsets,
    describe_groups,
    exists,
    list_groups,
    log_offsets,
    parse_states,
    result,
    state_name,
    target_groups,
)
from rill.cli.configs import admin_client


def _list(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    listed = list_groups(admin, args.timeout, with_types=True)
    if args.state:
        wanted = parse_states(args.state)
        listed = [(g, s, t) for g, s, t in listed if s in wanted]
    if args.type:
        types = {t.strip().lower() for t in args.type.split(",")}
        listed = [(g, s, t) for g, s, t in listed if t in types]
    if args.json:
        print_json([{"group": g, "state": s, "type": t} for g, s, t in listed])
    elif args.state is None and args.type is None:  # as kafka-consumer-groups.sh --list: one name a line
        sys.stdout.write("".join(f"{g}\n" for g, _, _ in listed))
    elif args.type is None:  # Kafka's columns: GROUP STATE, GROUP TYPE, or both
        print_table(Table(("GROUP", "STATE"), [(g, s) for g, s, _ in listed]))
    elif args.state is None:
        print_table(Table(("GROUP", "TYPE"), [(g, t) for g, _, t in listed]))
    else:
        print_table(Table(("GROUP", "TYPE", "STATE"), [(g, t, s) for g, s, t in listed]))
    return 0


def _assignment_text(tps: list[TP]) -> str:
    """Kafka's way of writing an assignment: ``orders:0,2;payments:1``."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(partition)
    return ";".join(f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in sorted(by_topic.items())) or "-"


def _member_tps(member: Any) -> list[TP]:
    assignment = member.assignment.topic_partitions if member.assignment else []
    return sorted((tp.topic, tp.partition) for tp in assignment)


def _group_report(admin: Any, group: str, described: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Everything ``describe`` shows of one group, as the JSON output gives it."""
    members = sorted(described.members, key=lambda m: -len(_member_tps(m)))
    offsets_view = not (args.members or args.state)
    committed = committed_offsets(admin, group, args.timeout) if offsets_view else {}
    rows: list[dict[str, Any]] = []
    owned: set[TP] = set()
    # As Kafka: members with the most partitions first, then the committed partitions no member owns.
    for m in members if offsets_view else ():
        for tp in _member_tps(m):
            owned.add(tp)
            rows.append({"topic": tp[0], "partition": tp[1], "member": m})
    rows += [{"topic": t, "partition": p, "member": None} for t, p in sorted(set(committed) - owned)]
    ends = log_offsets(admin, [(r["topic"], r["partition"]) for r in rows], "latest", args.timeout) if rows else {}
    partitions = []
    for r in rows:
        tp = (r["topic"], r["partition"])
        c = committed.get(tp)
        current = c.offset if c is not None else None
        end = ends.get(tp)
        m = r["member"]
        partitions.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "leader_epoch": getattr(c, "leader_epoch", None) if c is not None else None,
                "committed_offset": current,
                "log_end_offset": end,
                "lag": end - current if current is not None and end is not None and end >= 0 else None,
                "member_id": m.member_id if m is not None else None,
                "host": m.host if m is not None else None,
                "client_id": m.client_id if m is not None else None,
            }
        )
    coordinator = described.coordinator
    epochs = args.epochs.get(group, {})
    member_epochs = epochs.get("members", {})
    return {
        "group": group,
        "type": group_type(described),
        "group_epoch": epochs.get("group_epoch"),
        "assignment_epoch": epochs.get("assignment_epoch"),
        "state": epochs.get("state") or state_name(described.state),
        "assignor": getattr(described, "partition_assignor", "") or "",
        "coordinator": {"id": coordinator.id, "host": coordinator.host, "port": coordinator.port}
        if coordinator is not None
        else None,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": [f"{t}-{p}" for t, p in _member_tps(m)],
                "partitions": _member_tps(m),
                "member_epoch": member_epochs.get(m.member_id, {}).get("member_epoch"),
                "target_assignment": [f"{t}-{p}" for t, p in member_epochs.get(m.member_id, {}).get("target", [])],
                "target_partitions": member_epochs.get(m.member_id, {}).get("target", []),
                "protocol": member_epochs.get(m.member_id, {}).get("protocol")
                or ("classic" if group_type(described) == "classic" else None),
            }
            for m in members
        ],
        "partitions": partitions,
    }


def _print_offsets(reports: list[dict[str, Any]], verbose: bool) -> None:
    headers = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST"]
    if verbose:
        headers.insert(3, "LEADER-EPOCH")
    rows = []
    for rep in reports:
        for r in rep["partitions"]:
            row = [rep["group"], r["topic"], r["partition"], r["committed_offset"], r["log_end_offset"], r["lag"]]
            row += [r["member_id"], r["host"], r["client_id"]]
            if verbose:
                row.insert(3, r["leader_epoch"] if r["leader_epoch"] is not None and r["leader_epoch"] >= 0 else None)
            rows.append(tuple(row))
    print_table(Table((*headers, "CLIENT-ID"), rows))


def _print_members(reports: list[dict[str, Any]], verbose: bool) -> None:
    with_instance = any(m["group_instance_id"] for rep in reports for m in rep["members"])
    headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    if with_instance:
        headers.insert(2, "GROUP-INSTANCE-ID")
    consumer = any(rep["type"] == "consumer" for rep in reports)
    if consumer:  # a consumer group may keep members of the classic protocol: which one each uses
        headers.append("PROTOCOL")
    if verbose and consumer:  # as Kafka for consumer groups: the epochs and the target assignment too
        headers += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    elif verbose:
        headers.append("ASSIGNMENT")
    rows = []
    for rep in reports:
        for m in rep["members"]:
            row = [rep["group"], m["member_id"], m["host"], m["client_id"], len(m["partitions"])]
            if with_instance:
                row.insert(2, m["group_instance_id"])
            if consumer:
                row.append(m["protocol"])
            if verbose and consumer:
                row += [m["member_epoch"], _assignment_text(m["partitions"]), rep["assignment_epoch"],
                        _assignment_text(m["target_partitions"]) if rep["type"] == "consumer" else None]  # fmt: skip
            elif verbose:
                row.append(_assignment_text(m["partitions"]))
            rows.append(tuple(row))
    print_table(Table(tuple(headers), rows))


def _print_states(reports: list[dict[str, Any]]) -> None:
    rows = []
    for rep in reports:
        c = rep["coordinator"]
        coordinator = f"{c['host']}:{c['port']}  ({c['id']})" if c is not None else None
        rows.append((rep["group"], coordinator, rep["type"], rep["assignor"] or None, rep["state"],
                     rep["group_epoch"], rep["assignment_epoch"], len(rep["members"])))  # fmt: skip
    headers: tuple[str, ...] = ("GROUP", "COORDINATOR (ID)", "TYPE", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                                "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS")  # fmt: skip
    table: list[tuple[Any, ...]] = list(rows)
    if not any(rep["type"] == "consumer" for rep in reports):  # Kafka's columns for classic groups
        keep = (0, 1, 3, 4, 7)
        headers = tuple(headers[i] for i in keep)
        table = [tuple(row[i] for i in keep) for row in table]
    print_table(Table(headers, table))


def _describe(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    groups = target_groups(admin, args)
    described = describe_groups(admin, groups, args.timeout)
    missing = [g for g in groups if not exists(described[g])]
    consumer_groups = [g for g in groups if g not in missing and group_type(described[g]) == "consumer"]
    args.epochs = consumer_group_epochs(args, consumer_groups)
    reports = [_group_report(admin, g, described[g], args) for g in groups if g not in missing]
    if args.json:
        if reports or not missing:
            print_json(reports[0] if len(groups) == 1 else reports)
    else:
        for rep in reports:  # as Kafka, on stderr: what the tables cannot say
            if rep["state"] == "Empty":
                sys.stderr.write(f"Consumer group '{rep['group']}' has no active members.\n")
            elif rep["state"] in ("PreparingRebalance", "CompletingRebalance"):
                sys.stderr.write(f"Warning: Consumer group '{rep['group']}' is rebalancing.\n")
        sys.stderr.flush()
        if args.members:
            _print_members(reports, args.verbose)
        elif args.state:
            _print_states(reports)
        elif reports:
            _print_offsets(reports, args.verbose)
    if missing:
        names = ", ".join(f"'{g}'" for g in missing)
        raise CliError(f"consumer group {names} does not exist" if len(missing) == 1 else f"{names} do not exist")
    return 0


def _delete(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    groups = target_groups(admin, args)
    if not groups:
        sys.stdout.write("No consumer groups to delete.\n")
        return 0
    futures = admin.delete_consumer_groups(groups, request_timeout=args.timeout)
    failed: list[str] = []
    done: list[str] = []
    for g in groups:
        try:
            result(futures[g], args.timeout, f"delete group {g}")
            done.append(g)
        except CliError as e:
            failed.append(e.message)
    if done:
        names = ", ".join(f"'{g}'" for g in done)
        sys.stdout.write(f"Deletion of requested consumer groups ({names}) was successful.\n")
    if failed:
        raise CliError("; ".join(failed))
    return 0


def _group_targets(p: argparse.ArgumentParser) -> None:
    p.add_argument("groups", nargs="*", metavar="GROUP", help="the group(s) (or --group G, as Kafka's tool takes)")
    p.add_argument("--all-groups", action="store_true", help="every consumer group")


def _build_parser() -> argparse.ArgumentParser:
    parser = new_parser(
        "rill groups", "List, describe and delete consumer groups; reset and delete their committed offsets."
    )
    sub = add_subparsers(parser)

    p = sub.add_parser("list", help="list consumer groups")
    p.add_argument(
        "--state", nargs="?", const="", metavar="STATES",
        help="show each group's state; with a comma-separated list, only groups in those states",
    )  # fmt: skip
    p.add_argument("--type", metavar="TYPES", help="only groups of these types (comma-separated: classic, consumer)")
    add_connection_options(p)
    p.set_defaults(run=_list)

    p = sub.add_parser("describe", help="offsets and lag, members, or state of groups")
    _group_targets(p)
    view = p.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="committed and log end offsets, lag (the default)")
    view.add_argument("--members", action="store_true", help="the members (with --verbose, their assignments)")
    view.add_argument("--state", action="store_true", help="coordinator, assignment strategy, state, member count")
    add_connection_options(p)
    p.set_defaults(run=_describe)

    p = sub.add_parser("delete", help="delete empty groups and their committed offsets")
    _group_targets(p)
    add_connection_options(p, json_output=False)
    p.set_defaults(run=_delete)

    p = sub.add_parser("reset", help="plan (or with --execute, apply) new committed offsets for inactive groups")
    _group_targets(p)
    groups_reset.add_reset_arguments(p)
    add_connection_options(p)
    p.set_defaults(run=groups_reset.reset)

    p = sub.add_parser("delete-offsets", help="delete a group's committed offsets of topics or partitions")
    p.add_argument("group", metavar="GROUP", help="the consumer group")
    p.add_argument("--topic", action="append", required=True, metavar="T[:P,P]", help="topic (repeatable)")
    add_connection_options(p)
    p.set_defaults(run=groups_reset.delete_offsets)
    return parser


KAFKA_ACTIONS = {
    "--list": "list",
    "--describe": "describe",
    "--delete": "delete",
    "--reset-offsets": "reset",
    "--delete-offsets": "delete-offsets",
}
"""kafka-consumer-groups.sh's action flags, and the subcommand each one is."""


def _body(argv: list[str]) -> int:
    return run_subcommand(_build_parser(), kafka_tool_form(argv, KAFKA_ACTIONS, "--group"))


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_body, argv)


if __name__ == "__main__":
    sys.exit(main())
