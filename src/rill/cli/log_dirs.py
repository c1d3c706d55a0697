"""``rill log-dirs``: the log dirs of brokers and the replicas in them, and moves between them (Kafka's
``kafka-log-dirs.sh`` and the ``log_dirs`` part of ``kafka-reassign-partitions.sh``).

    rill log-dirs describe [--broker-list 0,1] [--topic-list a,b] [--json]
    rill log-dirs move --reassignment-json-file FILE [--wait]

``describe`` asks each broker (DescribeLogDirs) and prints a row per replica: its log dir, size, offset lag,
and whether it is the future replica of a move under way; ``--json`` prints kafka-log-dirs.sh's JSON
(``{"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":...,"error":null,"partitions":[...]}]}]}``).

``move`` takes kafka-reassign-partitions.sh's JSON (``{"version":1,"partitions":[{"topic":"t","partition":0,
"replicas":[0],"log_dirs":["/data/b"]}]}``; ``log_dirs`` gives each replica's absolute log dir, or ``"any"``)
and asks each replica's broker to move it there (AlterReplicaLogDirs). A replica not on its broker yet is
placed in that dir when it is created. The replica lists are not changed here: a reassignment of replicas is
AlterPartitionReassignments' (``rill topics``). ``--wait`` waits until no replica named is still moving.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from rill.cli._client_security import rill_client_security
from rill.cli._common import (
    EXIT_USAGE,
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
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey

ANY = "any"


def _client(args: argparse.Namespace) -> KafkaClient:
    security = rill_client_security(args.command_config)
    ensure_reachable(args.bootstrap_server, args.timeout)
    return KafkaClient(args.bootstrap_server, client_id="rill-log-dirs", timeout_s=args.timeout, security=security)


def _csv(text: str | None) -> list[str] | None:
    return None if text is None else [x.strip() for x in text.split(",") if x.strip()]


def describe_log_dirs(
    client: KafkaClient, brokers: list[int] | None, topics: list[str] | None
) -> dict[int, list[dict[str, Any]]]:
    """Broker -> its DescribeLogDirs results (every partition of ``topics``, or all)."""
    md = client.refresh_metadata(topics if topics is not None else None)
    wanted = None
    if topics is not None:
        missing = [t for t in topics if t not in md.topics]
        if missing:
            raise CliError(f"no such topic: {', '.join(missing)}")
        wanted = [{"topic": t, "partitions": sorted(md.topics[t].partitions)} for t in topics]
    nodes = sorted(md.brokers) if brokers is None else brokers
    unknown = [n for n in nodes if n not in md.brokers]
    if unknown:
        raise CliError(f"broker(s) {unknown} are not in the cluster (brokers: {sorted(md.brokers)})")
    out: dict[int, list[dict[str, Any]]] = {}
    for node in nodes:
        _, body = client.connection(node).request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": wanted})
        if body.get("error_code"):
            raise CliError(f"broker {node}: DescribeLogDirs: {ErrorCode(body['error_code']).name}")
        out[node] = body["results"]
    return out


def _describe(args: argparse.Namespace) -> int:
    brokers = _csv(args.broker_list)
    try:
        nodes = None if brokers is None else [int(b) for b in brokers]
    except ValueError:
        raise CliError(f"--broker-list takes broker ids: {args.broker_list!r}", EXIT_USAGE) from None
    with _client(args) as client:
        described = describe_log_dirs(client, nodes, _csv(args.topic_list))
    if args.json:
        print_json({"version": 1, "brokers": [
            {"broker": node, "logDirs": [
                {"logDir": r["log_dir"],
                 "error": None if not r["error_code"] else ErrorCode(r["error_code"]).name,
                 "partitions": [{"partition": f"{t['name']}-{p['partition_index']}", "size": p["partition_size"],
                                 "offsetLag": p["offset_lag"], "isFuture": p["is_future_key"]}
                                for t in r["topics"] for p in t["partitions"]]}
                for r in results]}
            for node, results in described.items()]})  # fmt: skip
        return 0
    rows = []
    for node, results in described.items():
        for r in results:
            if r["error_code"]:
                rows.append((node, r["log_dir"], "", "", "", "", ErrorCode(r["error_code"]).name))
            for t in r["topics"]:
                for p in t["partitions"]:
                    rows.append((node, r["log_dir"], f"{t['name']}-{p['partition_index']}", p["partition_size"],
                                 p["offset_lag"], "yes" if p["is_future_key"] else "", ""))  # fmt: skip
    print_table(Table(("Broker", "LogDir", "Partition", "Size", "OffsetLag", "Future", "Error"), rows))
    return 0


def parse_moves(text: str) -> dict[int, dict[str, dict[TopicPartition, None]]]:
    """kafka-reassign-partitions.sh's JSON -> broker -> log dir -> the partitions to move there."""
    try:
        doc = json.loads(text)
        entries = doc["partitions"]
        moves: dict[int, dict[str, dict[TopicPartition, None]]] = defaultdict(lambda: defaultdict(dict))
        for e in entries:
            tp = TopicPartition(str(e["topic"]), int(e["partition"]))
            replicas = [int(r) for r in e["replicas"]]
            dirs = e.get("log_dirs")
            if dirs is None:
                continue
            if len(dirs) != len(replicas):
                raise CliError(f"{tp.topic}-{tp.partition}: log_dirs names {len(dirs)} dirs for "
                               f"{len(replicas)} replicas", EXIT_USAGE)  # fmt: skip
            for broker, d in zip(replicas, dirs, strict=True):
                if d != ANY:
                    moves[broker][str(d)][tp] = None
    except (ValueError, KeyError, TypeError) as e:
        raise CliError(f"not a reassignment JSON: {e}", EXIT_USAGE) from None
    return moves


