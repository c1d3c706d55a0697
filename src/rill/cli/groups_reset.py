"""``rill groups reset`` and ``rill groups delete-offsets`` (kafka-consumer-groups.sh's ``--reset-offsets``
and ``--delete-offsets``).

A reset computes a new committed offset for each partition in scope (``--topic T[:P,P]``, repeatable, or
``--all-topics``: the partitions the group has offsets for), prints the plan (GROUP TOPIC PARTITION
NEW-OFFSET) and writes it only with ``--execute``. Offsets outside a partition's log are moved to its nearest
end, with a warning. Only an inactive group (Empty, or not yet existing) can be reset; every group is
checked before any is written.

``delete-offsets`` removes a group's committed offsets (OffsetDelete, which confluent-kafka's AdminClient
does not offer, so it is sent with Rill's own client). The broker refuses the offsets of a topic an active
group is subscribed to (GROUP_SUBSCRIBED_TO_TOPIC).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import datetime
from typing import Any

from rill.cli._common import (
    EXIT_USAGE,
    CliError,
    Table,
    print_json,
    print_table,
)
from rill.cli._group_admin import (
    TP,
    committed_offsets,
    describe_groups,
    log_offsets,
    result,
    state_name,
    target_groups,
    topic_partitions,
)
from rill.cli.configs import admin_client

INACTIVE_STATES = ("Empty", "Dead", "Unknown")

_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def add_reset_arguments(p: argparse.ArgumentParser) -> None:
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="T[:P,P]", help="topic, or some of its partitions")
    scope.add_argument("--all-topics", action="store_true", help="every partition the group has an offset for")
    spec = p.add_mutually_exclusive_group(required=True)
    spec.add_argument("--to-earliest", action="store_true", help="the first offset still in the log")
    spec.add_argument("--to-latest", action="store_true", help="the log end offset (skip everything)")
    spec.add_argument("--to-current", action="store_true", help="the committed offset (log end where none)")
    spec.add_argument("--to-offset", type=int, metavar="N", help="this offset in every partition")
    spec.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N (N may be negative)")
    spec.add_argument("--to-datetime", metavar="DATETIME", help="the first record at or after YYYY-MM-DDTHH:mm:SS.sss")
    spec.add_argument("--by-duration", metavar="DURATION", help="the first record at or after now minus PnDTnHnMnS")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    mode.add_argument("--execute", action="store_true", help="write the new offsets")


def parse_datetime(text: str) -> int:
    """``2024-05-01T12:00:00.000`` (local time), with an optional zone (``Z``, ``+02:00``): epoch ms."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(
            f"invalid --to-datetime '{text}': expected YYYY-MM-DDTHH:mm:SS.sss, optionally with a zone (Z, +01:00)",
            EXIT_USAGE,
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, as Kafka's tool reads a datetime without a zone
    return int(when.timestamp() * 1000)


