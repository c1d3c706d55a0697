"""``rill transactions``: inspect transactions and abort hanging ones (Kafka's ``kafka-transactions.sh``).

    rill transactions list
    rill transactions describe --transactional-id ID
    rill transactions describe-producers --topic T --partition P [--broker-id N]
    rill transactions abort --topic T --partition P (--start-offset O |
                            --producer-id ID --producer-epoch E --coordinator-epoch C)
    rill transactions find-hanging (--broker-id N | --topic T [--partition P]) [--max-transaction-timeout MIN]

As in Kafka, ``--bootstrap-server`` may come before the command too (``rill transactions --bootstrap-server B
list``). ``abort`` writes an abort marker for one producer on one partition (WriteTxnMarkers to its leader):
the way out of a hanging transaction, one whose coordinator no longer knows it, which holds back the last
stable offset and so every read_committed consumer. ``find-hanging`` lists the transactions open on a
broker's partitions for longer than ``--max-transaction-timeout`` minutes (default 15, Kafka's
``transaction.max.timeout.ms``; fractions allowed) whose producer has no transaction in progress at its
coordinator that includes the partition.

These APIs are not in confluent-kafka's AdminClient: the command speaks the protocol with ``rill.client``, which
takes the TLS and SASL settings of ``--command-config`` (Kafka's Java client names, PEM stores).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

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
from rill.cli._txn_admin import (
    abort_transaction,
    describe_producers,
    describe_transactions,
    find_hanging,
    list_transactions,
    partitions_led_by,
)
from rill.client.client import KafkaClient
from rill.common import TopicPartition
from rill.errors import KafkaError

DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15.0  # transaction.max.timeout.ms's default, 900000 ms


def _client(args: argparse.Namespace) -> KafkaClient:
    security = rill_client_security(args.command_config)
    ensure_reachable(args.bootstrap_server, args.timeout)
    return KafkaClient(args.bootstrap_server, client_id="rill-transactions", timeout_s=args.timeout, security=security)


def _list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        listed = list_transactions(client)
    if args.json:
        print_json(
            [
                {"transactional_id": t.transactional_id, "coordinator": t.coordinator, "producer_id": t.producer_id,
                 "state": t.state}
                for t in listed
            ]
        )  # fmt: skip
    else:
        rows = [(t.transactional_id, t.coordinator, t.producer_id, t.state) for t in listed]
        print_table(Table(("TransactionalId", "Coordinator", "ProducerId", "TransactionState"), rows))
    return 0


def _describe(args: argparse.Namespace) -> int:
    with _client(args) as client:
        (d,) = describe_transactions(client, [args.transactional_id])
    now = int(time.time() * 1000)
    started = d.start_time_ms if d.start_time_ms >= 0 else None
    duration = now - d.start_time_ms if started is not None else None
    partitions = [f"{tp.topic}-{tp.partition}" for tp in d.partitions]
    if args.json:
        print_json(
            {
                "coordinator": d.coordinator,
                "transactional_id": d.transactional_id,
                "producer_id": d.producer_id,
                "producer_epoch": d.producer_epoch,
                "state": d.state,
                "timeout_ms": d.timeout_ms,
                "start_time_ms": started,
                "duration_ms": duration,
                "partitions": partitions,
            }
        )
        return 0
    headers = (
        "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
        "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions",
    )  # fmt: skip
    row = (
        d.coordinator, d.transactional_id, d.producer_id, d.producer_epoch, d.state, d.timeout_ms, started,
        duration, partitions,
    )  # fmt: skip
    print_table(Table(headers, [row]))
    return 0


def _describe_producers(args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    with _client(args) as client:
        states = describe_producers(client, [tp], args.broker_id).get(tp, [])
    if args.json:
        print_json(
            [
                {"producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
                 "coordinator_epoch": s.coordinator_epoch, "last_sequence": s.last_sequence,
                 "last_timestamp": s.last_timestamp, "current_transaction_start_offset": s.current_txn_start_offset}
                for s in states
            ]
        )  # fmt: skip
        return 0
    headers = (
        "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
        "CurrentTransactionStartOffset",
    )  # fmt: skip
    rows = [
        (s.producer_id, s.producer_epoch, s.coordinator_epoch, s.last_sequence, s.last_timestamp,
         s.current_txn_start_offset if s.current_txn_start_offset >= 0 else "None")
        for s in states
    ]  # fmt: skip
    print_table(Table(headers, rows))
    return 0


def _abort(args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    by_offset = args.start_offset is not None
    by_ids = [v is not None for v in (args.producer_id, args.producer_epoch, args.coordinator_epoch)]
    if by_offset == any(by_ids) or (any(by_ids) and not all(by_ids)):
        raise CliError(
            "give either --start-offset or all of --producer-id, --producer-epoch and --coordinator-epoch",
            EXIT_USAGE,
        )
    with _client(args) as client:
        if by_offset:
            states = describe_producers(client, [tp]).get(tp, [])
            found = [s for s in states if s.current_txn_start_offset == args.start_offset]
            if not found:
                raise CliError(f"no transaction of {tp.topic}-{tp.partition} starts at offset {args.start_offset}")
            s = found[0]
            pid, epoch, coordinator_epoch = s.producer_id, s.producer_epoch, s.coordinator_epoch
        else:
            pid, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
        abort_transaction(client, tp, pid, epoch, coordinator_epoch)
    print(f"Aborted the transaction of producer {pid} (epoch {epoch}) on {tp.topic}-{tp.partition}")
    return 0


def _find_hanging(args: argparse.Namespace) -> int:
    if (args.broker_id is None) == (args.topic is None):
        raise CliError("give --broker-id or --topic", EXIT_USAGE)
    if args.partition is not None and args.topic is None:
        raise CliError("--partition needs --topic", EXIT_USAGE)
    if args.max_transaction_timeout < 0:
        raise CliError("--max-transaction-timeout must not be negative", EXIT_USAGE)
    max_ms = int(args.max_transaction_timeout * 60_000)
    with _client(args) as client:
        if args.topic is not None:
            tps = (
                [TopicPartition(args.topic, args.partition)]
                if args.partition is not None
                else client.partitions_for(args.topic)
            )
        else:
            tps = partitions_led_by(client, args.broker_id)
        hanging = find_hanging(client, tps, max_ms, args.broker_id) if tps else []
    now = int(time.time() * 1000)
    if args.json:
        print_json(
            [
                {"topic": h.tp.topic, "partition": h.tp.partition, "producer_id": h.producer.producer_id,
                 "producer_epoch": h.producer.producer_epoch, "coordinator_epoch": h.producer.coordinator_epoch,
                 "start_offset": h.producer.current_txn_start_offset, "last_timestamp": h.producer.last_timestamp,
                 "duration_min": (now - h.producer.last_timestamp) // 60_000}
                for h in hanging
            ]
        )  # fmt: skip
        return 0
    headers = (
        "Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp",
        "Duration(min)",
    )  # fmt: skip
    rows = [
        (h.tp.topic, h.tp.partition, h.producer.producer_id, h.producer.producer_epoch,
         h.producer.coordinator_epoch, h.producer.current_txn_start_offset, h.producer.last_timestamp,
         (now - h.producer.last_timestamp) // 60_000)
        for h in hanging
    ]  # fmt: skip
    print_table(Table(headers, rows))
    return 0


def _build_parser() -> argparse.ArgumentParser:
    parser = new_parser("rill transactions", "Inspect transactions and abort hanging ones.")
    sub = add_subparsers(parser)

    p = sub.add_parser("list", help="the transactions every broker coordinates")
    add_connection_options(p)
    p.set_defaults(run=_list)

    p = sub.add_parser("describe", help="one transaction, as its coordinator knows it")
    p.add_argument("--transactional-id", required=True, metavar="ID", help="the transactional id")
    add_connection_options(p)
    p.set_defaults(run=_describe)

    p = sub.add_parser("describe-producers", help="the producers a partition knows, and their open transactions")
    p.add_argument("--topic", required=True, help="the topic")
    p.add_argument("--partition", required=True, type=int, help="the partition")
    p.add_argument("--broker-id", type=int, metavar="N", help="ask this broker (default: the partition's leader)")
    add_connection_options(p)
    p.set_defaults(run=_describe_producers)

    p = sub.add_parser("abort", help="write an abort marker for a producer's open transaction on a partition")
    p.add_argument("--topic", required=True, help="the topic")
    p.add_argument("--partition", required=True, type=int, help="the partition")
    p.add_argument("--start-offset", type=int, metavar="O", help="the transaction's first offset in the partition")
    p.add_argument("--producer-id", type=int, metavar="ID", help="the producer (see describe-producers)")
    p.add_argument("--producer-epoch", type=int, metavar="E", help="the producer's epoch")
    p.add_argument("--coordinator-epoch", type=int, metavar="C", help="the producer's latest coordinator epoch")
    add_connection_options(p, json_output=False)
    p.set_defaults(run=_abort)

    p = sub.add_parser("find-hanging", help="transactions open too long that no coordinator has in progress")
    p.add_argument("--broker-id", type=int, metavar="N", help="look at the partitions this broker leads")
    p.add_argument("--topic", help="look at this topic's partitions (or --partition's)")
    p.add_argument("--partition", type=int, help="only this partition of --topic")
    p.add_argument(
        "--max-transaction-timeout", type=float, default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN, metavar="MINUTES",
        help="how old an open transaction must be (default 15, transaction.max.timeout.ms)",
    )  # fmt: skip
    add_connection_options(p)
    p.set_defaults(run=_find_hanging)
    return parser


COMMANDS = ("list", "describe", "describe-producers", "abort", "find-hanging")


def _command_first(argv: list[str]) -> list[str]:
    """Kafka's tool takes the connection options before the command: move them after it."""
    for i, arg in enumerate(argv):
        if arg in COMMANDS:
            return [arg, *argv[i + 1 :], *argv[:i]] if i else argv
    return argv


def _body(argv: list[str]) -> int:
    try:
        return run_subcommand(_build_parser(), _command_first(argv))
    except KafkaError as e:
        raise CliError(str(e)) from None


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_body, argv)


if __name__ == "__main__":
    sys.exit(main())
