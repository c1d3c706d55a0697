"""``rill broker``: run a broker until SIGTERM or SIGINT.

With no arguments it serves a single node on 127.0.0.1:9092 with its data in ./rill-data.
``--config FILE`` reads a Kafka-style ``server.properties``; ``--override key=value`` (repeatable)
sets any config on top. When the listener is up it prints one line on stdout,
``rill broker ready on HOST:PORT``; logs go to stderr.

``--stop-on-stdin-eof`` ties the broker to the program that started it with stdin a pipe: when that
program exits or dies (even by SIGKILL) the pipe reaches end of file and the broker stops cleanly;
``--remove-on-stdin-eof DIR`` then also removes DIR (``rill.testing`` passes its temporary data
directory, which no one else would remove).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rill.config import BrokerConfig, ConfigError, closest_broker_config, load_properties
from rill.errors import KafkaError
from rill.fsutil import FileLock
from rill.network import run

log = logging.getLogger("rill.broker")

READY_PREFIX = "rill broker ready on "


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rill broker",
        description="Run a broker until SIGTERM or SIGINT. With no options it serves a single node on "
        "127.0.0.1:9092 with its data in ./rill-data.",
    )
    parser.add_argument("--config", metavar="FILE", help="a Kafka-style server.properties file")
    parser.add_argument(
        "--override",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="set a broker config (repeatable), e.g. --override listeners=PLAINTEXT://127.0.0.1:0",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="the least severe log lines shown on stderr (default INFO)",
    )
    parser.add_argument(
        "--stop-on-stdin-eof",
        action="store_true",
        help="stop cleanly when stdin reaches end of file (run with stdin a pipe from the program the broker "
        "must not outlive)",
    )
    parser.add_argument(
        "--schema-registry",
        metavar="HOST:PORT",
        help="also serve a schema registry (Confluent's REST API, as rill registry does) on HOST:PORT, stored in this "
        "broker's _schemas topic",
    )
    parser.add_argument(
        "--remove-on-stdin-eof",
        metavar="DIR",
        help="implies --stop-on-stdin-eof; after stopping on end of file, remove DIR (a temporary data directory)",
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
        # Kafka starts with names it does not know (plugins read their own), so this is a warning.
        nearest = closest_broker_config(name)
        hint = f" (did you mean {nearest}?)" if nearest else ""
        log.warning("Ignoring unknown config %s%s", name, hint)
    settings = config.non_default()
    if settings:
        log.info("Configs set: %s", ", ".join(f"{k}={v}" for k, v in settings.items()))
    remove = Path(args.remove_on_stdin_eof) if args.remove_on_stdin_eof else None
    registry = None
    if args.schema_registry:
        from rill.cli.registry import parse_listen

        try:
            registry = parse_listen(args.schema_registry)
        except ValueError as e:
            print(f"rill broker: --schema-registry: {e}", file=sys.stderr)
            return 2
    stop_on_eof = args.stop_on_stdin_eof or remove is not None
    return run(serve(config, stop_on_stdin_eof=stop_on_eof, remove_dir=remove, registry=registry))


async def serve(
    config: BrokerConfig,
    *,
    stop_on_stdin_eof: bool = False,
    remove_dir: Path | None = None,
    registry: tuple[str, int] | None = None,
) -> int:
    """Start a broker, announce it, and stop it cleanly on SIGTERM/SIGINT (and, with
    ``stop_on_stdin_eof``, when stdin reaches end of file; then ``remove_dir`` is removed).
    ``registry``: also serve a schema registry on that address, on this event loop, stopped first."""
    from rill.broker import Broker
    from rill.log.log_manager import LogDirInUseError

    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    orphaned: list[str] = []  # why the broker stops on its own: its parent is gone

    def on_orphaned(why: str) -> None:
        if not orphaned:
            orphaned.append(why)
            log.info("%s: shutting down", why)
            stopping.set()

    if stop_on_stdin_eof:
        _watch_stdin(loop, lambda: on_orphaned("stdin closed (the program that started the broker is gone)"))

    def on_signal(signum: int) -> None:
        if stopping.is_set():
            log.warning("Already shutting down (signal %d)", signum)
        else:
            log.info("Received %s: shutting down", signal.Signals(signum).name)
            stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    broker = Broker(config)
    claimed = claim_missing_data_dirs(config)
    try:
        await broker.start()  # a failed start releases what it took
    except BaseException as e:
        remove_claimed_data_dirs(claimed, config)  # and the data directories made for it go too
        if isinstance(e, socket.gaierror):
            host = config.listener_address[0]
            print(
                f"rill broker: cannot start: cannot resolve the listener host {host!r}: {e.strerror}", file=sys.stderr
            )
        elif isinstance(e, OSError):
            print(f"rill broker: cannot start: {describe_os_error(e)}", file=sys.stderr)
        elif isinstance(e, LogDirInUseError | KafkaError | ConfigError):
            print(f"rill broker: cannot start: {e}", file=sys.stderr)
        elif isinstance(e, Exception):  # unforeseen: what the start was doing, and where
            where = f" in {config.log_dirs[0]}" if broker.step == "loading the metadata" else ""
            print(f"rill broker: cannot start: {broker.step}{where}: {e or type(e).__name__}", file=sys.stderr)
        else:
            raise
        return 1
    host, port = broker.bound_address
    if not stopping.is_set():
        try:
            print(f"{READY_PREFIX}{host}:{port}", flush=True)
        except BrokenPipeError:  # no one reads stdout any more
            _silence_stdout()
            on_orphaned("stdout closed (the program that started the broker is gone)")
    schema_registry = None
    if registry is not None and not stopping.is_set():
        from rill.registry.server import SchemaRegistry

        schema_registry = SchemaRegistry(f"{host}:{port}", host=registry[0], port=registry[1])
        try:
            await schema_registry.start()
            print(f"rill registry ready on {schema_registry.url}", flush=True)
        except Exception as e:
            log.error("The schema registry did not start: %s", e)
            await schema_registry.stop()
            schema_registry = None
    await stopping.wait()
    if schema_registry is not None:
        await schema_registry.stop()
    await broker.stop()
    log.info("Broker stopped cleanly")
    if orphaned and remove_dir is not None:
        shutil.rmtree(remove_dir, ignore_errors=True)
    return 0


def claim_missing_data_dirs(config: BrokerConfig) -> list[Path]:
    """Make the data directories that do not exist yet; returns the outermost directory each one made
    (what a failed start removes). A directory another process makes meanwhile is not claimed."""
    claimed: list[Path] = []
    for d in config.log_dirs:
        path = Path(d).absolute()
        if path.exists():
            continue
        top = path
        while not top.parent.exists():
            top = top.parent
        try:
            top.mkdir()  # fails if it exists now: then it is not ours
            claimed.append(top)
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue  # the start says what is wrong with it
    return claimed


def remove_claimed_data_dirs(claimed: list[Path], config: BrokerConfig) -> None:
    """Remove what ``claim_missing_data_dirs`` made, unless a broker process is using one of its log dirs."""
    from rill.log.log_manager import LOCK_FILE

    for top in claimed:
        locks: list[FileLock] = []
        try:
            inside = [Path(d).absolute() for d in config.log_dirs if Path(d).absolute().is_relative_to(top)]
            for log_dir in inside:
                if log_dir.is_dir():
                    lock = FileLock(log_dir / LOCK_FILE)
                    if not lock.try_lock():
                        break
                    locks.append(lock)
            else:
                shutil.rmtree(top, ignore_errors=True)
        except OSError:
            pass  # left in place
        finally:
            for lock in locks:
                lock.release()


def describe_os_error(e: OSError) -> str:
    """``e``'s message with the file it names (``strerror`` alone leaves the path out)."""
    text = e.strerror or str(e)
    if e.filename is not None:
        text += f": {e.filename}"
    return text


def _watch_stdin(loop: asyncio.AbstractEventLoop, on_eof: Callable[[], None]) -> None:
    """Call ``on_eof`` when stdin reaches end of file (what is read before is dropped)."""
    fd = sys.stdin.fileno()

    def readable() -> None:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            on_eof()

    loop.add_reader(fd, readable)


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
