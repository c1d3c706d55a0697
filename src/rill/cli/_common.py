"""Helpers shared by the ``rill`` subcommands.

Every subcommand talks to a Kafka-protocol broker through confluent-kafka and follows the same habits:

- ``--bootstrap-server HOST:PORT[,HOST:PORT...]`` (default ``127.0.0.1:9092``) and ``--command-config FILE``
  (client properties, one ``key=value`` a line, as in Kafka's tools);
- the broker is probed with a plain TCP connect bounded by ``--timeout`` seconds before a client is built,
  so an unreachable broker gives one line ("cannot reach broker at ...") instead of endless client retries;
- librdkafka's own log lines go to a silent logger unless ``--verbose`` is given;
- any error ends the command with ONE line on stderr (``error: ...``) and a non-zero exit code;
- tables are padded for a terminal, and ``--json`` prints the same data for scripts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, NoReturn, TextIO

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT_S = 8.0

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """An error the user should see as one line; ``exit_code`` is the process status."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class _ArgumentParser(argparse.ArgumentParser):
    """argparse that reports usage errors as a ``CliError`` (one line, exit code 2)."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see '{self.prog} --help')", EXIT_USAGE)


def new_parser(prog: str, description: str) -> argparse.ArgumentParser:
    return _ArgumentParser(prog=prog, description=description)


def add_subparsers(parser: argparse.ArgumentParser) -> Any:
    """Subcommand table whose parsers share the one-line error behaviour."""
    return parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_ArgumentParser, required=True)


def add_connection_options(parser: argparse.ArgumentParser, *, json_output: bool = True) -> None:
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--bootstrap-server",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help=f"broker(s) to connect to, comma-separated (default {DEFAULT_BOOTSTRAP})",
    )
    group.add_argument(
        "--command-config",
        metavar="FILE",
        help="file of client properties (key=value lines) passed to librdkafka",
    )
    group.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long to wait for the broker (default {DEFAULT_TIMEOUT_S:g})",
    )
    group.add_argument("--verbose", action="store_true", help="show the client library's log lines on stderr")
    if json_output:
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


# --------------------------------------------------------------------------------------------- client config


def parse_key_value(text: str, what: str, exit_code: int = EXIT_USAGE) -> tuple[str, str]:
    """``key=value`` split in two; a malformed argument is a usage error (a file's line passes ``EXIT_ERROR``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise CliError(f"invalid {what} '{text}': expected key=value", exit_code)
    return key.strip(), value


def parse_config_list(items: Iterable[str] | None, what: str = "config") -> dict[str, str]:
    """Parse Kafka-style ``k1=v1,k2=[a,b]`` lists (repeatable); brackets group values holding commas."""
    result: dict[str, str] = {}
    for item in items or ():
        for part in split_outside_brackets(item):
            if not part.strip():
                continue
            key, value = parse_key_value(part, what)
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            result[key] = value
    return result


def split_outside_brackets(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]" and depth:
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def read_properties_file(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}") from None
    props: dict[str, str] = {}
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "!")):
            continue
        key, value = parse_key_value(stripped, f"property in {path}", EXIT_ERROR)
        props[key] = value.strip()
    return props


def client_logger(verbose: bool) -> logging.Logger:
    """A logger for librdkafka: silent unless ``verbose``, so errors reach the user only as our one line."""
    logger = logging.getLogger("rill.cli.client")
    logger.propagate = False
    if not logger.handlers:
        if verbose:
            handler: logging.Handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(message)s"))
        else:
            handler = logging.NullHandler()
        logger.addHandler(handler)
    return logger


