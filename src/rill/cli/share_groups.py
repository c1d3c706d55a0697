"""``rill share-groups``: list, describe, reset and delete share groups (KIP-932), as Kafka's
``kafka-share-groups.sh`` does.

    rill share-groups list [--state]
    rill share-groups describe GROUP [--members | --state]
    rill share-groups reset-offsets --group G (--topic T[:P,P] | --all-topics)
        (--to-earliest | --to-latest | --to-offset N | --to-datetime DT | --by-duration PnDTnHnMnS)
        [--dry-run | --execute]
    rill share-groups delete --group G
    rill share-groups delete-offsets --group G --topic T

These APIs are not in confluent-kafka's AdminClient: the command speaks the protocol with ``rill.client``, which
takes the TLS and SASL settings of ``--command-config``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from rill.cli import share_groups_admin
from rill.cli._client_security import rill_client_security
from rill.cli._common import (
    CliError,
    Table,
    add_connection_options,
    add_subparsers,
    ensure_reachable,
    new_parser,
    print_json,
    print_table,
    run_main,
    run_subcommand,
)
from rill.client.client import KafkaClient
from rill.errors import ErrorCode, KafkaError
from rill.protocol.api import ApiKey


def _client(args: argparse.Namespace) -> KafkaClient:
    security = rill_client_security(args.command_config)
    ensure_reachable(args.bootstrap_server, args.timeout)
    return KafkaClient(args.bootstrap_server, client_id="rill-share-groups", timeout_s=args.timeout, security=security)


def _list(args: argparse.Namespace) -> int:
    groups: dict[str, str] = {}
    with _client(args) as client:
        for node in sorted(client.refresh_metadata([]).brokers):
            conn = client.connection(node)
            _, body = conn.request(ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": ["share"]}, version=5)
            if body["error_code"]:
                raise CliError(f"cannot list groups on broker {node}: {ErrorCode(body['error_code']).name}")
            for g in body["groups"]:
                if g["group_type"] == "share":
                    groups[g["group_id"]] = g["group_state"]
    if args.json:
        print_json([{"group": g, "state": s} for g, s in sorted(groups.items())])
    elif args.state:
        print_table(Table(("GROUP", "STATE"), sorted(groups.items())))
    else:
        sys.stdout.write("".join(f"{g}\n" for g in sorted(groups)))
    return 0


def _start_offsets(conn: Any, group: str) -> list[tuple[str, str, int, int | None]]:
    """(group, topic, partition, share-partition start offset) of every partition the group has a state for."""
    if ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS not in conn.api_versions:
        return []
    request = {"groups": [{"group_id": group, "topics": None}]}
    _, body = conn.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, request, version=0)
    rows: list[tuple[str, str, int, int | None]] = []
    for t in body["groups"][0]["topics"]:
        for p in t["partitions"]:
            start = p["start_offset"] if p["error_code"] == 0 and p["start_offset"] >= 0 else None
            rows.append((group, t["topic_name"], p["partition_index"], start))
    return sorted(rows)


def _describe(args: argparse.Namespace) -> int:
    with _client(args) as client:
        conn = client.coordinator(args.group)
        if ApiKey.SHARE_GROUP_DESCRIBE not in conn.api_versions:
            raise CliError("the broker does not serve share groups (ShareGroupDescribe)")
        request = {"group_ids": [args.group], "include_authorized_operations": False}
        _, body = conn.request(ApiKey.SHARE_GROUP_DESCRIBE, request, version=1)
        offsets = _start_offsets(conn, args.group)
    group: dict[str, Any] = body["groups"][0]
    code = ErrorCode(group["error_code"])
    if code == ErrorCode.GROUP_ID_NOT_FOUND:
        raise CliError(f"Group {args.group} does not exist.")
    if code != ErrorCode.NONE:
        raise CliError(f"cannot describe group {args.group}: {code.name}")
    members = [
        (args.group, m["member_id"], m["client_host"], m["client_id"],
         sum(len(t["partitions"]) for t in m["assignment"]["topic_partitions"]),
         ",".join(f"{t['topic_name']}:{','.join(map(str, t['partitions']))}"
                  for t in m["assignment"]["topic_partitions"]) or "-")
        for m in group["members"]
    ]  # fmt: skip
    if args.json:
        print_json({"group": args.group, "state": group["group_state"], "group_epoch": group["group_epoch"],
                    "assignor": group["assignor_name"],
                    "offsets": [{"topic": t, "partition": p, "start_offset": o} for _, t, p, o in offsets],
                    "members": [dict(zip(("group", "consumer_id", "host", "client_id", "partitions", "assignment"),
                                         row, strict=True)) for row in members]})  # fmt: skip
        return 0
    if args.members:
        print_table(Table(("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"), members))
    elif args.state:
        rows = [(args.group, group["assignor_name"], group["group_state"], group["group_epoch"], len(members))]
        print_table(Table(("GROUP", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH", "#MEMBERS"), rows))
    else:
        print_table(Table(("GROUP", "TOPIC", "PARTITION", "START-OFFSET"), offsets))
    return 0


def _with_client(run: Any) -> Any:
    def call(args: argparse.Namespace) -> int:
        with _client(args) as client:
            result: int = run(client, args)
            return result

    return call


def _build_parser() -> argparse.ArgumentParser:
    parser = new_parser("rill share-groups", "List, describe, reset and delete share groups.")
    sub = add_subparsers(parser)
    p = sub.add_parser("list", help="the share groups of the cluster")
    p.add_argument("--state", action="store_true", help="add a STATE column")
    add_connection_options(p)
    p.set_defaults(run=_list)
    p = sub.add_parser("describe", help="a share group's start offsets, its members (--members) or state (--state)")
    p.add_argument("group", help="the share group")
    p.add_argument("--members", action="store_true", help="one line per member with its assignment")
    p.add_argument("--state", action="store_true", help="the group's state, epoch and number of members")
    add_connection_options(p)
    p.set_defaults(run=_describe)
    p = sub.add_parser("reset-offsets", help="set an inactive share group's start offsets (prints the plan; "
                       "writes it with --execute)")  # fmt: skip
    share_groups_admin.add_reset_arguments(p)
    add_connection_options(p)
    p.set_defaults(run=_with_client(share_groups_admin.reset_offsets))
    p = sub.add_parser("delete", help="delete an inactive share group and its state")
    p.add_argument("--group", required=True, help="the share group")
    add_connection_options(p)
    p.set_defaults(run=_with_client(share_groups_admin.delete_group))
    p = sub.add_parser("delete-offsets", help="delete an inactive share group's state for some topics")
    p.add_argument("--group", required=True, help="the share group")
    p.add_argument("--topic", action="append", required=True, metavar="TOPIC", help="a topic (repeatable)")
    add_connection_options(p)
    p.set_defaults(run=_with_client(share_groups_admin.delete_offsets))
    return parser


def _body(argv: list[str]) -> int:
    try:
        return run_subcommand(_build_parser(), argv)
    except KafkaError as e:
        raise CliError(str(e)) from None


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_body, argv)


if __name__ == "__main__":
    sys.exit(main())
