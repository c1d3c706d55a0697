"""``rill mirror``: copy topics, and the offsets of consumer groups, from one cluster to another (in the spirit
of MirrorMaker 2), until stopped.

    rill mirror --source dc1:9092 --target dc2:9092 --topics 'orders|payments\\..*'
    rill mirror --source dc1:9092 --target dc2:9092 --topics '.*' --groups 'billing-.*' --name dc1-to-dc2

Topics whose whole name matches ``--topics`` are created on the target with the source's partition count and
topic configs, and copied partition by partition, in order, from the earliest record on (or, with
``auto.offset.reset=latest`` in ``--source-config``, from the end of each partition when the mirror first takes
it); new matching topics and new partitions are picked up every ``--refresh-interval`` seconds. The offsets of
the groups matching ``--groups`` are translated to the target's offsets and committed there for groups that have
no members on the target, so a consumer group can move to the target and resume without missing records. Several
processes with the same ``--name`` share the work (they form a consumer group on the source). Delivery is at
least once: a mirror killed and started again resumes from its last committed position and may copy a few records
twice; with ``--exactly-once`` each batch is a transaction on the target holding the records and the new
position, so a consumer reading the target with ``read_committed`` sees each source record once.
SIGINT or SIGTERM stops it after committing what was copied.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType

from rill.cli._common import (
    EXIT_USAGE,
    CliError,
    ensure_reachable,
    new_parser,
    read_properties_file,
    run_main,
)
from rill.mirror import MirrorConfig, MirrorMaker, MirrorStats
from rill.mirror.client_settings import SettingError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _build_parser() -> argparse.ArgumentParser:
    parser = new_parser("rill mirror", "Copy topics and consumer group offsets from one cluster to another.")
    parser.add_argument("--source", required=True, metavar="HOST:PORT", help="bootstrap servers of the source")
    parser.add_argument("--target", required=True, metavar="HOST:PORT", help="bootstrap servers of the target")
    parser.add_argument("--topics", required=True, metavar="REGEX", help="topics to copy (whole-name match)")
    parser.add_argument("--groups", default=".*", metavar="REGEX",
                        help="consumer groups whose offsets are carried over (default: all)")  # fmt: skip
    parser.add_argument("--name", default="default",
                        help="the mirror's name: processes with the same name share the work (default 'default')")
    parser.add_argument("--exactly-once", action="store_true",
                        help="copy in transactions on the target (read it with read_committed)")
    parser.add_argument("--prefix", default="", help="prefix of the target topics' names (default: none)")
    parser.add_argument("--refresh-interval", type=float, default=10.0, metavar="SECONDS",
                        help="how often new topics, partitions and configs are looked for (default 10)")
    parser.add_argument("--source-config", metavar="FILE", help="client properties for the source (key=value)")
    parser.add_argument("--target-config", metavar="FILE", help="client properties for the target (key=value)")
    parser.add_argument("--metrics-port", type=int, metavar="PORT",
                        help="serve Prometheus metrics on 127.0.0.1:PORT")
    parser.add_argument("--status-interval", type=float, default=30.0, metavar="SECONDS",
                        help="print a status line on stderr this often (0: never; default 30)")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="how long to wait for each cluster at start (default 10)")
    return parser


class _Status:
    def __init__(self, interval_s: float) -> None:
        self._interval = interval_s
        self._next = time.monotonic() + interval_s

    def __call__(self, stats: MirrorStats) -> None:
        if self._interval <= 0 or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + self._interval
        sys.stderr.write(status_line(stats) + "\n")
        sys.stderr.flush()


def status_line(stats: MirrorStats) -> str:
    lag = sum(p.lag for p in stats.partitions.values() if p.position >= 0)
    avg = stats.latency_ms_avg
    return (
        f"copied {stats.records:,} records ({stats.bytes:,} bytes); copying {stats.assigned} partition(s);"
        f" lag {lag:,}; latency avg {avg:.0f} ms, max {stats.latency_ms_max:.0f} ms;"
        f" group offsets written {stats.group_offsets_written:,}"
    )


def _body(argv: list[str]) -> int:
    args = _build_parser().parse_args(argv)
    for option, pattern in (("--topics", args.topics), ("--groups", args.groups)):
        try:
            re.compile(pattern)
        except re.error as e:
            raise CliError(f"invalid {option} pattern {pattern!r}: {e}", EXIT_USAGE) from None
    try:
        config = MirrorConfig(
            source=args.source,
            target=args.target,
            topics=args.topics,
            groups=args.groups,
            name=args.name,
            prefix=args.prefix,
            exactly_once=args.exactly_once,
            refresh_interval_s=args.refresh_interval,
            source_props=read_properties_file(args.source_config) if args.source_config else {},
            target_props=read_properties_file(args.target_config) if args.target_config else {},
        )
    except SettingError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    ensure_reachable(args.source, args.timeout)
    ensure_reachable(args.target, args.timeout)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    mirror = MirrorMaker(config)
    if args.metrics_port is not None:
        from rill.mirror.mirror_metrics import serve_metrics

        port = serve_metrics(mirror, "127.0.0.1", args.metrics_port)
        sys.stderr.write(f"metrics at http://127.0.0.1:{port}/metrics\n")
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        mirror.run(stop, _Status(args.status_interval))
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    sys.stderr.write(status_line(mirror.stats) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_body, argv)


if __name__ == "__main__":
    sys.exit(main())
