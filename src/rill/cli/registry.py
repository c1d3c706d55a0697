"""``rill registry``: run a schema registry (Confluent's REST API) until SIGTERM or SIGINT.

Its state lives in the compacted topic ``_schemas`` of the cluster named by ``--bootstrap-server``
(created on first start); several registries on the same topic elect one leader that writes, the
others forward writes to it. When the HTTP listener is up it prints one line on stdout,
``rill registry ready on http://HOST:PORT``; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from rill.registry.election import DEFAULT_GROUP
from rill.registry.server import SchemaRegistry
from rill.registry.topic import DEFAULT_TOPIC

READY_PREFIX = "rill registry ready on "


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rill registry",
        description="Run a schema registry speaking Confluent's REST API, stored in a Rill topic.",
    )
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="the cluster to store in")
    parser.add_argument(
        "--listen", default="127.0.0.1:8081", metavar="HOST:PORT", help="HTTP address (default 127.0.0.1:8081)"
    )
    parser.add_argument("--topic", default=DEFAULT_TOPIC, help=f"the storage topic (default {DEFAULT_TOPIC})")
    parser.add_argument(
        "--group", default=DEFAULT_GROUP, help=f"the consumer group electing the leader (default {DEFAULT_GROUP})"
    )
    parser.add_argument(
        "--advertised-url", metavar="URL", help="the URL other instances forward writes to (default http://LISTEN)"
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="the least severe log lines shown on stderr (default INFO)",
    )
    return parser


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


async def _run(registry: SchemaRegistry) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await registry.start()
    print(READY_PREFIX + registry.url, flush=True)
    try:
        await stop.wait()
    finally:
        await registry.stop()


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    try:
        host, port = parse_listen(args.listen)
    except ValueError as e:
        print(f"rill registry: {e}", file=sys.stderr)
        return 2
    registry = SchemaRegistry(
        args.bootstrap_server,
        host=host,
        port=port,
        topic=args.topic,
        group=args.group,
        advertised_url=args.advertised_url,
    )
    asyncio.run(_run(registry))
    return 0