def _move(args: argparse.Namespace) -> int:
    try:
        with open(args.reassignment_json_file, encoding="utf-8") as f:
            moves = parse_moves(f.read())
    except OSError as e:
        raise CliError(f"cannot read {args.reassignment_json_file}: {e}", EXIT_USAGE) from None
    if not moves:
        print("No log dir is named (every entry of log_dirs is \"any\"): nothing to move")
        return 0
    failed = 0
    moving: dict[int, set[TopicPartition]] = defaultdict(set)
    with _client(args) as client:
        for broker, by_dir in moves.items():
            body = {"dirs": [
                {"path": d, "topics": [{"name": topic, "partitions": [tp.partition for tp in tps if tp.topic == topic]}
                                       for topic in dict.fromkeys(tp.topic for tp in tps)]}
                for d, tps in by_dir.items()]}  # fmt: skip
            _, answer = client.connection(broker).request(ApiKey.ALTER_REPLICA_LOG_DIRS, body)
            for t in answer["results"]:
                for p in t["partitions"]:
                    tp, code = TopicPartition(t["topic_name"], p["partition_index"]), ErrorCode(p["error_code"])
                    where = next(d for d, tps in by_dir.items() if tp in tps)
                    name = f"{tp.topic}-{tp.partition}"
                    if code == ErrorCode.NONE:
                        print(f"Broker {broker}: {name} is in or moving to {where}")
                        moving[broker].add(tp)
                    elif code == ErrorCode.REPLICA_NOT_AVAILABLE:
                        print(f"Broker {broker}: {name} will be created in {where} (no replica there yet)")
                    else:
                        failed += 1
                        print(f"Broker {broker}: cannot move {name} to {where}: {code.name}")
        if args.wait and moving:
            _wait_for_moves(client, moving, args.wait_timeout)
    return 1 if failed else 0


def _wait_for_moves(client: KafkaClient, moving: dict[int, set[TopicPartition]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        left = []
        for broker, tps in moving.items():
            topics = sorted({tp.topic for tp in tps})
            for r in describe_log_dirs(client, [broker], topics)[broker]:
                left += [f"{t['name']}-{p['partition_index']}" for t in r["topics"] for p in t["partitions"]
                         if p["is_future_key"] and TopicPartition(t["name"], p["partition_index"]) in tps]  # fmt: skip
        if not left:
            print("Every move is done")
            return
        if time.monotonic() >= deadline:
            raise CliError(f"still moving after {timeout_s:g} s: {', '.join(sorted(left))}")
        time.sleep(0.5)


def _build_parser() -> argparse.ArgumentParser:
    parser = new_parser("rill log-dirs", "Describe brokers' log dirs and move replicas between them.")
    sub = add_subparsers(parser)

    p = sub.add_parser("describe", help="each broker's log dirs and the replicas in them")
    p.add_argument("--broker-list", metavar="IDS", help="comma-separated broker ids (default: every broker)")
    p.add_argument("--topic-list", metavar="TOPICS", help="comma-separated topics (default: every topic)")
    add_connection_options(p)
    p.set_defaults(run=_describe)

    p = sub.add_parser("move", help="move replicas to the log dirs a reassignment JSON names (its log_dirs)")
    p.add_argument("--reassignment-json-file", required=True, metavar="FILE", help="kafka-reassign-partitions's JSON")
    p.add_argument("--wait", action="store_true", help="wait until the moves are done")
    p.add_argument("--wait-timeout", type=float, default=600.0, metavar="SECONDS", help="how long --wait waits")
    add_connection_options(p, json_output=False)
    p.set_defaults(run=_move)
    return parser


def _body(argv: list[str]) -> int:
    if "--describe" in argv:  # kafka-log-dirs.sh's form, which prints its JSON
        argv = ["describe", *[a for a in argv if a not in ("--describe", "--json")], "--json"]
    try:
        return run_subcommand(_build_parser(), argv)
    except KafkaError as e:
        raise CliError(str(e)) from None


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