def parse_duration(text: str) -> int:
    """An ISO-8601 duration as java.time.Duration reads it (``P1DT2H``, ``PT30M``, ``PT0.5S``): ms."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or not any(m.group(i) for i in (2, 3, 4, 5)) or text.strip().upper().endswith("T"):
        raise CliError(f"invalid --by-duration '{text}': expected PnDTnHnMnS (for example PT1H or P1DT12H)", EXIT_USAGE)
    sign, days, hours, minutes, seconds, fraction = m.groups()
    ms = (int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60) * 1000
    secs = int(seconds or 0)
    frac_ms = int((fraction or "0").ljust(3, "0")[:3])
    ms += secs * 1000 + (-frac_ms if (seconds or "").startswith("-") else frac_ms)
    return -ms if sign == "-" else ms


def _spec_timestamp(args: argparse.Namespace) -> int | None:
    if args.to_datetime is not None:
        return parse_datetime(args.to_datetime)
    if args.by_duration is not None:
        return int(time.time() * 1000) - parse_duration(args.by_duration)
    return None


def _within_log(admin: Any, wanted: dict[TP, int], timeout_s: float) -> dict[TP, int]:
    """As kafka-consumer-groups.sh: an offset past either end of its partition is moved to that end."""
    low = log_offsets(admin, wanted, "earliest", timeout_s)
    high = log_offsets(admin, wanted, "latest", timeout_s)
    out: dict[TP, int] = {}
    for tp, offset in wanted.items():
        name = f"{tp[0]}-{tp[1]}"
        if offset > high[tp]:
            print(f"New offset ({offset}) is higher than latest offset for topic partition {name}. "
                  f"Value will be set to {high[tp]}", file=sys.stderr)  # fmt: skip
            out[tp] = high[tp]
        elif offset < low[tp]:
            print(f"New offset ({offset}) is lower than earliest offset for topic partition {name}. "
                  f"Value will be set to {low[tp]}", file=sys.stderr)  # fmt: skip
            out[tp] = low[tp]
        else:
            out[tp] = offset
    return out


def _plan(
    admin: Any, args: argparse.Namespace, tps: list[TP], committed: dict[TP, int], ts: int | None
) -> dict[TP, int]:
    timeout = args.timeout
    if not tps:
        return {}
    if args.to_earliest:
        return log_offsets(admin, tps, "earliest", timeout)
    if args.to_latest:
        return log_offsets(admin, tps, "latest", timeout)
    if args.to_current:
        ends = log_offsets(admin, [tp for tp in tps if tp not in committed], "latest", timeout)
        return {tp: committed.get(tp, ends.get(tp, -1)) for tp in tps}
    if args.to_offset is not None:
        return _within_log(admin, {tp: args.to_offset for tp in tps}, timeout)
    if args.shift_by is not None:
        without = [f"{t}-{p}" for t, p in tps if (t, p) not in committed]
        if without:
            raise CliError(f"cannot shift the offset of {without[0]}: the group has no committed offset there")
        return _within_log(admin, {tp: committed[tp] + args.shift_by for tp in tps}, timeout)
    assert ts is not None
    found = log_offsets(admin, tps, ts, timeout)
    past_end = [tp for tp, offset in found.items() if offset < 0]
    ends = log_offsets(admin, past_end, "latest", timeout)
    for t, p in past_end:
        print(f"Warn: partition {p} of topic {t} has no record at or after {ts} ms; "
              f"using its log end offset {ends[(t, p)]}", file=sys.stderr)  # fmt: skip
        found[(t, p)] = ends[(t, p)]
    return {tp: found[tp] for tp in tps}


def _group_state(admin: Any, group: str, timeout_s: float) -> str:
    try:
        return state_name(describe_groups(admin, [group], timeout_s)[group].state)
    except CliError as e:
        if "GROUP_ID_NOT_FOUND" in e.message:  # a group that does not exist yet can be given offsets
            return "Dead"
        raise


def reset(args: argparse.Namespace) -> int:
    timestamp = _spec_timestamp(args)  # bad input is refused before the broker is asked anything
    admin = admin_client(args)
    groups = target_groups(admin, args)
    states = {g: _group_state(admin, g, args.timeout) for g in groups}
    busy = [(g, s) for g, s in states.items() if s not in INACTIVE_STATES]
    if busy:
        raise CliError(
            " ".join(
                f"Assignments can only be reset if the group '{g}' is inactive, but the current state is {s}."
                for g, s in busy
            )
        )
    explicit = topic_partitions(admin, args.topic, args.timeout) if args.topic else None
    plans: dict[str, dict[TP, int]] = {}
    for g in groups:
        committed = {tp: c.offset for tp, c in committed_offsets(admin, g, args.timeout).items()}
        tps = explicit if explicit is not None else sorted(committed)
        plans[g] = _plan(admin, args, tps, committed, timestamp)
    if args.execute:
        for g, plan in plans.items():
            if plan:
                _write_offsets(admin, g, plan, args.timeout)
    elif not args.dry_run:
        print("WARN: dry run, no offset was changed: add --execute to write the new offsets "
              "(or --dry-run to only print them without this warning).", file=sys.stderr)  # fmt: skip
    rows = [(g, t, p, o) for g, plan in plans.items() for (t, p), o in sorted(plan.items())]
    if args.json:
        print_json([{"group": g, "topic": t, "partition": p, "new_offset": o} for g, t, p, o in rows])
    else:
        print_table(Table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), rows))
    return 0


def _write_offsets(admin: Any, group: str, plan: dict[TP, int], timeout_s: float) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in sorted(plan.items())])
    future = admin.alter_consumer_group_offsets([request], request_timeout=timeout_s)[group]
    written = result(future, timeout_s, f"reset the offsets of group {group}")
    failed = [tp for tp in written.topic_partitions if tp.error is not None]
    if failed:
        tp = failed[0]
        raise CliError(f"cannot reset group {group}: {tp.topic}-{tp.partition}: {tp.error.name()}: {tp.error.str()}")


def delete_offsets(args: argparse.Namespace) -> int:
    from rill.cli._client_security import rill_client_security
    from rill.client import KafkaClient
    from rill.errors import ErrorCode, KafkaError
    from rill.protocol.api import ApiKey

    security = rill_client_security(args.command_config)
    admin = admin_client(args)
    tps = topic_partitions(admin, args.topic, args.timeout)
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    request = {
        "group_id": args.group,
        "topics": [{"name": t, "partitions": [{"partition_index": p} for p in ps]} for t, ps in by_topic.items()],
    }
    try:
        with KafkaClient(
            args.bootstrap_server, client_id="rill-groups", timeout_s=args.timeout, security=security
        ) as client:
            conn = client.coordinator(args.group)
            if ApiKey.OFFSET_DELETE not in conn.api_versions:
                raise CliError("the broker does not support OffsetDelete (Kafka 2.4 or later does)")
            _, body = conn.request(ApiKey.OFFSET_DELETE, request, version=0)
    except KafkaError as e:
        raise CliError(f"cannot delete offsets of group {args.group}: {e.message}") from None
    top = ErrorCode(body["error_code"])
    if top != ErrorCode.NONE:
        raise CliError(f"cannot delete offsets of group {args.group}: {top.name}")
    status = {
        (t["name"], p["partition_index"]): ErrorCode(p["error_code"]) for t in body["topics"] for p in t["partitions"]
    }
    rows = [(t, p, "Successful" if status.get((t, p)) == ErrorCode.NONE else f"Error: {status[(t, p)].name}")
            for t, p in sorted(status)]  # fmt: skip
    failed = [f"{t}-{p}: {text[len('Error: ') :]}" for t, p, text in rows if text != "Successful"]
    if args.json:
        print_json([{"topic": t, "partition": p, "status": s} for t, p, s in rows])
    else:
        if not failed:
            sys.stdout.write(f"Request succeeded for deleting offsets from group {args.group}.\n\n")
        print_table(Table(("TOPIC", "PARTITION", "STATUS"), rows))
    if failed:
        raise CliError(f"some offsets of group {args.group} were not deleted: {'; '.join(failed)}")
    return 0
