"""``rill broker``: run a broker until SIGTERM or SIGINT.

With no arguments it serves a single node on 127.0.0.1:9092 with its data in ./rill-data.
``--config FILE`` reads a Kafka-style ``server.properties``; ``--override key=value`` (repeatable)
sets any config on top. When the listener is up it prints one line on stdout,
``rill broker ready on HOST:PORT``; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from rill.config import BrokerConfig, ConfigError, load_properties
from rill.network import run

log = logging.getLogger("rill.broker")

READY_PREFIX = "rill broker ready on "


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rill broker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", metavar="FILE", help="a Kafka-style server.properties file")
    parser.add_argument(
        "--override",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="set a broker config (repeatable), e.g. --override listeners=PLAINTEXT://127.0.0.1:0",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default: INFO"
    )
    return parser


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override expects key=value, got {item!r}")
        out[key.strip()] = value
    return out


def load_config(config_file: str | None, overrides: Sequence[str]) -> BrokerConfig:
    props: dict[str, str] = {}
    if config_file:
        try:
            props.update(load_properties(config_file))
        except OSError as e:
            raise ConfigError(f"cannot read {config_file}: {e.strerror or e}") from None
    props.update(parse_overrides(overrides))
    return BrokerConfig.from_properties(props)


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = load_config(args.config, args.override)
    except ConfigError as e:
        print(f"rill broker: {e}", file=sys.stderr)
        return 2
    for name in config.unknown:
        log.warning("Ignoring unknown config %s", name)
    settings = config.non_default()
    if settings:
        log.info("Configs set: %s", ", ".join(f"{k}={v}" for k, v in settings.items()))
    return run(serve(config))


async def serve(config: BrokerConfig) -> int:
    """Start a broker, announce it, and stop it cleanly on SIGTERM/SIGINT."""
    from rill.broker import Broker
    from rill.log.log_manager import LogDirInUseError

    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()

    def on_signal(signum: int) -> None:
        if stopping.is_set():
            log.warning("Already shutting down (signal %d)", signum)
        else:
            log.info("Received %s: shutting down", signal.Signals(signum).name)
            stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    broker = Broker(config)
    try:
        await broker.start()
    except OSError as e:
        print(f"rill broker: cannot start: {e.strerror or e}", file=sys.stderr)
        await _quiet_stop(broker)
        return 1
    except LogDirInUseError as e:
        print(f"rill broker: cannot start: {e}", file=sys.stderr)
        return 1
    host, port = broker.bound_address
    print(f"{READY_PREFIX}{host}:{port}", flush=True)
    await stopping.wait()
    await broker.stop()
    log.info("Broker stopped cleanly")
    return 0


async def _quiet_stop(broker: object) -> None:
    try:
        await broker.stop()  # type: ignore[attr-defined]
    except Exception:
        log.debug("stop after a failed start failed", exc_info=True)
