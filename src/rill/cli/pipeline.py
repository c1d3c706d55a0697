"""``rill pipeline``: the Spark jobs of the data pipeline.

    rill pipeline load  --topics T1,T2 --output PATH [--group G] [--schema-registry URL]
                                                                    load what is new into Parquet
    rill pipeline audit --audit-topic _audit --output PATH          compare audited counts with the load
    rill pipeline feed  --source T --target T2 --checkpoint DIR     per-minute counts as a derived feed

``load`` and ``feed`` run on Spark's ``--master`` (default ``local[*]``); any master Spark accepts works
(``spark://...``, ``yarn``). ``audit`` uses no Spark (it reads the published Parquet with pyarrow) and exits
with 0 when every audited window matches, 3 when some differ and 4 when there was nothing to check.

Each takes ``--command-config FILE``: the client properties of the other tools (Kafka's Java names:
``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``, PEM ``ssl.truststore.location`` ...). They
secure every connection of the job: the Spark source and sink (as ``kafka.``-prefixed options), the loader's
client (offsets, the ``--group`` commit) and the audit's. The file is checked before Spark starts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from rill.cli._client_security import rill_client_security
from rill.cli._common import CliError, add_subparsers, new_parser, run_main

EXIT_DIFFERENCES = 3
EXIT_NOTHING_CHECKED = 4


def _spark(master: str, app: str) -> Any:
    try:
        from rill.spark.session import build_session

        return build_session(master, app, {"spark.ui.showConsoleProgress": "true"})
    except ImportError:
        raise CliError("pyspark is not installed (pip install 'rill-broker[spark]')") from None


def _parser() -> argparse.ArgumentParser:
    parser = new_parser("rill pipeline", "Run a data pipeline job on Spark.")
    sub = add_subparsers(parser)

    def common(p: argparse.ArgumentParser, *, spark: bool = True) -> None:
        p.add_argument(
            "--bootstrap-server",
            default="127.0.0.1:9092",
            metavar="HOST:PORT",
            help="broker(s) to connect to, comma-separated (default 127.0.0.1:9092)",
        )
        p.add_argument(
            "--command-config",
            metavar="FILE",
            help="client properties (key=value lines, Kafka's names) with the TLS and SASL settings of every "
            "connection",
        )
        if spark:
            p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")

    load = sub.add_parser("load", help="load everything new in some topics into Parquet, exactly once")
    common(load)
    load.add_argument("--topics", required=True, help="comma-separated topics")
    load.add_argument("--output", required=True, metavar="PATH", help="output directory")
    load.add_argument("--group", help="also commit the loaded position as this consumer group's offsets")
    load.add_argument(
        "--schema-registry",
        metavar="URL",
        help="schema registry: topics with a <topic>-value (or -key) Avro subject load as typed columns",
    )

    audit = sub.add_parser("audit", help="compare audited counts with what the loader published (pyarrow, no Spark)")
    common(audit, spark=False)
    audit.add_argument("--audit-topic", default="_audit", help="topic of the audited counts (default _audit)")
    audit.add_argument("--output", required=True, metavar="PATH", help="the loader's output directory")

    feed = sub.add_parser("feed", help="stream per-minute counts of a topic into another topic")
    common(feed)
    feed.add_argument("--source", required=True, help="topic of events to count")
    feed.add_argument("--target", required=True, help="topic the per-minute counts are written to")
    feed.add_argument("--checkpoint", required=True, metavar="DIR", help="Spark checkpoint directory of the stream")
    feed.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    return parser


def _body(argv: list[str]) -> int:
    ns = _parser().parse_args(argv)
    security = rill_client_security(ns.command_config)  # a bad file is refused before Spark starts
    if ns.command == "load":
        from rill.spark.loader import run_load

        topics = [t.strip() for t in ns.topics.split(",") if t.strip()]
        if not topics:
            raise CliError("--topics names no topic")
        spark = _spark(ns.master, "rill-loader")
        try:
            run_load(
                spark,
                ns.bootstrap_server,
                topics,
                ns.output,
                group_id=ns.group,
                schema_registry=ns.schema_registry,
                security=security,
            )
        finally:
            spark.stop()
        return 0
    if ns.command == "audit":
        from rill.client import KafkaClient
        from rill.spark.audit import NothingToAudit, run_audit

        with KafkaClient(ns.bootstrap_server, client_id="rill-audit", security=security) as client:
            try:
                diffs = run_audit(client, ns.audit_topic, ns.output)
            except NothingToAudit as e:
                raise CliError(f"audit: {e}", EXIT_NOTHING_CHECKED) from None
        for d in diffs:
            print(f"MISMATCH {d}")
        print("audit: all windows match" if not diffs else f"audit: {len(diffs)} window(s) differ")
        return EXIT_DIFFERENCES if diffs else 0
    if ns.command == "feed":
        from rill.spark.feed import per_minute_counts

        spark = _spark(ns.master, "rill-feed")
        try:
            query = per_minute_counts(
                spark,
                ns.bootstrap_server,
                ns.source,
                ns.target,
                ns.checkpoint,
                available_now=ns.available_now,
                security=security,
            )
            query.awaitTermination()
        finally:
            spark.stop()
        return 0
    raise CliError(f"unknown command {ns.command}")


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_body, argv)


if __name__ == "__main__":
    sys.exit(main())
