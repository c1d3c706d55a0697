"""``rill share-groups reset-offsets``, ``delete`` and ``delete-offsets`` (kafka-share-groups.sh's
``--reset-offsets``, ``--delete`` and ``--delete-offsets``).

A reset computes a new start offset (SPSO) for each partition in scope (``--topic T[:P,P]``, repeatable, or
``--all-topics``: the partitions the group has a start offset for),
prints the plan (GROUP TOPIC PARTITION NEW-OFFSET) and writes it (AlterShareGroupOffsets) only with
``--execute``. Offsets outside a partition's log are moved to its nearest end, with a warning. Only a group
without members can be reset (or one that does not exist yet: the reset creates it); the broker checks again
when it writes.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from rill.cli._common import CliError, Table, print_json, print_table
from rill.cli.groups_reset import parse_datetime, parse_duration
from rill.client.client import KafkaClient
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.protocol.api import ApiKey

EARLIEST, LATEST = -2, -1


def add_reset_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--group", required=True, help="the share group")
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="T[:P,P]", help="topic, or some of its partitions")
    scope.add_argument("--all-topics", action="store_true", help="every partition the group has a start offset for")
    spec = p.add_mutually_exclusive_group(required=True)
    spec.add_argument("--to-earliest", action="store_true", help="the first offset still in the log")
    spec.add_argument("--to-latest", action="store_true", help="the log end offset (skip everything)")
    spec.add_argument("--to-offset", type=int, metavar="N", help="this offset in every partition")
    spec.add_argument("--to-datetime", metavar="DATETIME", help="the first record at or after YYYY-MM-DDTHH:mm:SS.sss")
    spec.add_argument("--by-duration", metavar="DURATION", help="the first record at or after now minus PnDTnHnMnS")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    mode.add_argument("--execute", action="store_true", help="write the new start offsets")


def _partitions(client: KafkaClient, specs: list[str]) -> list[TopicPartition]:
    out: list[TopicPartition] = []
    for spec in specs:
        name, _, parts = spec.partition(":")
        try:
            known = client.partitions_for(name)
        except KafkaError as e:
            if e.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise CliError(f"Topic {name} does not exist.") from None
            raise
        if not parts:
            out.extend(known)
            continue
        try:
            wanted = [int(p) for p in parts.split(",")]
        except ValueError:
            raise CliError(f"invalid --topic '{spec}': expected TOPIC or TOPIC:P,P") from None
        missing = [p for p in wanted if TopicPartition(name, p) not in known]
        if missing:
            raise CliError(f"Topic {name} has no partition {missing[0]} (it has {len(known)}).")
        out.extend(TopicPartition(name, p) for p in wanted)
    return sorted(dict.fromkeys(out), key=lambda tp: (tp.topic, tp.partition))


def _partitions_with_state(conn: Any, group: str) -> list[TopicPartition]:
    """The partitions the group has a start offset for (DescribeShareGroupOffsets)."""
    request = {"groups": [{"group_id": group, "topics": None}]}
    _, body = conn.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, request, version=0)
    described = body["groups"][0]
    if described["error_code"] not in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
        raise CliError(f"cannot describe the offsets of share group {group}: {ErrorCode(described['error_code']).name}")
    tps = [TopicPartition(t["topic_name"], p["partition_index"]) for t in described["topics"] for p in t["partitions"]
           if p["error_code"] == 0 and p["start_offset"] >= 0]  # fmt: skip
    return sorted(tps, key=lambda tp: (tp.topic, tp.partition))


def _offsets(client: KafkaClient, tps: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
    found = client.list_offsets(dict.fromkeys(tps, timestamp))
    missing = [tp for tp in tps if tp not in found]
    if missing:
        raise CliError(f"cannot list the offsets of {missing[0].topic}-{missing[0].partition}")
    return {tp: found[tp].offset for tp in tps}


def _plan(client: KafkaClient, args: argparse.Namespace, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    if args.to_earliest:
        return _offsets(client, tps, EARLIEST)
    latest = _offsets(client, tps, LATEST)
    if args.to_latest:
        return latest
    if args.to_offset is not None:
        earliest = _offsets(client, tps, EARLIEST)
        plan: dict[TopicPartition, int] = {}
        for tp in tps:
            offset = min(max(args.to_offset, earliest[tp]), latest[tp])
            if offset != args.to_offset:
                print(f"New offset ({args.to_offset}) is outside the log of {tp.topic}-{tp.partition} "
                      f"([{earliest[tp]}, {latest[tp]}]). Value will be set to {offset}", file=sys.stderr)  # fmt: skip
            plan[tp] = offset
        return plan
    if args.to_datetime is not None:
        ts = parse_datetime(args.to_datetime)
    else:
        ts = int(time.time() * 1000) - parse_duration(args.by_duration)
    found = _offsets(client, tps, ts)
    return {tp: latest[tp] if found[tp] < 0 else found[tp] for tp in tps}


def _members(conn: Any, group: str) -> int | None:
    """How many members the group has; None when it does not exist."""
    if ApiKey.SHARE_GROUP_DESCRIBE not in conn.api_versions:
        raise CliError("the broker does not serve share groups (ShareGroupDescribe)")
    _, body = conn.request(ApiKey.SHARE_GROUP_DESCRIBE, {"group_ids": [group], "include_authorized_operations": False},
                           version=1)  # fmt: skip
    described = body["groups"][0]
    code = ErrorCode(described["error_code"])
    if code == ErrorCode.GROUP_ID_NOT_FOUND:
        return None
    if code != ErrorCode.NONE:
        raise CliError(f"cannot describe share group {group}: {code.name}")
    return len(described["members"])


def reset_offsets(client: KafkaClient, args: argparse.Namespace) -> int:
    if args.to_datetime is not None:  # bad input is refused before the broker is asked anything
        parse_datetime(args.to_datetime)
    if args.by_duration is not None:
        parse_duration(args.by_duration)
    conn = client.coordinator(args.group)
    members = _members(conn, args.group)
    if members:
        raise CliError(f"Share group '{args.group}' is not empty: it has {members} member(s). Offsets can only be "
                       "reset when the group is inactive: stop its consumers first.")  # fmt: skip
    tps = _partitions(client, args.topic) if args.topic else _partitions_with_state(conn, args.group)
    plan = _plan(client, args, tps) if tps else {}
    if args.execute:
        _alter(conn, args.group, plan)
    elif not args.dry_run:
        print("WARN: dry run, no offset was changed: add --execute to write the new offsets "
              "(or --dry-run to only print them without this warning).", file=sys.stderr)  # fmt: skip
    rows = [(args.group, tp.topic, tp.partition, offset) for tp, offset in plan.items()]
    if args.json:
        print_json([{"group": g, "topic": t, "partition": p, "new_offset": o} for g, t, p, o in rows])
    else:
        print_table(Table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), rows))
    return 0


def _alter(conn: Any, group: str, plan: dict[TopicPartition, int]) -> None:
    if ApiKey.ALTER_SHARE_GROUP_OFFSETS not in conn.api_versions:
        raise CliError("the broker does not serve AlterShareGroupOffsets (Kafka 4.1 or later does)")
    topics: dict[str, list[dict[str, int]]] = {}
    for tp, offset in plan.items():
        topics.setdefault(tp.topic, []).append({"partition_index": tp.partition, "start_offset": offset})
    request = {"group_id": group, "topics": [{"topic_name": t, "partitions": ps} for t, ps in topics.items()]}
    _, body = conn.request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, request, version=0)
    top = ErrorCode(body["error_code"])
    if top == ErrorCode.NON_EMPTY_GROUP:
        raise CliError(f"Share group '{group}' is not empty: offsets can only be reset when the group is inactive: "
                       "stop its consumers first.")  # fmt: skip
    if top != ErrorCode.NONE:
        raise CliError(f"cannot reset the offsets of share group {group}: {top.name}: {body['error_message'] or ''}")
    failed = [f"{t['topic_name']}-{p['partition_index']}: {ErrorCode(p['error_code']).name}"
              + (f" ({p['error_message']})" if p["error_message"] else "")
              for t in body["responses"] for p in t["partitions"] if p["error_code"]]  # fmt: skip
    if failed:
        raise CliError(f"some start offsets of share group {group} were not reset: {'; '.join(failed)}")


def delete_group(client: KafkaClient, args: argparse.Namespace) -> int:
    conn = client.coordinator(args.group)
    if _members(conn, args.group) is None:  # never a consumer group of that id: DeleteGroups takes any type
        raise CliError(f"Share group '{args.group}' does not exist.")
    _, body = conn.request(ApiKey.DELETE_GROUPS, {"groups_names": [args.group]}, version=2)
    code = ErrorCode(body["results"][0]["error_code"])
    if code == ErrorCode.NON_EMPTY_GROUP:
        raise CliError(f"Share group '{args.group}' is not empty: stop its consumers before deleting it.")
    if code == ErrorCode.GROUP_ID_NOT_FOUND:
        raise CliError(f"Share group '{args.group}' does not exist.")
    if code != ErrorCode.NONE:
        raise CliError(f"cannot delete share group {args.group}: {code.name}")
    sys.stdout.write(f"Deletion of requested share groups ('{args.group}') was successful.\n")
    return 0


def delete_offsets(client: KafkaClient, args: argparse.Namespace) -> int:
    conn = client.coordinator(args.group)
    if ApiKey.DELETE_SHARE_GROUP_OFFSETS not in conn.api_versions:
        raise CliError("the broker does not serve DeleteShareGroupOffsets (Kafka 4.1 or later does)")
    request = {"group_id": args.group, "topics": [{"topic_name": t} for t in dict.fromkeys(args.topic)]}
    _, body = conn.request(ApiKey.DELETE_SHARE_GROUP_OFFSETS, request, version=0)
    top = ErrorCode(body["error_code"])
    if top == ErrorCode.NON_EMPTY_GROUP:
        raise CliError(f"Share group '{args.group}' is not empty: stop its consumers before deleting its offsets.")
    if top == ErrorCode.GROUP_ID_NOT_FOUND:
        raise CliError(f"Share group '{args.group}' does not exist.")
    if top != ErrorCode.NONE:
        raise CliError(f"cannot delete the offsets of share group {args.group}: {top.name}")
    rows = [(t["topic_name"], "Successful" if not t["error_code"] else f"Error: {ErrorCode(t['error_code']).name}")
            for t in body["responses"]]  # fmt: skip
    if args.json:
        print_json([{"topic": t, "status": s} for t, s in rows])
    else:
        print_table(Table(("TOPIC", "STATUS"), rows))
    failed = [f"{t}: {s[len('Error: ') :]}" for t, s in rows if s != "Successful"]
    if failed:
        raise CliError(f"some offsets of share group {args.group} were not deleted: {'; '.join(failed)}")
    return 0