def client_config(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Base librdkafka config from the connection options (bootstrap, timeouts, logger, command config)."""
    timeout_ms = max(1000, int(args.timeout * 1000))
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "logger": client_logger(args.verbose),
        "socket.connection.setup.timeout.ms": timeout_ms,
    }
    if args.command_config:
        from rill.cli._client_security import librdkafka_security  # Java-style names turned into librdkafka's

        conf.update(librdkafka_security(read_properties_file(args.command_config)))
    if extra:
        conf.update(extra)
    return conf


# ----------------------------------------------------------------------------------------------- reachability


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    addresses: list[tuple[str, int]] = []
    for raw in bootstrap.split(","):
        entry = raw.strip()
        if not entry:
            continue
        if "://" in entry:
            entry = entry.split("://", 1)[1]
        host, sep, port_text = entry.rpartition(":")
        if not sep or not host:
            raise CliError(f"invalid bootstrap server '{raw.strip()}': expected HOST:PORT", EXIT_USAGE)
        try:
            port = int(port_text)
        except ValueError:
            raise CliError(f"invalid bootstrap server '{raw.strip()}': port is not a number", EXIT_USAGE) from None
        if not 0 < port < 65536:
            raise CliError(f"invalid bootstrap server '{raw.strip()}': port out of range", EXIT_USAGE)
        addresses.append((host.strip("[]"), port))
    if not addresses:
        raise CliError("no bootstrap server given", EXIT_USAGE)
    return addresses


def ensure_reachable(bootstrap: str, timeout_s: float, stop: StopSignals | None = None) -> None:
    """Fail with one line unless at least one bootstrap address accepts a TCP connection in time (returns early
    once ``stop`` has a signal)."""
    deadline = time.monotonic() + timeout_s
    addresses = parse_bootstrap(bootstrap)
    while stop is None or not stop.requested:
        for host, port in addresses:
            remaining = deadline - time.monotonic()
            try:
                with socket.create_connection((host, port), timeout=max(0.2, min(remaining, 2.0))):
                    return
            except OSError:
                continue
        if time.monotonic() >= deadline:
            raise CliError(f"cannot reach broker at {bootstrap} (waited {timeout_s:g} s)")
        time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))


# ------------------------------------------------------------------------------------------- error handling


def describe_kafka_exception(exc: BaseException) -> str:
    """One readable line for a confluent-kafka exception (``NAME: text``)."""
    err = exc.args[0] if exc.args else None
    if err is not None and hasattr(err, "name") and hasattr(err, "str"):
        name = str(err.name())
        text = str(err.str())
        if name in ("_TRANSPORT", "_ALL_BROKERS_DOWN"):
            return f"lost connection to the broker: {text}"
        if name == "_TIMED_OUT":
            return f"timed out waiting for the broker: {text}"
        return f"{name}: {text}" if name and name not in text else text
    return str(exc) or type(exc).__name__


def kafka_error_name(exc: BaseException) -> str:
    err = exc.args[0] if exc.args else None
    if err is not None and hasattr(err, "name"):
        return str(err.name())
    return ""


def kafka_tool_form(argv: list[str], actions: Mapping[str, str], name_option: str | None = None) -> list[str]:
    """Kafka's tools name the action with a flag and the object with an option (``kafka-topics.sh --create
    --topic T --partitions 3``); that form becomes the subcommand form (``create T --partitions 3``). An
    argv without one of ``actions`` comes back unchanged."""
    given = [a for a in argv if a in actions]
    if not given:
        return argv
    if len(given) > 1:
        raise CliError(f"give one action, not {' and '.join(given)}", EXIT_USAGE)
    rest: list[str] = []
    names: list[str] = []
    args = iter(a for a in argv if a != given[0])
    for arg in args:
        if name_option is not None and arg == name_option:
            name = next(args, None)
            if name is None:
                raise CliError(f"{name_option} needs a value", EXIT_USAGE)
            names.append(name)
        elif name_option is not None and arg.startswith(name_option + "="):
            names.append(arg.partition("=")[2])
        else:
            rest.append(arg)
    return [actions[given[0]], *names, *rest]


class StopSignals:
    """SIGINT and SIGTERM while a command works only set a flag that its loop checks (between polls, between
    chunks of input); a second signal exits at once, for a close or a flush that does not finish.

    A handler that raised (Python's KeyboardInterrupt, or SIGTERM's default of dying on the spot) would land
    inside whatever runs: a librdkafka call, a rebalance callback, a close or a flush. A consumer killed that way
    never leaves its group (it stays a member, Stable, for session.timeout.ms), and a producer loses the records
    it had queued. Here the ending always runs from plain Python after the loop."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread (an embedding caller keeps its own)
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is not None:
            os._exit(128 + signum)
        self.signum = signum

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        return 0 if self.signum is None else 128 + self.signum


def run_subcommand(parser: argparse.ArgumentParser, argv: list[str]) -> int:
    """Parse ``argv`` and run the function the chosen subcommand set as its ``run`` default."""
    args = parser.parse_args(argv)
    result: int = args.run(args)
    return result


def run_main(body: Callable[[list[str]], int], argv: Sequence[str] | None) -> int:
    """Run a subcommand body, turning every failure into one line on stderr and an exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return body(args)
    except CliError as e:
        _print_error(e.message)
        return e.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_OK
    except Exception as e:
        if type(e).__module__.startswith("confluent_kafka") or type(e).__name__ == "KafkaException":
            _print_error(describe_kafka_exception(e))
        else:
            _print_error(describe_exception(e))
        return EXIT_ERROR


def describe_exception(e: BaseException) -> str:
    """The message of ``e`` for a user: no class name; an OS error with the file it names."""
    if isinstance(e, OSError) and e.strerror:
        names = [str(f) for f in (e.filename, e.filename2) if f is not None]
        return ": ".join([e.strerror, *names])
    return str(e) or type(e).__name__


def _print_error(message: str) -> None:
    line = " ".join(message.split())
    try:
        sys.stderr.write(f"error: {line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _silence_stdout() -> None:
    # After EPIPE, route stdout to /dev/null so the interpreter's final flush does not fail again.
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def wait_future(future: Any, timeout_s: float, what: str) -> Any:
    """``future.result`` bounded in time, with a one-line error on timeout."""
    import concurrent.futures

    try:
        return future.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        raise CliError(f"timed out after {timeout_s:g} s waiting for the broker to {what}") from None


# ----------------------------------------------------------------------------------------------- output


@dataclass(frozen=True, slots=True)
class Table:
    headers: tuple[str, ...]
    rows: list[tuple[Any, ...]]

    def render(self) -> str:
        cells = [list(self.headers)] + [[_cell(v) for v in row] for row in self.rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(self.headers))]
        lines = []
        for r in cells:
            padded = [c.ljust(w) for c, w in zip(r, widths, strict=True)]
            lines.append("  ".join(padded).rstrip())
        return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def print_table(table: Table, out: TextIO | None = None) -> None:
    stream = out or sys.stdout
    stream.write(table.render() + "\n")


def print_json(data: Any, out: TextIO | None = None) -> None:
    stream = out or sys.stdout
    json.dump(data, stream, indent=2, sort_keys=False)
    stream.write("\n")


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000.0 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} GB"
