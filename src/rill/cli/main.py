"""The ``rill`` command: a thin argparse front whose subcommands are imported only when used.

Each subcommand lives in its own module exposing ``main(argv: list[str]) -> int``. A subcommand
whose module is not part of this build prints one line and exits 2; any other failure prints one
line (no traceback) and exits 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("rill.cli.broker", "run a broker (single node on 127.0.0.1:9092 with data in ./rill-data)"),
    "topics": ("rill.cli.topics", "list, create, describe, alter and delete topics"),
    "configs": ("rill.cli.configs", "describe and alter topic and broker configs"),
    "acls": ("rill.cli.acls", "add, list and remove ACLs (kafka-acls's options)"),
    "produce": ("rill.cli.produce", "write records to a topic"),
    "consume": ("rill.cli.consume", "read records from a topic"),
    "groups": ("rill.cli.groups", "list, describe, reset and delete consumer groups"),
    "share-groups": ("rill.cli.share_groups", "list and describe share groups"),
    "transactions": ("rill.cli.transactions", "list and describe transactions, find and abort hanging ones"),
    "log-dirs": ("rill.cli.log_dirs", "describe brokers' log dirs and move replicas between them"),
    "dump-log": ("rill.cli.dump_log", "print the batches and indexes of log segment files"),
    "pipeline": ("rill.cli.pipeline", "run a data pipeline job"),
    "cluster": ("rill.cli.cluster", "run a local replicated cluster (ZooKeeper and N brokers) in the foreground"),
    "mirror": ("rill.cli.mirror", "copy topics and consumer group offsets from one cluster to another"),
    "registry": ("rill.cli.registry", "run a schema registry (Confluent's REST API) stored in a topic"),
    "console": ("rill.cli.console", "serve a web console to see and operate a cluster in a browser"),
}

EXIT_ERROR = 1
EXIT_USAGE = 2
DISTRIBUTION = "rill-broker"  # the name pip knows this project by (the package and the command are "rill")


def _parser() -> argparse.ArgumentParser:
    width = max(len(name) for name in SUBCOMMANDS)
    lines = [f"  {name:<{width}} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    parser = argparse.ArgumentParser(
        prog="rill",
        description="Rill: an event streaming platform that speaks the Kafka protocol.",
        epilog="commands:\n" + "\n".join(lines) + "\n\nRun 'rill COMMAND --help' for a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument("command", nargs="?", metavar="COMMAND", help="one of: " + ", ".join(SUBCOMMANDS))
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if args and args[0] in SUBCOMMANDS:
        # Keep everything after the command for the command itself (including its --help).
        command, rest = args[0], args[1:]
    else:
        ns = parser.parse_args(args)
        if ns.version:
            print(f"rill {_version()}")
            return 0
        if ns.command is None:
            parser.print_help()
            return EXIT_USAGE
        print(f"rill: unknown command {ns.command!r} (commands: {', '.join(SUBCOMMANDS)})", file=sys.stderr)
        return EXIT_USAGE
    module_name = SUBCOMMANDS[command][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and module_name.startswith(e.name):
            print(f"rill {command}: not available in this build ({module_name} is missing)", file=sys.stderr)
            return EXIT_USAGE
        print(f"rill {command}: cannot start: {e}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:
        print(f"rill {command}: cannot start: {e}", file=sys.stderr)
        return EXIT_ERROR
    try:
        code = module.main(rest)
    except KeyboardInterrupt:
        return 130
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_ERROR)
    except BrokenPipeError:
        return EXIT_ERROR
    except Exception as e:
        print(f"rill {command}: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    return int(code or 0)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version(DISTRIBUTION)
    except Exception:
        return "unknown"
