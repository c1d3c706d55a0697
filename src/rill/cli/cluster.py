"""``rill cluster up``: a local replicated cluster in the foreground, for trying Rill's replication out.

    rill cluster up [--brokers 3] [--data DIR] [--override key=value ...]

Starts a ZooKeeper server (``rill.testing.zookeeper``: Debian's ``zookeeper`` package run by ``java``) and N
``rill broker`` processes on free 127.0.0.1 ports, prints their addresses and a ``bootstrap.servers`` line, and
runs until Ctrl-C or SIGTERM, when every broker stops in a controlled way and ZooKeeper with them. Without
``--data`` everything lives in a temporary directory removed at the end; with it, ZooKeeper's data and each
broker's logs are kept there (``zookeeper/``, ``broker-N/``), and a later ``up`` on the same directory starts
the same cluster again (on new ports). ``--override`` sets a broker config on every broker.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from rill.cli._common import (
    EXIT_USAGE,
    CliError,
    add_subparsers,
    new_parser,
    run_main,
    run_subcommand,
)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _overrides(items: Sequence[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise CliError(f"--override expects key=value, got {item!r}", EXIT_USAGE)
        out[name.strip()] = value.strip()
    return out


def _up(args: argparse.Namespace) -> int:
    from rill.config import ConfigError
    from rill.testing._configs import broker_configs
    from rill.testing.cluster import TestCluster

    if not 1 <= args.brokers <= 16:
        raise CliError(f"invalid --brokers {args.brokers}: must be between 1 and 16", EXIT_USAGE)
    try:
        overrides = broker_configs(_overrides(args.override))
    except ConfigError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    data = Path(args.data).resolve() if args.data else None
    if data is not None:
        data.mkdir(parents=True, exist_ok=True)
    cluster = TestCluster(args.brokers, overrides, data_dir=data)
    try:
        try:
            cluster.start()
        except (ConfigError, RuntimeError, OSError) as e:
            raise CliError(f"cannot start the cluster: {e}") from None
        out = sys.stdout
        out.write(f"zookeeper {cluster.zookeeper.connect_string}{cluster.chroot}\n")
        for i in cluster.brokers:
            out.write(f"broker {i} {cluster.broker(i).bootstrap_servers}\n")
        out.write(f"bootstrap.servers={cluster.bootstrap_servers}\n")
        out.write(f"rill cluster ready: {args.brokers} broker(s); Ctrl-C stops it\n")
        out.flush()
        while not stop.wait(0.5):
            pass
        started = time.monotonic()
        for i in cluster.brokers:
            if cluster.broker(i).running:
                cluster.stop(i)
        sys.stderr.write(f"rill cluster stopped in {time.monotonic() - started:.1f} s\n")
        return 0
    finally:
        cluster.close()
        for s, handler in previous.items():
            signal.signal(s, handler)


def _build_parser() -> argparse.ArgumentParser:
    parser = new_parser("rill cluster", "Run a local replicated cluster: ZooKeeper and N brokers on 127.0.0.1.")
    sub = add_subparsers(parser)
    p = sub.add_parser("up", help="start ZooKeeper and the brokers in the foreground; Ctrl-C stops them")
    p.add_argument("--brokers", type=int, default=3, metavar="N", help="number of brokers (default 3)")
    p.add_argument("--data", metavar="DIR", help="keep ZooKeeper's data and the brokers' logs in DIR")
    p.add_argument("--override", action="append", metavar="KEY=VALUE",
                   help="a broker config for every broker (repeatable)")  # fmt: skip
    p.set_defaults(run=_up)
    return parser


def _body(argv: list[str]) -> int:
    return run_subcommand(_build_parser(), argv)


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_body, argv)


if __name__ == "__main__":
    sys.exit(main())
